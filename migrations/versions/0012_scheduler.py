"""scheduler: priorities, fair-share weights, queue state (reserved)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 05:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('teams') as batch:
        batch.add_column(sa.Column('share', sa.Double(), nullable=False, server_default='1'))
        batch.add_column(sa.Column('max_priority', sa.String(16), nullable=False, server_default='normal'))


def downgrade() -> None:
    with op.batch_alter_table('teams') as batch:
        batch.drop_column('max_priority')
        batch.drop_column('share')
