"""artifact store keys and job lineage

Shared by two helpers: the fork part (jobs.parent_job_id / parent_iteration) is below; the artifact-store part may
add its own columns in the same upgrade()/downgrade() (keep both halves).

Revision ID: 0019
Revises: 0017
Create Date: 2026-12-05 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0019'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # forks: the job and checkpoint iteration a job was forked from (POST /jobs/{id}/fork)
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('parent_job_id', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('parent_iteration', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_jobs_parent_job_id_jobs', 'jobs', ['parent_job_id'], ['id'], ondelete='SET NULL')
        batch.create_index('ix_jobs_parent_job_id', ['parent_job_id'])


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_index('ix_jobs_parent_job_id')
        batch.drop_constraint('fk_jobs_parent_job_id_jobs', type_='foreignkey')
        batch.drop_column('parent_iteration')
        batch.drop_column('parent_job_id')
