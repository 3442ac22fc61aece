"""Pods plugged by a container runtime: ``pods.runtime`` (issue 11, containers on clusters).

Revision ID: 0013
Revises: 0012
"""

from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.add_column(sa.Column('runtime', sa.String(length=16), nullable=False, server_default=''))


def downgrade() -> None:
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.drop_column('runtime')
