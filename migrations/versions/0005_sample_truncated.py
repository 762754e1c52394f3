"""samples record whether max_tokens truncated them

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 06:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('job_samples') as batch:
        batch.add_column(sa.Column('truncated', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('job_samples') as batch:
        batch.drop_column('truncated')
