"""Pods on cluster nodes and cluster networks (each node's lease), issue 5.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 20:42:16.289449
"""

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('coe_clusternets',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('driver', sa.String(length=32), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('leases', sa.JSON(), nullable=False),
    sa.Column('nodes', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('coe_clusternets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_coe_clusternets_project_id'), ['project_id'], unique=False)

    op.create_table('pods',
    sa.Column('cluster_id', sa.String(length=36), nullable=False),
    sa.Column('node', sa.String(length=255), nullable=False),
    sa.Column('sandbox_id', sa.String(length=36), nullable=False),
    sa.Column('address', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('status_reason', sa.String(length=255), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('cluster_id', 'address'),
    sa.UniqueConstraint('cluster_id', 'name')
    )
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pods_cluster_id'), ['cluster_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_pods_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_pods_project_id'), ['project_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pods_project_id'))
        batch_op.drop_index(batch_op.f('ix_pods_name'))
        batch_op.drop_index(batch_op.f('ix_pods_cluster_id'))

    op.drop_table('pods')
    with op.batch_alter_table('coe_clusternets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_coe_clusternets_project_id'))

    op.drop_table('coe_clusternets')
