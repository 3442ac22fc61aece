"""Magnum's conductor heartbeats and each cluster's CA, issue 16.

Revision ID: 0003_mservices
Revises: 0002
"""

from alembic import op
import sqlalchemy as sa


revision = '0003_mservices'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('coe_mservices',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('binary', sa.String(length=255), nullable=False),
    sa.Column('disabled', sa.Boolean(), nullable=False),
    sa.Column('disabled_reason', sa.String(length=255), nullable=True),
    sa.Column('forced_down', sa.Boolean(), nullable=False),
    sa.Column('last_seen_up', sa.DateTime(), nullable=True),
    sa.Column('report_count', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('host', 'binary')
    )
    op.create_table('coe_cluster_cas',
    sa.Column('cluster_id', sa.String(length=36), nullable=False),
    sa.Column('cert_pem', sa.Text(), nullable=False),
    sa.Column('key_pem', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['cluster_id'], ['coe_clusters.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('cluster_id')
    )


def downgrade() -> None:
    op.drop_table('coe_cluster_cas')
    op.drop_table('coe_mservices')
