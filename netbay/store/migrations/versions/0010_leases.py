"""Several processes on one PostgreSQL (issue 13): cluster work leases (one process at a
time builds, scales or deletes a cluster) and the change log's commit-order functions
(netbay/store/changelog.py says why and how).

Revision ID: 0010
Revises: 0009
"""

from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


# Keys of pg_advisory_*: the change log's numbering lock ("netbay", 1), and the
# (namespace, revision) pair each writer holds on its revisions until it ends.
NUMBERING_LOCK = 0x6E65_7462_6179_0001
REVISION_LOCKS = 0x6E62_0001

TAKE_REVISION = f"""
CREATE OR REPLACE FUNCTION netbay_take_revision() RETURNS integer AS $$
DECLARE r integer;
BEGIN
  PERFORM pg_advisory_lock({NUMBERING_LOCK});
  BEGIN
    r := nextval('changes_revision_seq');
    PERFORM pg_advisory_xact_lock({REVISION_LOCKS}, r);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_advisory_unlock({NUMBERING_LOCK});
    RAISE;
  END;
  PERFORM pg_advisory_unlock({NUMBERING_LOCK});
  RETURN r;
END $$ LANGUAGE plpgsql VOLATILE;
"""

COMMITTED_REVISION = f"""
CREATE OR REPLACE FUNCTION netbay_committed_revision() RETURNS integer AS $$
DECLARE taken integer; open integer;
BEGIN
  PERFORM pg_advisory_lock_shared({NUMBERING_LOCK});
  BEGIN
    SELECT CASE WHEN is_called THEN last_value ELSE 0 END INTO taken FROM changes_revision_seq;
    SELECT min(objid::text::bigint) INTO open FROM pg_locks
     WHERE locktype = 'advisory' AND classid = {REVISION_LOCKS} AND objsubid = 2
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database());
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_advisory_unlock_shared({NUMBERING_LOCK});
    RAISE;
  END;
  PERFORM pg_advisory_unlock_shared({NUMBERING_LOCK});
  RETURN LEAST(taken, coalesce(open - 1, taken));
END $$ LANGUAGE plpgsql;
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute(TAKE_REVISION)
        op.execute(COMMITTED_REVISION)
    op.create_table('coe_work_leases',
    sa.Column('cluster_id', sa.String(length=36), nullable=False),
    sa.Column('owner', sa.String(length=128), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('expires_at', sa.DateTime(), nullable=False),
    sa.Column('taken_at', sa.DateTime(), nullable=False),
    sa.Column('takeovers', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('cluster_id')
    )
    with op.batch_alter_table('coe_work_leases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_coe_work_leases_expires_at'), ['expires_at'], unique=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("DROP FUNCTION IF EXISTS netbay_take_revision()")
        op.execute("DROP FUNCTION IF EXISTS netbay_committed_revision()")
    with op.batch_alter_table('coe_work_leases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_coe_work_leases_expires_at'))
    op.drop_table('coe_work_leases')
