"""rollout gateway episodes and calls (reserved)

Revision ID: 0021
Revises: 0019
Create Date: 2026-12-05 06:00:00
"""

from collections.abc import Sequence

revision: str = '0021'
down_revision: str | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
