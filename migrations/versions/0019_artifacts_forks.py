"""artifact store keys and job lineage (reserved)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 06:00:00
"""

from collections.abc import Sequence

revision: str = '0019'
down_revision: str | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
