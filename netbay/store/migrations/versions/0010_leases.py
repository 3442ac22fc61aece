"""Cluster work leases: one process at a time builds, scales or deletes a cluster (issue 13).

Revision ID: 0010_leases
Revises: 0009
"""

from alembic import op
import sqlalchemy as sa


revision = '0010_leases'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('coe_work_leases',
    sa.Column('cluster_id', sa.String(length=36), nullable=False),
    sa.Column('owner', sa.String(length=128), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('expires_at', sa.DateTime(), nullable=False),
    sa.Column('taken_at', sa.DateTime(), nullable=False),
    sa.Column('takeovers', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('cluster_id')
    )
    with op.batch_alter_table('coe_work_leases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_coe_work_leases_expires_at'), ['expires_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('coe_work_leases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_coe_work_leases_expires_at'))
    op.drop_table('coe_work_leases')
