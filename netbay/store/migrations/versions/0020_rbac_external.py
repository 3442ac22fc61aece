"""Neutron's external-network RBAC, default external network and address scopes
(issue 29, item 4): ``networks.is_default``; the ``*`` ``access_as_external`` policy
every external network carries in Neutron, made for the external networks there are
(netbay now decides who sees an external network by its policies); ``address_scopes``
and ``subnetpools.address_scope_id``; ``subnets.service_types``; ``ports.extra_dhcp_opts``.

Revision ID: 0020
Revises: 0019
"""

import uuid

from alembic import op
import sqlalchemy as sa


revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('is_default', sa.Boolean(), server_default=sa.false(), nullable=False))
    networks = sa.table('networks', sa.column('id', sa.String), sa.column('project_id', sa.String),
                        sa.column('external', sa.Boolean))
    policies = sa.table('rbac_policies', sa.column('id', sa.String), sa.column('project_id', sa.String),
                        sa.column('object_type', sa.String), sa.column('object_id', sa.String),
                        sa.column('action', sa.String), sa.column('target_project', sa.String))
    bind = op.get_bind()
    external = bind.execute(sa.select(networks.c.id, networks.c.project_id)
                            .where(networks.c.external.is_(True))).all()
    rows = [{"id": str(uuid.uuid4()), "project_id": project, "object_type": "network", "object_id": net,
             "action": "access_as_external", "target_project": "*"} for net, project in external]
    if rows:
        bind.execute(policies.insert(), rows)
    with op.batch_alter_table('subnets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('service_types', sa.JSON(), nullable=True))
    with op.batch_alter_table('ports', schema=None) as batch_op:
        batch_op.add_column(sa.Column('extra_dhcp_opts', sa.JSON(), nullable=True))
    op.create_table('address_scopes',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('shared', sa.Boolean(), nullable=False),
    sa.Column('ip_version', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'))
    op.create_index(op.f('ix_address_scopes_project_id'), 'address_scopes', ['project_id'], unique=False)
    with op.batch_alter_table('subnetpools', schema=None) as batch_op:
        batch_op.add_column(sa.Column('address_scope_id', sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f('ix_subnetpools_address_scope_id'), ['address_scope_id'], unique=False)
        batch_op.create_foreign_key('fk_subnetpools_address_scope_id', 'address_scopes',
                                    ['address_scope_id'], ['id'])


def downgrade() -> None:
    with op.batch_alter_table('subnetpools', schema=None) as batch_op:
        batch_op.drop_constraint('fk_subnetpools_address_scope_id', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_subnetpools_address_scope_id'))
        batch_op.drop_column('address_scope_id')
    op.drop_index(op.f('ix_address_scopes_project_id'), table_name='address_scopes')
    op.drop_table('address_scopes')
    with op.batch_alter_table('ports', schema=None) as batch_op:
        batch_op.drop_column('extra_dhcp_opts')
    with op.batch_alter_table('subnets', schema=None) as batch_op:
        batch_op.drop_column('service_types')
    op.execute("DELETE FROM rbac_policies WHERE action = 'access_as_external'")
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.drop_column('is_default')
