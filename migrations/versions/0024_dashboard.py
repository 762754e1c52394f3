"""model versions (issue 39)

A name registered again in a team adds a version (models.version, unique per team + name + version); a job keeps
the version it was submitted with (jobs.model_id; existing jobs: their model's only version).

Revision ID: 0024
Revises: 0020
Create Date: 2026-12-05 08:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0024'
down_revision: str | None = '0020'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.add_column(sa.Column('version', sa.Integer(), server_default='1', nullable=False))
        batch.drop_constraint('uq_models_team_id_name', type_='unique')
        batch.create_unique_constraint('uq_models_team_id_name_version', ['team_id', 'name', 'version'])
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('model_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_jobs_model_id_models', 'models', ['model_id'], ['id'], ondelete='SET NULL')
        batch.create_index('ix_jobs_model_id', ['model_id'])
    # every existing model is version 1 of its name: a job's model is the one its spec names in its team
    op.execute("UPDATE jobs SET model_id = (SELECT models.id FROM models WHERE models.team_id = jobs.team_id "
               "AND models.name = json_extract_path_text(jobs.spec, 'model'))"
               if op.get_bind().dialect.name == 'postgresql' else
               "UPDATE jobs SET model_id = (SELECT models.id FROM models WHERE models.team_id = jobs.team_id "
               "AND models.name = json_extract(jobs.spec, '$.model'))")


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_index('ix_jobs_model_id')
        batch.drop_constraint('fk_jobs_model_id_models', type_='foreignkey')
        batch.drop_column('model_id')
    op.execute("DELETE FROM models WHERE version > 1")  # the unique name comes back: later versions cannot stay
    with op.batch_alter_table('models') as batch:
        batch.drop_constraint('uq_models_team_id_name_version', type_='unique')
        batch.create_unique_constraint('uq_models_team_id_name', ['team_id', 'name'])
        batch.drop_column('version')
