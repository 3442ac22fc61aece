"""Quotas, RBAC policies and trunks with their subports (issue 10, network extensions).

Revision ID: 0008
Revises: 0007
"""

from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('quotas',
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('resource', sa.String(length=64), nullable=False),
    sa.Column('limit', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('project_id', 'resource')
    )
    op.create_table('rbac_policies',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('object_type', sa.String(length=32), nullable=False),
    sa.Column('object_id', sa.String(length=36), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('target_project', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('object_type', 'object_id', 'action', 'target_project')
    )
    with op.batch_alter_table('rbac_policies', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rbac_policies_project_id'), ['project_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rbac_policies_object_id'), ['object_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rbac_policies_target_project'), ['target_project'], unique=False)

    op.create_table('trunks',
    sa.Column('port_id', sa.String(length=36), nullable=False),
    sa.Column('admin_state_up', sa.Boolean(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['port_id'], ['ports.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('port_id')
    )
    with op.batch_alter_table('trunks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trunks_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_trunks_project_id'), ['project_id'], unique=False)

    op.create_table('trunk_subports',
    sa.Column('port_id', sa.String(length=36), nullable=False),
    sa.Column('trunk_id', sa.String(length=36), nullable=False),
    sa.Column('segmentation_type', sa.String(length=32), nullable=False),
    sa.Column('segmentation_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['port_id'], ['ports.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['trunk_id'], ['trunks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('port_id'),
    sa.UniqueConstraint('trunk_id', 'segmentation_type', 'segmentation_id')
    )
    with op.batch_alter_table('trunk_subports', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trunk_subports_trunk_id'), ['trunk_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('trunk_subports', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_trunk_subports_trunk_id'))
    op.drop_table('trunk_subports')
    with op.batch_alter_table('trunks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_trunks_project_id'))
        batch_op.drop_index(batch_op.f('ix_trunks_name'))
    op.drop_table('trunks')
    with op.batch_alter_table('rbac_policies', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rbac_policies_target_project'))
        batch_op.drop_index(batch_op.f('ix_rbac_policies_object_id'))
        batch_op.drop_index(batch_op.f('ix_rbac_policies_project_id'))
    op.drop_table('rbac_policies')
    op.drop_table('quotas')
