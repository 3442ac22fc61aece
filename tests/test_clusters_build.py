"""Clusters built by netbay's own conductor and network service: a server SIGKILLed in
the middle of a create that the next one resumes, and the private subnet's room
checked before anything is made. Create → ``CREATE_COMPLETE`` with outputs, the HOT
export, scaling, a failure with its reason and a delete that leaves nothing are the
same on both backends: ``tests/test_cluster_backends.py``.

The server runs without the dataplane agent, so these templates have no master load
balancer (nothing would settle it); the executor's own tests cover load balancers.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest
from coehelp import ci_client, make_template, wait_status
from conftest import start_server, stop_server, unique

COLLECTIONS = {
    "/network/v2.0/networks": "networks", "/network/v2.0/subnets": "subnets",
    "/network/v2.0/ports": "ports", "/network/v2.0/routers": "routers",
    "/network/v2.0/security-groups": "security_groups", "/network/v2.0/floatingips": "floatingips",
    "/netbay/v1/sandboxes": "sandboxes",
}


@pytest.fixture(scope="module")
def template(ci: httpx.Client) -> dict:
    return make_template(ci, name=unique("k8s"), external_network_id="public", network_driver="flannel",
                         floating_ip_enabled=True, master_lb_enabled=False,
                         labels={"flannel_backend": "vxlan"})


def snapshot(raw: httpx.Client) -> dict[str, set[str]]:
    out = {}
    for path, key in COLLECTIONS.items():
        r = raw.get(path)
        assert r.status_code == 200, r.text
        out[key] = {item["id"] for item in r.json()[key]}
    return out




def create(ci: httpx.Client, template: dict, **body) -> str:
    body = {"name": unique("c"), "cluster_template_id": template["uuid"], "node_count": 2, **body}
    r = ci.post("/clusters", json=body)
    assert r.status_code == 202, r.text
    return r.json()["uuid"]


def test_a_restart_in_the_middle_of_a_create_resumes(tmp_path: Path, database_url: str, server) -> None:
    """SIGKILL the server while it builds; a new server finishes the cluster, no duplicates."""
    if not database_url.startswith("sqlite"):
        pytest.skip("one restart scenario is enough; the store's semantics are covered on both")
    db = tmp_path / "netbay.db"
    first = start_server(f"sqlite:///{db}", tmp_path)
    try:
        ci1 = ci_client(first, first.token())
        tpl = make_template(ci1, name="k", external_network_id="public", network_driver="flannel",
                            floating_ip_enabled=True, master_lb_enabled=False)
        cid = create(ci1, tpl, node_count=3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = ci1.get(f"/clusters/{cid}/resources").json()["resources"]
            if len([r for r in rows if r["physical_id"]]) >= 4:
                break
            time.sleep(0.005)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
    finally:
        stop_server(first)
    status_mid = None
    second = start_server(f"sqlite:///{db}", tmp_path)
    try:
        ci2 = ci_client(second, second.token())
        status_mid = ci2.get(f"/clusters/{cid}").json()["status"]
        cluster = wait_status(ci2, cid, ("CREATE_COMPLETE", "CREATE_FAILED"))
        assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
        raw2 = httpx.Client(base_url=second.url, headers={"X-Auth-Token": second.token()}, timeout=30)
        second._clients.append(raw2)
        nets = [n for n in raw2.get("/network/v2.0/networks").json()["networks"] if n["name"] != "public"]
        assert len(nets) == 1  # adopted, not made twice
        assert len(raw2.get("/netbay/v1/sandboxes").json()["sandboxes"]) == 4
        assert ci2.delete(f"/clusters/{cid}").status_code == 204
        wait_status(ci2, cid, ("GONE",))
        assert [n["name"] for n in raw2.get("/network/v2.0/networks").json()["networks"]] == ["public"]
    finally:
        stop_server(second)
        shutil.rmtree(tmp_path / "unused", ignore_errors=True)
    assert status_mid in ("CREATE_IN_PROGRESS", "CREATE_COMPLETE")


def test_a_cluster_that_does_not_fit_its_subnet_is_400_and_nothing_is_made(ci: httpx.Client, raw: httpx.Client,
                                                                            template: dict) -> None:
    before = snapshot(raw)
    r = ci.post("/clusters", json={"name": unique("big"), "cluster_template_id": template["uuid"],
                                   "node_count": 6, "labels": {"fixed_subnet_cidr": "10.9.9.0/29"}})
    assert r.status_code == 400, r.text
    detail = r.json()["errors"][0]["detail"]
    assert "needs 7 addresses" in detail and "room for 5" in detail, detail
    assert snapshot(raw) == before
    assert not [c for c in ci.get("/clusters").json()["clusters"] if c["name"].startswith("big")]
    # A scale past the room is refused the same way, and the cluster stays as it was.
    cid = create(ci, template, node_count=1, labels={"fixed_subnet_cidr": "10.9.9.0/29"})
    assert wait_status(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"))["status"] == "CREATE_COMPLETE"
    r = ci.patch(f"/clusters/{cid}", json=[{"op": "replace", "path": "/node_count", "value": 5}])
    assert r.status_code == 400 and "room for" in r.json()["errors"][0]["detail"], r.text
    cluster = ci.get(f"/clusters/{cid}").json()
    assert (cluster["status"], cluster["node_count"]) == ("CREATE_COMPLETE", 1)
    r = ci.patch(f"/clusters/{cid}", json=[{"op": "replace", "path": "/node_count", "value": 4}])
    assert r.status_code == 202, r.text  # 1 master + 4 nodes fill the /29's 5 addresses exactly
    assert wait_status(ci, cid, ("UPDATE_COMPLETE", "UPDATE_FAILED"))["status"] == "UPDATE_COMPLETE"
    assert ci.delete(f"/clusters/{cid}").status_code == 204
    wait_status(ci, cid, ("GONE",))
