"""alert rules and their deliveries

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 06:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'alert_rules',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('team_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('events', sa.JSON(), nullable=False),
        sa.Column('channel', sa.String(length=16), nullable=False),
        sa.Column('url', sa.String(length=2000), nullable=True),
        sa.Column('recipients', sa.JSON(), nullable=False),
        sa.Column('secret_encrypted', sa.Text(), nullable=True),
        sa.Column('enabled', sa.Boolean(), nullable=False),
        sa.Column('created_by_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['created_by_id'], ['users.id'], name=op.f('fk_alert_rules_created_by_id_users'),
                                ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_alert_rules_team_id_teams'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_alert_rules')),
    )
    op.create_index(op.f('ix_alert_rules_team_id'), 'alert_rules', ['team_id'], unique=False)
    op.create_table(
        'alert_deliveries',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('rule_id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=True),
        sa.Column('event_id', sa.Integer(), nullable=True),
        sa.Column('event', sa.String(length=32), nullable=False),
        sa.Column('payload', sa.JSON(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_status_code', sa.Integer(), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('log', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['event_id'], ['job_events.id'], name=op.f('fk_alert_deliveries_event_id_job_events'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_alert_deliveries_job_id_jobs'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['rule_id'], ['alert_rules.id'], name=op.f('fk_alert_deliveries_rule_id_alert_rules'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_alert_deliveries')),
        sa.UniqueConstraint('rule_id', 'event_id', name=op.f('uq_alert_deliveries_rule_id_event_id')),
    )
    op.create_index(op.f('ix_alert_deliveries_rule_id'), 'alert_deliveries', ['rule_id'], unique=False)
    op.create_index('ix_alert_deliveries_state_next_attempt_at', 'alert_deliveries', ['state', 'next_attempt_at'],
                    unique=False)


def downgrade() -> None:
    op.drop_index('ix_alert_deliveries_state_next_attempt_at', table_name='alert_deliveries')
    op.drop_index(op.f('ix_alert_deliveries_rule_id'), table_name='alert_deliveries')
    op.drop_table('alert_deliveries')
    op.drop_index(op.f('ix_alert_rules_team_id'), table_name='alert_rules')
    op.drop_table('alert_rules')
