"""Port mirroring: Tap-as-a-Service's tap services and tap flows (issue 13, item 1).

Revision ID: 0011
Revises: 0010
"""

from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def _standard() -> list[sa.Column]:
    return [
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('project_id', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('description', sa.String(length=255), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.Column('revision_number', sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table('tap_services',
    sa.Column('port_id', sa.String(length=36), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    *_standard(),
    sa.ForeignKeyConstraint(['port_id'], ['ports.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('tap_services', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tap_services_port_id'), ['port_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_tap_services_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_tap_services_project_id'), ['project_id'], unique=False)

    op.create_table('tap_flows',
    sa.Column('tap_service_id', sa.String(length=36), nullable=False),
    sa.Column('source_port', sa.String(length=36), nullable=False),
    sa.Column('direction', sa.String(length=8), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    *_standard(),
    sa.ForeignKeyConstraint(['tap_service_id'], ['tap_services.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['source_port'], ['ports.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('tap_flows', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tap_flows_tap_service_id'), ['tap_service_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_tap_flows_source_port'), ['source_port'], unique=False)
        batch_op.create_index(batch_op.f('ix_tap_flows_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_tap_flows_project_id'), ['project_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('tap_flows', schema=None) as batch_op:
        for ix in ('project_id', 'name', 'source_port', 'tap_service_id'):
            batch_op.drop_index(batch_op.f(f'ix_tap_flows_{ix}'))
    op.drop_table('tap_flows')
    with op.batch_alter_table('tap_services', schema=None) as batch_op:
        for ix in ('project_id', 'name', 'port_id'):
            batch_op.drop_index(batch_op.f(f'ix_tap_services_{ix}'))
    op.drop_table('tap_services')
