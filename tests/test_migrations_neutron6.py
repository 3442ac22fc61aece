"""Migration 0023_neutron6 (issue 29): security group rules get ``normalized_cidr``,
equal to the (normalized) ``remote_ip_prefix`` of the rules there are, and floating IPs
a ``qos_policy_id``; the schema then matches the models, and the downgrade takes the
columns away."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from netbay.store import migrate
from netbay.store.models import Base

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

REVISION = "0023_neutron6"
BEFORE = "0022_neutron3"
NOW = dt.datetime(2026, 11, 1, 12, 0, 0)


def _rule(conn: sa.Connection, rule_id: str, prefix: str | None) -> None:
    conn.execute(sa.text(
        "INSERT INTO securitygrouprules (id, project_id, security_group_id, direction, ethertype, remote_ip_prefix,"
        " description, created_at, updated_at, revision_number) VALUES (:id, 'p', 'g', 'ingress', 'IPv4', :prefix,"
        " '', :now, :now, 0)"), {"id": rule_id, "prefix": prefix, "now": NOW})


def test_normalized_cidr_and_fip_qos_columns(database_url: str) -> None:
    migrate.upgrade(database_url, BEFORE)
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO securitygroups (id, project_id, name, description, created_at, updated_at,"
                " revision_number, stateful) VALUES ('g', 'p', 'g', '', :now, :now, 0, true)"), {"now": NOW})
            _rule(conn, "net", "10.1.0.0/16")
            _rule(conn, "any", None)
        migrate.upgrade(database_url, REVISION)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, normalized_cidr FROM securitygrouprules ORDER BY id")).all()
            assert [tuple(r) for r in rows] == [("any", None), ("net", "10.1.0.0/16")]
            diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
            assert [d for d in diffs if "securitygrouprules" in repr(d) or "floatingips" in repr(d)] == []
        command.downgrade(migrate.config(database_url), BEFORE)
        with engine.connect() as conn:
            names = {c["name"] for c in sa.inspect(conn).get_columns("securitygrouprules")}
            fip_names = {c["name"] for c in sa.inspect(conn).get_columns("floatingips")}
        assert "normalized_cidr" not in names and "qos_policy_id" not in fip_names
    finally:
        engine.dispose()
