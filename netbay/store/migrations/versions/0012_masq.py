"""Labels through the whole system: pods and sandboxes carry labels (issue 13, item 3).

Revision ID: 0012
Revises: 0011
"""

from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.add_column(sa.Column('labels', sa.JSON(), nullable=True))
    with op.batch_alter_table('sandboxes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('labels', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sandboxes', schema=None) as batch_op:
        batch_op.drop_column('labels')
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.drop_column('labels')
