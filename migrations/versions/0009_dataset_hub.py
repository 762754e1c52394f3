"""datasets from the Hub: state (ready for every existing dataset), error, source, hub_id, revision, split

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 08:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('datasets') as batch:
        batch.add_column(sa.Column('state', sa.String(length=20), nullable=False, server_default='ready'))
        batch.add_column(sa.Column('error', sa.Text(), nullable=True))
        batch.add_column(sa.Column('source', sa.String(length=20), nullable=False, server_default='upload'))
        batch.add_column(sa.Column('hub_id', sa.String(length=200), nullable=True))
        batch.add_column(sa.Column('revision', sa.String(length=200), nullable=True))
        batch.add_column(sa.Column('split', sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('datasets') as batch:
        for column in ('split', 'revision', 'hub_id', 'source', 'error', 'state'):
            batch.drop_column(column)
