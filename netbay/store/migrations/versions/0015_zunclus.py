"""Containers placed on a cluster node by the container API (issue 11, Zun hints).

Revision ID: 0015
Revises: 0014
"""

from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('containers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cluster_id', sa.String(length=36), nullable=False, server_default=''))
        batch_op.add_column(sa.Column('node', sa.String(length=255), nullable=False, server_default=''))
        batch_op.add_column(sa.Column('pod_id', sa.String(length=36), nullable=False, server_default=''))


def downgrade() -> None:
    with op.batch_alter_table('containers', schema=None) as batch_op:
        batch_op.drop_column('pod_id')
        batch_op.drop_column('node')
        batch_op.drop_column('cluster_id')
