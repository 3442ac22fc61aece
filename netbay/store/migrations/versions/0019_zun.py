"""Zun's container resources and action records (issue 29): ``cpu``, ``memory``,
``restart_policy`` and ``mounts`` kept as Docker is given them, and
``container_actions`` with their events.

Revision ID: 0019
Revises: 0018
"""

from alembic import op
import sqlalchemy as sa


revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('containers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cpu', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('memory', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('restart_policy', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('mounts', sa.JSON(), nullable=True))
    op.create_table('container_actions',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('container_id', sa.String(length=36), nullable=False),
    sa.Column('request_id', sa.String(length=64), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('start_time', sa.DateTime(), nullable=False),
    sa.Column('finish_time', sa.DateTime(), nullable=True),
    sa.Column('events', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['container_id'], ['containers.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('container_actions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_container_actions_container_id'), ['container_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('container_actions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_container_actions_container_id'))
    op.drop_table('container_actions')
    with op.batch_alter_table('containers', schema=None) as batch_op:
        batch_op.drop_column('mounts')
        batch_op.drop_column('restart_policy')
        batch_op.drop_column('memory')
        batch_op.drop_column('cpu')
