"""experiment trackers: team credentials and per-job tracker runs

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'tracker_credentials',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('team_id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('settings', sa.JSON(), nullable=False),
        sa.Column('secrets_encrypted', sa.Text(), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_tracker_credentials_team_id_teams'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tracker_credentials')),
        sa.UniqueConstraint('team_id', 'kind', name=op.f('uq_tracker_credentials_team_id_kind')),
    )
    op.create_index(op.f('ix_tracker_credentials_team_id'), 'tracker_credentials', ['team_id'], unique=False)
    op.create_table(
        'tracker_runs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('tracker', sa.String(length=32), nullable=False),
        sa.Column('run_ref', sa.String(length=200), nullable=True),
        sa.Column('sent_iteration', sa.Integer(), nullable=False),
        sa.Column('finished', sa.Boolean(), nullable=False),
        sa.Column('down_since', sa.DateTime(timezone=True), nullable=True),
        sa.Column('retry_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_tracker_runs_job_id_jobs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tracker_runs')),
        sa.UniqueConstraint('job_id', 'tracker', name=op.f('uq_tracker_runs_job_id_tracker')),
    )
    op.create_index(op.f('ix_tracker_runs_job_id'), 'tracker_runs', ['job_id'], unique=False)
    op.create_index(op.f('ix_tracker_runs_finished'), 'tracker_runs', ['finished'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_tracker_runs_finished'), table_name='tracker_runs')
    op.drop_index(op.f('ix_tracker_runs_job_id'), table_name='tracker_runs')
    op.drop_table('tracker_runs')
    op.drop_index(op.f('ix_tracker_credentials_team_id'), table_name='tracker_credentials')
    op.drop_table('tracker_credentials')
