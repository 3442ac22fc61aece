"""Roles as Keystone objects with ids, seeded; application credentials (issue 10).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 16:00:00
"""

import uuid

from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

# Keystone's bootstrap roles and Octavia's; role assignments name them.
SEEDED = ("admin", "member", "reader", "load-balancer_member", "load-balancer_observer",
          "load-balancer_global_observer", "load-balancer_admin")


def upgrade() -> None:
    roles = op.create_table('roles',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.bulk_insert(roles, [{"id": uuid.uuid4().hex, "name": name, "description": ""} for name in SEEDED])
    op.create_table('application_credentials',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('secret_hash', sa.Text(), nullable=False),
    sa.Column('roles', sa.JSON(), nullable=False),
    sa.Column('expires_at', sa.DateTime(), nullable=True),
    sa.Column('unrestricted', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('user_id', 'name')
    )
    with op.batch_alter_table('application_credentials', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_application_credentials_user_id'), ['user_id'], unique=False)


def downgrade() -> None:
    op.drop_table('application_credentials')
    op.drop_table('roles')
