"""driver failover, instance errors, per-sample reward details

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 05:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('driver_epoch', sa.Integer(), nullable=False, server_default='0'))
        batch.add_column(sa.Column('driver_failures', sa.Integer(), nullable=False, server_default='0'))
    with op.batch_alter_table('generation_instances') as batch:
        batch.add_column(sa.Column('error', sa.Text(), nullable=True))
    with op.batch_alter_table('job_samples') as batch:
        batch.add_column(sa.Column('reward_components', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('reward_error', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_samples') as batch:
        batch.drop_column('reward_error')
        batch.drop_column('reward_components')
    with op.batch_alter_table('generation_instances') as batch:
        batch.drop_column('error')
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('driver_failures')
        batch.drop_column('driver_epoch')
