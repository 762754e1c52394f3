"""sessions and operator: revoked session tokens, failed-login throttle, platform admins, password-change cutoff

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 05:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('revoked_sessions',
    sa.Column('jti', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_revoked_sessions_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('jti', name=op.f('pk_revoked_sessions'))
    )
    with op.batch_alter_table('revoked_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_revoked_sessions_user_id'), ['user_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_revoked_sessions_expires_at'), ['expires_at'], unique=False)

    op.create_table('login_failures',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=400), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_login_failures'))
    )
    with op.batch_alter_table('login_failures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_login_failures_key'), ['key'], unique=False)
        batch_op.create_index(batch_op.f('ix_login_failures_created_at'), ['created_at'], unique=False)

    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('is_platform_admin', sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column('sessions_valid_after', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('sessions_valid_after')
        batch_op.drop_column('is_platform_admin')
    with op.batch_alter_table('login_failures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_login_failures_created_at'))
        batch_op.drop_index(batch_op.f('ix_login_failures_key'))
    op.drop_table('login_failures')
    with op.batch_alter_table('revoked_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_revoked_sessions_expires_at'))
        batch_op.drop_index(batch_op.f('ix_revoked_sessions_user_id'))
    op.drop_table('revoked_sessions')
