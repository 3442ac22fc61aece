"""Roles as Keystone objects with ids, seeded (issue 10).

Revision ID: 0003_keystone
Revises: 0002
Create Date: 2026-11-24 16:00:00
"""

import uuid

from alembic import op
import sqlalchemy as sa


revision = '0003_keystone'
down_revision = '0002'
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


def downgrade() -> None:
    op.drop_table('roles')
