"""Migration 0018: clusters made before a cluster stored its driver config get it
from their labels, parsed by the registry as the API parses them (issue 24 item 2)."""

from __future__ import annotations

import datetime as dt
import json

import sqlalchemy as sa
import pytest

from netbay.store import migrate

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

NOW = dt.datetime(2026, 11, 1, 12, 0, 0)


def _template(conn: sa.Connection, tid: str, driver: str | None) -> None:
    conn.execute(sa.text(
        "INSERT INTO coe_clustertemplates (id, project_id, user_id, name, coe, network_driver, server_type, labels,"
        " tls_disabled, public, hidden, registry_enabled, master_lb_enabled, floating_ip_enabled, created_at)"
        " VALUES (:id, 'p', 'u', :id, 'kubernetes', :driver, 'vm', '{}', false, false, false, false, false, true,"
        " :now)"), {"id": tid, "driver": driver or "", "now": NOW})


def _cluster(conn: sa.Connection, cid: str, tid: str, labels: str) -> None:
    conn.execute(sa.text(
        "INSERT INTO coe_clusters (id, project_id, user_id, name, cluster_template_id, node_count, master_count,"
        " create_timeout, labels, floating_ip_enabled, master_lb_enabled, status, health_status_reason,"
        " master_addresses, node_addresses, faults, revision_number, created_at)"
        " VALUES (:id, 'p', 'u', :id, :tid, 1, 1, 60, :labels, true, false, 'CREATE_COMPLETE', '{}', '[]', '[]',"
        " '{}', 1, :now)"), {"id": cid, "tid": tid, "labels": labels, "now": NOW})


def test_existing_clusters_get_their_driver_config(database_url: str) -> None:
    migrate.upgrade(database_url, "0017")
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as conn:
            _template(conn, "t-flannel", "flannel")
            _template(conn, "t-kuryr", "kuryr")
            _template(conn, "t-none", None)
            _cluster(conn, "c-padded", "t-flannel", '{"flannel_backend": " host-gw", "flannel_ip_masq": "false"}')
            _cluster(conn, "c-bad", "t-flannel", '{"flannel_backend": "udp"}')
            _cluster(conn, "c-kuryr", "t-kuryr", '{"kuryr_subnet_driver": "node"}')
            _cluster(conn, "c-none", "t-none", '{"anything": "x"}')
        migrate.upgrade(database_url)
        with engine.connect() as conn:
            rows = dict(conn.execute(sa.text("SELECT id, driver_config FROM coe_clusters")).all())
    finally:
        engine.dispose()
    stored = {k: v if v is None or isinstance(v, dict) else json.loads(v) for k, v in rows.items()}
    assert stored["c-padded"] == {"network": "10.100.0.0/16", "subnet_len": 24, "backend": "host-gw",
                                  "ip_masq": False, "network6": "", "subnet_len6": 64, "service6": ""}
    assert stored["c-kuryr"] == {"subnet_driver": "node", "pod_subnet_pool": "10.10.0.0/16",
                                 "pod_subnet_prefixlen": 24, "service_cidr": "10.96.0.0/16", "pod_runtime": "sandbox",
                                 "pod_subnet_pool_ipv6": "", "pod_subnet_prefixlen_ipv6": 64, "service_cidr_ipv6": "",
                                 "octavia_provider": ""}
    assert stored["c-bad"] is None     # refused labels: nothing stored (the build says why)
    assert stored["c-none"] is None    # no driver, no config
    migrate.upgrade(database_url, "0018")   # already there: a no-op
    _downgrade_drops_the_column(database_url)


def _downgrade_drops_the_column(database_url: str) -> None:
    from alembic import command

    command.downgrade(migrate.config(database_url), "0017")
    engine = sa.create_engine(database_url)
    try:
        assert "driver_config" not in {c["name"] for c in sa.inspect(engine).get_columns("coe_clusters")}
    finally:
        engine.dispose()
