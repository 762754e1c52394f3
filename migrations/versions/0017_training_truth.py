"""training-inference mismatch and distillation records (reserved)

Used by issue #40's training truth (helper 40a): each stored sample keeps the trajectory explorer's per-token record
(`tokens`) and its mismatch (`mismatch`, mean k3 over its on-policy tokens). Another helper may add its own
operations below; keep each block separate.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0017'
down_revision: str | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('job_samples') as batch:
        batch.add_column(sa.Column('tokens', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('mismatch', sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_samples') as batch:
        batch.drop_column('mismatch')
        batch.drop_column('tokens')
