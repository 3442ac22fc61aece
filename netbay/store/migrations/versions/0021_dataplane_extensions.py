"""Neutron extensions with a dataplane meaning (issue 29, neutron2): floating IP port
forwardings; QoS policies and their rules, and the ``qos_policy_id`` of ports and networks;
address groups and the ``remote_address_group_id`` of security group rules; the default
security group rule templates, seeded with Neutron's four; dns-integration's ``dns_name``
of ports and floating IPs and ``dns_domain`` of networks and floating IPs; metering labels
and their rules.

Revision ID: 0021
Revises: 0020
"""

import uuid
from datetime import datetime, UTC

from alembic import op
import sqlalchemy as sa


revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('port_forwardings',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('floatingip_id', sa.String(length=36), nullable=False),
    sa.Column('protocol', sa.String(length=16), nullable=False),
    sa.Column('external_port', sa.Integer(), nullable=False),
    sa.Column('internal_port', sa.Integer(), nullable=False),
    sa.Column('internal_ip_address', sa.String(length=64), nullable=False),
    sa.Column('internal_port_id', sa.String(length=36), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['floatingip_id'], ['floatingips.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['internal_port_id'], ['ports.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('floatingip_id', 'external_port', 'protocol', name='uniq_pf_external'),
    sa.UniqueConstraint('internal_port_id', 'internal_ip_address', 'internal_port', 'protocol',
                        name='uniq_pf_internal'),
    )
    with op.batch_alter_table('port_forwardings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_port_forwardings_floatingip_id'), ['floatingip_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_port_forwardings_internal_port_id'), ['internal_port_id'],
                              unique=False)
        batch_op.create_index(batch_op.f('ix_port_forwardings_project_id'), ['project_id'], unique=False)

    op.create_table('qos_policies',
    sa.Column('shared', sa.Boolean(), nullable=False),
    sa.Column('is_default', sa.Boolean(), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('qos_policies', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_qos_policies_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_qos_policies_project_id'), ['project_id'], unique=False)
    op.create_table('qos_rules',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('policy_id', sa.String(length=36), nullable=False),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('direction', sa.String(length=8), nullable=False),
    sa.Column('max_kbps', sa.Integer(), nullable=True),
    sa.Column('max_burst_kbps', sa.Integer(), nullable=True),
    sa.Column('dscp_mark', sa.Integer(), nullable=True),
    sa.Column('min_kbps', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['policy_id'], ['qos_policies.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('policy_id', 'type', 'direction', name='uniq_qos_rule_kind'),
    )
    with op.batch_alter_table('qos_rules', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_qos_rules_policy_id'), ['policy_id'], unique=False)
    for table in ('ports', 'networks'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('qos_policy_id', sa.String(length=36), nullable=True))
            batch_op.create_index(batch_op.f(f'ix_{table}_qos_policy_id'), ['qos_policy_id'], unique=False)

    op.create_table('address_groups',
    sa.Column('addresses', sa.JSON(), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('address_groups', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_address_groups_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_address_groups_project_id'), ['project_id'], unique=False)
    with op.batch_alter_table('securitygrouprules', schema=None) as batch_op:
        batch_op.add_column(sa.Column('remote_address_group_id', sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f('ix_securitygrouprules_remote_address_group_id'),
                              ['remote_address_group_id'], unique=False)


    templates = op.create_table('default_security_group_rules',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('direction', sa.String(length=8), nullable=False),
    sa.Column('ethertype', sa.String(length=8), nullable=False),
    sa.Column('protocol', sa.String(length=40), nullable=True),
    sa.Column('port_range_min', sa.Integer(), nullable=True),
    sa.Column('port_range_max', sa.Integer(), nullable=True),
    sa.Column('remote_ip_prefix', sa.String(length=64), nullable=True),
    sa.Column('remote_group_id', sa.String(length=36), nullable=True),
    sa.Column('remote_address_group_id', sa.String(length=36), nullable=True),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('used_in_default_sg', sa.Boolean(), nullable=False),
    sa.Column('used_in_non_default_sg', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    )
    op.create_table('metering_labels',
    sa.Column('shared', sa.Boolean(), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('metering_labels', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_metering_labels_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_metering_labels_project_id'), ['project_id'], unique=False)
    op.create_table('metering_label_rules',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('metering_label_id', sa.String(length=36), nullable=False),
    sa.Column('direction', sa.String(length=8), nullable=False),
    sa.Column('excluded', sa.Boolean(), nullable=False),
    sa.Column('remote_ip_prefix', sa.String(length=64), nullable=True),
    sa.Column('source_ip_prefix', sa.String(length=64), nullable=True),
    sa.Column('destination_ip_prefix', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['metering_label_id'], ['metering_labels.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('metering_label_rules', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_metering_label_rules_metering_label_id'), ['metering_label_id'],
                              unique=False)
        batch_op.create_index(batch_op.f('ix_metering_label_rules_project_id'), ['project_id'], unique=False)
    for table, columns in (('ports', ('dns_name',)), ('networks', ('dns_domain',)),
                           ('floatingips', ('dns_name', 'dns_domain'))):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for column in columns:
                batch_op.add_column(sa.Column(column, sa.String(length=255), nullable=False, server_default=''))
    now = datetime.now(UTC).replace(tzinfo=None)
    # Neutron's defaults: egress anywhere for every group; ingress from the group itself
    # for the default group only.
    op.bulk_insert(templates, [
        {"id": str(uuid.uuid4()), "direction": direction, "ethertype": ethertype, "protocol": None,
         "port_range_min": None, "port_range_max": None, "remote_ip_prefix": None,
         "remote_group_id": "PARENT" if direction == "ingress" else None, "remote_address_group_id": None,
         "description": "", "used_in_default_sg": True, "used_in_non_default_sg": direction == "egress",
         "created_at": now}
        for direction in ("egress", "ingress") for ethertype in ("IPv4", "IPv6")])


def downgrade() -> None:
    for table, columns in (('ports', ('dns_name',)), ('networks', ('dns_domain',)),
                           ('floatingips', ('dns_name', 'dns_domain'))):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for column in columns:
                batch_op.drop_column(column)
    op.drop_table('default_security_group_rules')
    op.drop_table('metering_label_rules')
    op.drop_table('metering_labels')
    with op.batch_alter_table('securitygrouprules', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_securitygrouprules_remote_address_group_id'))
        batch_op.drop_column('remote_address_group_id')
    op.drop_table('address_groups')
    for table in ('ports', 'networks'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f(f'ix_{table}_qos_policy_id'))
            batch_op.drop_column('qos_policy_id')
    op.drop_table('qos_rules')
    op.drop_table('qos_policies')
    op.drop_table('port_forwardings')
