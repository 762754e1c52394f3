"""deployments (issue 40)

A deployment pins a registered base model with some of the team's adapters (served on /openai/v1 by replicas of
one multi-LoRA instance); the name is unique within the team.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 08:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0020'
down_revision: str | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'deployments',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('team_id', sa.Integer(), sa.ForeignKey('teams.id', ondelete='CASCADE'), nullable=False),
        sa.Column('name', sa.String(64), nullable=False),
        sa.Column('base_model', sa.String(400), nullable=False),
        sa.Column('adapters', sa.JSON(), nullable=False),
        sa.Column('min_replicas', sa.Integer(), nullable=False, server_default='0'),
        sa.Column('max_replicas', sa.Integer(), nullable=False, server_default='1'),
        sa.Column('idle_s', sa.Double(), nullable=False, server_default='300'),
        sa.Column('version', sa.Integer(), nullable=False, server_default='1'),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint('team_id', 'name', name=op.f('uq_deployments_team_id_name')),
    )
    op.create_index('ix_deployments_team_id', 'deployments', ['team_id'])


def downgrade() -> None:
    op.drop_index('ix_deployments_team_id', table_name='deployments')
    op.drop_table('deployments')
