"""model registry: state, source, card and download progress; per-team Hugging Face token (encrypted)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.add_column(sa.Column('state', sa.String(length=20), nullable=False, server_default='ready'))
        batch.add_column(sa.Column('error', sa.Text(), nullable=True))
        batch.add_column(sa.Column('source', sa.String(length=20), nullable=False, server_default='directory'))
        batch.add_column(sa.Column('hub_id', sa.String(length=200), nullable=True))
        batch.add_column(sa.Column('revision', sa.String(length=200), nullable=True))
        batch.add_column(sa.Column('card', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('progress', sa.JSON(), nullable=True))
    with op.batch_alter_table('teams') as batch:
        batch.add_column(sa.Column('hub_token_sealed', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('teams') as batch:
        batch.drop_column('hub_token_sealed')
    with op.batch_alter_table('models') as batch:
        for column in ('progress', 'card', 'revision', 'hub_id', 'source', 'error', 'state'):
            batch.drop_column(column)
