"""hardening: indexes for the pages dashboards poll (newest samples, events after an id)

Revision ID: 0015
Revises: 0013
Create Date: 2026-12-05 05:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0015'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index('ix_job_samples_job_id_id', 'job_samples', ['job_id', 'id'])
    op.create_index('ix_job_events_job_id_id', 'job_events', ['job_id', 'id'])


def downgrade() -> None:
    op.drop_index('ix_job_events_job_id_id', table_name='job_events')
    op.drop_index('ix_job_samples_job_id_id', table_name='job_samples')
