"""Security group rules keep ``remote_ip_prefix`` as the client wrote it, as Neutron does
(issue 29, neutron6), and hold its network form in ``normalized_cidr`` (what the rule's
``normalized_cidr`` shows, filters and sorts on). The rules there are were stored
normalized already: their ``normalized_cidr`` is their ``remote_ip_prefix``.

Revision ID: 0023_neutron6
Revises: 0022_neutron3
"""

from alembic import op
import sqlalchemy as sa


revision = '0023_neutron6'
down_revision = '0022_neutron3'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('securitygrouprules', schema=None) as batch_op:
        batch_op.add_column(sa.Column('normalized_cidr', sa.String(length=64), nullable=True))
    op.execute("UPDATE securitygrouprules SET normalized_cidr = remote_ip_prefix")


def downgrade() -> None:
    # Back to one normalized column: the network form is what the old code stored.
    op.execute("UPDATE securitygrouprules SET remote_ip_prefix = normalized_cidr")
    with op.batch_alter_table('securitygrouprules', schema=None) as batch_op:
        batch_op.drop_column('normalized_cidr')
