"""Neutron's external-network RBAC and default external network (issue 29, item 4):
``networks.is_default``, and the ``*`` ``access_as_external`` policy every external
network carries in Neutron, made for the external networks there are (netbay now
decides who sees an external network by its policies).

Revision ID: 0020_neutron1
Revises: 0019
"""

import uuid

from alembic import op
import sqlalchemy as sa


revision = '0020_neutron1'
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


def downgrade() -> None:
    op.execute("DELETE FROM rbac_policies WHERE action = 'access_as_external'")
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.drop_column('is_default')
