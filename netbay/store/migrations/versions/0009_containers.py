"""Containers on cloud networks: container networks, containers, network attachments (issue 11).

Revision ID: 0009
Revises: 0008
"""

from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('container_networks',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('network_id', sa.String(length=36), nullable=False),
    sa.Column('subnetpool_id', sa.String(length=36), nullable=True),
    sa.Column('subnet_id', sa.String(length=36), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['network_id'], ['networks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('project_id', 'network_id')
    )
    with op.batch_alter_table('container_networks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_container_networks_network_id'), ['network_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_container_networks_project_id'), ['project_id'], unique=False)

    op.create_table('containers',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('image', sa.String(length=255), nullable=False),
    sa.Column('command', sa.JSON(), nullable=False),
    sa.Column('environment', sa.JSON(), nullable=False),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('workdir', sa.String(length=255), nullable=False),
    sa.Column('hostname', sa.String(length=63), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=False),
    sa.Column('task_state', sa.String(length=32), nullable=True),
    sa.Column('run', sa.Boolean(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('docker_id', sa.String(length=64), nullable=False),
    sa.Column('security_groups', sa.JSON(), nullable=False),
    sa.Column('exposed_ports', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('containers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_containers_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_containers_project_id'), ['project_id'], unique=False)

    op.create_table('network_attachments',
    sa.Column('container_id', sa.String(length=36), nullable=False),
    sa.Column('port_id', sa.String(length=36), nullable=False),
    sa.Column('container_network_id', sa.String(length=36), nullable=False),
    sa.Column('network_id', sa.String(length=36), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('auto_delete', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['container_id'], ['containers.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['container_network_id'], ['container_networks.id'], ),
    sa.PrimaryKeyConstraint('container_id', 'port_id')
    )
    with op.batch_alter_table('network_attachments', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_network_attachments_container_network_id'), ['container_network_id'],
                              unique=False)


def downgrade() -> None:
    op.drop_table('network_attachments')
    op.drop_table('containers')
    op.drop_table('container_networks')
