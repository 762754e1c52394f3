"""evaluation suites, checkpoint scores and the best checkpoint

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'evaluations',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('team_id', sa.Integer(), sa.ForeignKey('teams.id', ondelete='CASCADE'), nullable=False),
        sa.Column('job_id', sa.Integer(), sa.ForeignKey('jobs.id', ondelete='CASCADE'), nullable=True),
        sa.Column('iteration', sa.Integer(), nullable=True),
        sa.Column('model', sa.String(400), nullable=False),
        sa.Column('model_dir', sa.String(1000), nullable=False),
        sa.Column('suite_name', sa.String(64), nullable=False),
        sa.Column('suite', sa.JSON(), nullable=False),
        sa.Column('dataset_path', sa.String(1000), nullable=True),
        sa.Column('seed', sa.Integer(), nullable=False, server_default='0'),
        sa.Column('generation', sa.JSON(), nullable=True),
        sa.Column('status', sa.String(16), nullable=False, server_default='queued'),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('summary', sa.JSON(), nullable=True),
        sa.Column('rows', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index('ix_evaluations_team_id', 'evaluations', ['team_id'])
    op.create_index('ix_evaluations_job_id', 'evaluations', ['job_id'])
    with op.batch_alter_table('checkpoints') as batch:
        batch.add_column(sa.Column('scores', sa.JSON(), nullable=False, server_default='{}'))
        batch.add_column(sa.Column('best', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('checkpoints') as batch:
        batch.drop_column('best')
        batch.drop_column('scores')
    op.drop_index('ix_evaluations_job_id', 'evaluations')
    op.drop_index('ix_evaluations_team_id', 'evaluations')
    op.drop_table('evaluations')
