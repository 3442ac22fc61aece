"""L7 load balancing (issue 16): L7 policies and rules, listener and pool options.

Revision ID: 0007
Revises: 0006
"""

from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
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
        sa.Column('provisioning_status', sa.String(length=16), nullable=False),
        sa.Column('operating_status', sa.String(length=16), nullable=False),
        sa.Column('admin_state_up', sa.Boolean(), nullable=False),
    ]


def upgrade() -> None:
    with op.batch_alter_table('lb_listeners', schema=None) as batch_op:
        batch_op.add_column(sa.Column('allowed_cidrs', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('insert_headers', sa.JSON(), nullable=True))
    with op.batch_alter_table('lb_pools', schema=None) as batch_op:
        batch_op.add_column(sa.Column('session_persistence', sa.JSON(), nullable=True))
    op.create_table('lb_l7policies', *_standard(),
    sa.Column('listener_id', sa.String(length=36), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('redirect_pool_id', sa.String(length=36), nullable=True),
    sa.Column('redirect_url', sa.String(length=2048), nullable=True),
    sa.Column('redirect_prefix', sa.String(length=2048), nullable=True),
    sa.Column('redirect_http_code', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['listener_id'], ['lb_listeners.id'], ),
    sa.ForeignKeyConstraint(['redirect_pool_id'], ['lb_pools.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('lb_l7policies', schema=None) as batch_op:
        for col in ('listener_id', 'redirect_pool_id', 'name', 'project_id'):
            batch_op.create_index(batch_op.f(f'ix_lb_l7policies_{col}'), [col], unique=False)
    op.create_table('lb_l7rules', *_standard(),
    sa.Column('l7policy_id', sa.String(length=36), nullable=False),
    sa.Column('type', sa.String(length=16), nullable=False),
    sa.Column('compare_type', sa.String(length=16), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=True),
    sa.Column('value', sa.String(length=255), nullable=False),
    sa.Column('invert', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['l7policy_id'], ['lb_l7policies.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('lb_l7rules', schema=None) as batch_op:
        for col in ('l7policy_id', 'name', 'project_id'):
            batch_op.create_index(batch_op.f(f'ix_lb_l7rules_{col}'), [col], unique=False)


def downgrade() -> None:
    op.drop_table('lb_l7rules')
    op.drop_table('lb_l7policies')
    with op.batch_alter_table('lb_pools', schema=None) as batch_op:
        batch_op.drop_column('session_persistence')
    with op.batch_alter_table('lb_listeners', schema=None) as batch_op:
        batch_op.drop_column('insert_headers')
        batch_op.drop_column('allowed_cidrs')
