"""Floating IP port forwardings of port ranges (Neutron's
``floating-ip-port-forwarding-port-ranges``, issue 29, neutron3): each forwarding's last
external and internal port; existing forwardings are single ports (last = first).

Revision ID: 0022_neutron3
Revises: 0021
"""

from alembic import op
import sqlalchemy as sa


revision = '0022_neutron3'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('port_forwardings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('external_port_end', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('internal_port_end', sa.Integer(), nullable=True))
    op.execute("UPDATE port_forwardings SET external_port_end = external_port, internal_port_end = internal_port")
    with op.batch_alter_table('port_forwardings', schema=None) as batch_op:
        batch_op.alter_column('external_port_end', existing_type=sa.Integer(), nullable=False)
        batch_op.alter_column('internal_port_end', existing_type=sa.Integer(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('port_forwardings', schema=None) as batch_op:
        batch_op.drop_column('internal_port_end')
        batch_op.drop_column('external_port_end')
