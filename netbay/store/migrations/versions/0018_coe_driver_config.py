"""A cluster's network-driver config, parsed from its labels once (issue 24 item 2):
``coe_clusters.driver_config``, filled for the clusters there are.

Existing rows get what the cluster create now stores: the template's network driver's
typed config for the cluster's labels (``netbay.drivers.registry``, the one parser).
Labels the driver refuses (kept from before the API checked them) leave it NULL: such a
cluster builds no container network, as its build failed before.

Revision ID: 0018
Revises: 0017
"""

from alembic import op
import sqlalchemy as sa


revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('coe_clusters', schema=None) as batch_op:
        batch_op.add_column(sa.Column('driver_config', sa.JSON(), nullable=True))
    from netbay.drivers import registry

    clusters = sa.table('coe_clusters', sa.column('id', sa.String), sa.column('labels', sa.JSON),
                        sa.column('cluster_template_id', sa.String), sa.column('driver_config', sa.JSON))
    templates = sa.table('coe_clustertemplates', sa.column('id', sa.String), sa.column('network_driver', sa.String))
    bind = op.get_bind()
    rows = bind.execute(sa.select(clusters.c.id, clusters.c.labels, templates.c.network_driver)
                        .join(templates, templates.c.id == clusters.c.cluster_template_id)).all()
    for cluster_id, labels, driver in rows:
        try:
            stored = registry.stored(registry.config(driver, labels or {}))
        except ValueError:   # registry.LabelError
            continue
        if stored is not None:
            bind.execute(clusters.update().where(clusters.c.id == cluster_id).values(driver_config=stored))


def downgrade() -> None:
    with op.batch_alter_table('coe_clusters', schema=None) as batch_op:
        batch_op.drop_column('driver_config')
