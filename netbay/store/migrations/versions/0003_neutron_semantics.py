"""Networks: the provider extension's network type and physical network, and the
``port-security`` default their new ports inherit (issue 10).

Revision ID: 0003
Revises: 0002
"""

from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('network_type', sa.String(length=32), server_default='vxlan',
                                      nullable=False))
        batch_op.add_column(sa.Column('physical_network', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('port_security_enabled', sa.Boolean(), server_default=sa.true(),
                                      nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.drop_column('port_security_enabled')
        batch_op.drop_column('physical_network')
        batch_op.drop_column('network_type')
