"""evaluation suites, checkpoint scores, deployments (reserved)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 06:00:00
"""

from collections.abc import Sequence

revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
