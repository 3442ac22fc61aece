"""Kubernetes objects the mapping controller keeps as desired state (issue 12).

Revision ID: 0014
Revises: 0013
"""

from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('k8s_objects',
    sa.Column('cluster_id', sa.String(length=36), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('namespace', sa.String(length=253), nullable=False),
    sa.Column('name', sa.String(length=253), nullable=False),
    sa.Column('body', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('cluster_id', 'kind', 'namespace', 'name')
    )


def downgrade() -> None:
    op.drop_table('k8s_objects')
