"""Migration 0022_neutron3 (issue 29): port forwardings get the last port of their
external and internal ranges, equal to the first for the forwardings there are; the
schema then matches the models, and the downgrade takes the columns away."""

from __future__ import annotations

import sqlalchemy as sa
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from netbay.store import migrate
from netbay.store.models import Base

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

REVISION = "0022_neutron3"


def _pf_diffs(conn: sa.Connection) -> list:
    diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    return [d for d in diffs if "port_forwardings" in repr(d)]


def test_port_range_columns(database_url: str) -> None:
    migrate.upgrade(database_url, "0021")
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(database_url, REVISION)
        with engine.connect() as conn:
            columns = {c["name"]: c for c in sa.inspect(conn).get_columns("port_forwardings")}
            assert not columns["external_port_end"]["nullable"] and not columns["internal_port_end"]["nullable"]
            assert _pf_diffs(conn) == []
        command.downgrade(migrate.config(database_url), "0021")
        with engine.connect() as conn:
            names = {c["name"] for c in sa.inspect(conn).get_columns("port_forwardings")}
        assert not {"external_port_end", "internal_port_end"} & names
    finally:
        engine.dispose()
