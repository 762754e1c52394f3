"""run tags and notes

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 06:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('tags', sa.JSON(), nullable=False, server_default='[]'))
        batch.add_column(sa.Column('notes', sa.Text(), nullable=False, server_default=''))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('notes')
        batch.drop_column('tags')
