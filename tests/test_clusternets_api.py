"""``GET /netbay/v1/clusternets/{cluster_id}``: a cluster's nodes and leases, read-only,
scoped to the cluster's project — on SQLite and PostgreSQL (no agent needed)."""

from __future__ import annotations

import time

import httpx
import pytest
from coehelp import ci_client, make_template
from conftest import neutron_error, unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)


def _cluster(ci: httpx.Client) -> dict:
    t = make_template(ci, name=unique("k8s"), external_network_id="public", network_driver="flannel",
                      floating_ip_enabled=False, master_lb_enabled=False)
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": t["uuid"], "node_count": 1})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        c = ci.get(f"/clusters/{r.json()['uuid']}").json()
        if c["status"] in ("CREATE_COMPLETE", "CREATE_FAILED"):
            assert c["status"] == "CREATE_COMPLETE", c["status_reason"]
            return c
        time.sleep(0.1)
    raise AssertionError("cluster not built")


def test_show_and_scope(server) -> None:
    admin = ci_client(server, server.token())
    cluster = _cluster(admin)
    nb = httpx.Client(base_url=f"{server.url}/netbay/v1", headers={"X-Auth-Token": server.token()}, timeout=30)
    server._clients.append(nb)
    r = nb.get(f"/clusternets/{cluster['uuid']}")
    assert r.status_code == 200, r.text
    net = r.json()["clusternet"]
    assert net["id"] == cluster["uuid"] and net["driver"] == "flannel"
    assert [n["role"] for n in net["nodes"]] == ["master", "minion"]
    assert all(n["lease"] == net["leases"][n["name"]] and n["lease"].startswith("10.100.") for n in net["nodes"])

    # Another project's member does not see it (404, as for any resource of another project).
    user, password, project = server.make_user()
    other = httpx.Client(base_url=f"{server.url}/netbay/v1",
                         headers={"X-Auth-Token": server.token(user, password, project)}, timeout=30)
    server._clients.append(other)
    neutron_error(other.get(f"/clusternets/{cluster['uuid']}"), 404, "ClusterNetNotFound")
    neutron_error(nb.get("/clusternets/no-such-cluster"), 404, "ClusterNetNotFound",
                  "Cluster no-such-cluster has no container network.")
