"""usage records and budgets: per-iteration/per-call usage rows, the team's monthly device-hour budget, the API key
that created a job and the budget that paused it

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 05:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'usage_records',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('team_id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=True),
        sa.Column('api_key_id', sa.Integer(), nullable=True),
        sa.Column('pool', sa.String(length=16), nullable=False),
        sa.Column('source', sa.String(length=16), nullable=False),
        sa.Column('iteration', sa.Integer(), nullable=True),
        sa.Column('device_seconds', sa.Double(), nullable=False),
        sa.Column('tokens_generated', sa.Integer(), nullable=False),
        sa.Column('tokens_trained', sa.Integer(), nullable=False),
        sa.Column('recorded_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['api_key_id'], ['api_keys.id'], name=op.f('fk_usage_records_api_key_id_api_keys'),
                                ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_usage_records_job_id_jobs'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_usage_records_team_id_teams'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_records')),
        sa.UniqueConstraint('job_id', 'iteration', 'pool', name=op.f('uq_usage_records_job_id_iteration_pool')),
    )
    op.create_index(op.f('ix_usage_records_job_id'), 'usage_records', ['job_id'], unique=False)
    op.create_index(op.f('ix_usage_records_api_key_id'), 'usage_records', ['api_key_id'], unique=False)
    op.create_index('ix_usage_records_team_id_recorded_at', 'usage_records', ['team_id', 'recorded_at'], unique=False)
    with op.batch_alter_table('teams') as batch:
        batch.add_column(sa.Column('max_device_hours_per_month', sa.Double(), nullable=True))
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('created_by_key_id', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('paused_for', sa.String(length=64), nullable=True))
        batch.create_foreign_key(op.f('fk_jobs_created_by_key_id_api_keys'), 'api_keys', ['created_by_key_id'],
                                 ['id'], ondelete='SET NULL')


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_constraint(op.f('fk_jobs_created_by_key_id_api_keys'), type_='foreignkey')
        batch.drop_column('paused_for')
        batch.drop_column('created_by_key_id')
    with op.batch_alter_table('teams') as batch:
        batch.drop_column('max_device_hours_per_month')
    op.drop_index('ix_usage_records_team_id_recorded_at', table_name='usage_records')
    op.drop_index(op.f('ix_usage_records_api_key_id'), table_name='usage_records')
    op.drop_index(op.f('ix_usage_records_job_id'), table_name='usage_records')
    op.drop_table('usage_records')
