"""Neutron extensions with a dataplane meaning (issue 29, neutron2): floating IP port
forwardings.

Revision ID: 0020_neutron2
Revises: 0019
"""

from alembic import op
import sqlalchemy as sa


revision = '0020_neutron2'
down_revision = '0019'
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


def downgrade() -> None:
    op.drop_table('port_forwardings')
