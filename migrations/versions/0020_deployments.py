"""deployments (issue 40)

Reserved for one helper: it fills upgrade()/downgrade(); left empty it is removed and the chain relinked.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 08:40:00
"""

from collections.abc import Sequence

revision: str = '0020'
down_revision: str | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
