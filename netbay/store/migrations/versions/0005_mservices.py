"""Magnum's conductor heartbeats, each cluster's CA and Nova-style keypairs, issue 16.

Revision ID: 0005
Revises: 0004
"""

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
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
    op.create_table('keypairs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('type', sa.String(length=16), nullable=False),
    sa.Column('public_key', sa.Text(), nullable=False),
    sa.Column('fingerprint', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('user_id', 'name')
    )
    with op.batch_alter_table('keypairs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_keypairs_user_id'), ['user_id'], unique=False)


def downgrade() -> None:
    op.drop_table('keypairs')
    op.drop_table('coe_cluster_cas')
    op.drop_table('coe_mservices')
