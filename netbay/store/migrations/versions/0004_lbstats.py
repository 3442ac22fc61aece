"""Load balancer listener statistics reported by the dataplane, issue 17.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 16:10:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('lb_listener_stats',
    sa.Column('listener_id', sa.String(length=36), nullable=False),
    sa.Column('loadbalancer_id', sa.String(length=36), nullable=False),
    sa.Column('epoch', sa.String(length=64), nullable=False),
    sa.Column('bytes_in', sa.BigInteger(), nullable=False),
    sa.Column('bytes_out', sa.BigInteger(), nullable=False),
    sa.Column('total_connections', sa.BigInteger(), nullable=False),
    sa.Column('active_connections', sa.BigInteger(), nullable=False),
    sa.Column('request_errors', sa.BigInteger(), nullable=False),
    sa.Column('carried_bytes_in', sa.BigInteger(), nullable=False),
    sa.Column('carried_bytes_out', sa.BigInteger(), nullable=False),
    sa.Column('carried_total_connections', sa.BigInteger(), nullable=False),
    sa.Column('carried_request_errors', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('listener_id')
    )
    with op.batch_alter_table('lb_listener_stats', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_lb_listener_stats_loadbalancer_id'), ['loadbalancer_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('lb_listener_stats', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_lb_listener_stats_loadbalancer_id'))
    op.drop_table('lb_listener_stats')
