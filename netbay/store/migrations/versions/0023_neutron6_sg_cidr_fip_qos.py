"""Issue 29 (neutron6): security group rules keep ``remote_ip_prefix`` as the client
wrote it, as Neutron does, and hold its network form in ``normalized_cidr`` (what the
rule's ``normalized_cidr`` shows, filters and sorts on) — the rules there are were stored
normalized already: their ``normalized_cidr`` is their ``remote_ip_prefix``; floating IPs
get a QoS policy (``qos-fip``: ``qos_policy_id``, none for those there are).

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
    with op.batch_alter_table('floatingips', schema=None) as batch_op:
        batch_op.add_column(sa.Column('qos_policy_id', sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f('ix_floatingips_qos_policy_id'), ['qos_policy_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('floatingips', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_floatingips_qos_policy_id'))
        batch_op.drop_column('qos_policy_id')
    # Back to one normalized column: the network form is what the old code stored.
    op.execute("UPDATE securitygrouprules SET remote_ip_prefix = normalized_cidr")
    with op.batch_alter_table('securitygrouprules', schema=None) as batch_op:
        batch_op.drop_column('normalized_cidr')
