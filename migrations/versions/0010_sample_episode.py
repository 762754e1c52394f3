"""samples of multi-turn episodes keep their conversation and loss-mask segments

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-20 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('job_samples') as batch:
        batch.add_column(sa.Column('episode', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_samples') as batch:
        batch.drop_column('episode')
