"""Zun's container tables no longer tied to the embedded network tables (issue 14).

A container's network and port may be a cloud's, not in this database: the
container network's foreign key to ``networks`` goes (Zun's own ``network`` table
has none either), and the attachment keeps the addresses the port had when the
container took it (as Zun keeps ``addresses``). Existing attachments are filled
from the embedded service's allocations.

Revision ID: 0016
Revises: 0015
"""

from alembic import op
import sqlalchemy as sa


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


# The unnamed foreign key as SQLite's batch mode reflects it; PostgreSQL named it itself.
_CONVENTION = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def _network_fk() -> str:
    if op.get_bind().dialect.name == 'postgresql':
        return 'container_networks_network_id_fkey'
    return 'fk_container_networks_network_id_networks'


def upgrade() -> None:
    with op.batch_alter_table('container_networks', schema=None, naming_convention=_CONVENTION) as batch_op:
        batch_op.drop_constraint(_network_fk(), type_='foreignkey')
    with op.batch_alter_table('network_attachments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fixed_ips', sa.JSON(), nullable=True))
    bind = op.get_bind()
    attachments = sa.table('network_attachments', sa.column('container_id', sa.String),
                           sa.column('port_id', sa.String), sa.column('fixed_ips', sa.JSON))
    allocations = sa.table('ip_allocations', sa.column('port_id', sa.String), sa.column('ip_address', sa.String),
                           sa.column('subnet_id', sa.String), sa.column('seq', sa.Integer))
    by_port: dict[str, list[dict[str, str]]] = {}
    for port_id, ip, subnet_id in bind.execute(sa.select(allocations.c.port_id, allocations.c.ip_address,
                                                         allocations.c.subnet_id)
                                               .where(allocations.c.port_id.in_(sa.select(attachments.c.port_id)))
                                               .order_by(allocations.c.port_id, allocations.c.seq)):
        by_port.setdefault(port_id, []).append({"ip_address": ip, "subnet_id": subnet_id})
    for port_id, fixed in by_port.items():
        bind.execute(attachments.update().where(attachments.c.port_id == port_id).values(fixed_ips=fixed))


def downgrade() -> None:
    with op.batch_alter_table('network_attachments', schema=None) as batch_op:
        batch_op.drop_column('fixed_ips')
    with op.batch_alter_table('container_networks', schema=None, naming_convention=_CONVENTION) as batch_op:
        batch_op.create_foreign_key(_network_fk(), 'networks', ['network_id'], ['id'], ondelete='CASCADE')
