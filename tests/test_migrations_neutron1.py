"""Migration 0020 (issue 29): the external networks there are get the ``*``
``access_as_external`` policy of their owner, by which netbay now decides who sees an
external network; the downgrade takes the new columns, table and policies away."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
import pytest

from netbay.store import migrate

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

NOW = dt.datetime(2026, 11, 1, 12, 0, 0)


def _network(conn: sa.Connection, net_id: str, external: bool, vni: int) -> None:
    conn.execute(sa.text(
        "INSERT INTO networks (id, project_id, name, description, created_at, updated_at, revision_number, shared,"
        " external, mtu, admin_state_up, status, segmentation_id, network_type, port_security_enabled)"
        " VALUES (:id, 'owner', :id, '', :now, :now, 1, false, :external, 1500, true, 'ACTIVE', :vni, 'vxlan',"
        " true)"), {"id": net_id, "external": external, "vni": vni, "now": NOW})


def test_external_networks_get_their_wildcard_policy(database_url: str) -> None:
    migrate.upgrade(database_url, "0019")
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as conn:
            _network(conn, "public", True, 100)
            _network(conn, "private", False, 101)
        migrate.upgrade(database_url, "0020")
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT project_id, object_type, object_id, action, target_project"
                                        " FROM rbac_policies")).all()
            defaults = conn.execute(sa.text("SELECT id, is_default FROM networks ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [("owner", "network", "public", "access_as_external", "*")]
        assert [(i, bool(d)) for i, d in defaults] == [("private", False), ("public", False)]
        from alembic import command

        command.downgrade(migrate.config(database_url), "0019")
        inspector = sa.inspect(engine)
        assert "is_default" not in {c["name"] for c in inspector.get_columns("networks")}
        assert "address_scopes" not in inspector.get_table_names()
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM rbac_policies")).scalar() == 0
    finally:
        engine.dispose()
