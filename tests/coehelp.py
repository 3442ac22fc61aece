"""Helpers and fixtures for the container-infra (Magnum) API tests."""

from __future__ import annotations

import time

import httpx
from conftest import unique


def ci_client(server, token: str, version: str | None = None) -> httpx.Client:
    headers = {"X-Auth-Token": token}
    if version:
        headers["OpenStack-API-Version"] = f"container-infra {version}"
    client = httpx.Client(base_url=f"{server.url}/container-infra/v1", headers=headers, timeout=30)
    server._clients.append(client)
    return client


def new_member(server) -> httpx.Client:
    """A client for a member of a fresh project."""
    user, password, project = server.make_user()
    return ci_client(server, server.token(user, password, project))


def magnum_error(r: httpx.Response, status: int, detail: str | None = None, *, contains: str | None = None) -> str:
    """Assert Magnum's error body with ``status`` (and the exact ``detail``); return the detail."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"errors"}, body
    (err,) = body["errors"]
    assert {"request_id", "code", "status", "title", "detail", "links"} <= set(err), err
    assert err["status"] == status
    assert err["code"] == ("server" if status >= 500 else "client") or status == 406
    assert err["request_id"] == r.headers["x-openstack-request-id"]
    assert err["detail"].startswith(err["title"])
    if detail is not None:
        assert err["detail"] == detail, err
    if contains is not None:
        assert contains in err["detail"], err
    return err["detail"]


def make_template(client: httpx.Client, **body) -> dict:
    body.setdefault("coe", "kubernetes")
    r = client.post("/clustertemplates", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def report_status(server, cluster_id: str, status: str) -> None:
    """Play the conductor's part: settle a cluster's status (admin-only status API)."""
    r = httpx.put(f"{server.url}/netbay/v1/status", json={"clusters": {cluster_id: status}},
                  headers={"X-Auth-Token": server.token()}, timeout=30)
    assert r.status_code == 200, r.text

def wait_status(ci: httpx.Client, cid: str, done: tuple[str, ...], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = ci.get(f"/clusters/{cid}")
        if r.status_code == 404 and "GONE" in done:
            return {"status": "GONE"}
        assert r.status_code == 200, r.text
        cluster = r.json()
        if cluster["status"] in done:
            return cluster
        time.sleep(0.1)
    raise AssertionError(f"cluster {cid} not in {done} after {timeout}s: {ci.get(f'/clusters/{cid}').text}")


def create_cluster(ci: httpx.Client, template_id: str, node_count: int) -> str:
    """POST a cluster of ``template_id`` (Magnum answers 202 with its uuid); its uuid."""
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template_id,
                                   "node_count": node_count})
    assert r.status_code == 202, r.text
    return r.json()["uuid"]


def delete_cluster(ci: httpx.Client, cid: str, timeout: float) -> None:
    """DELETE the cluster and wait, bounded, until it is gone (not DELETE_FAILED)."""
    assert ci.delete(f"/clusters/{cid}").status_code == 204
    assert wait_status(ci, cid, ("GONE", "DELETE_FAILED"), timeout)["status"] == "GONE"


def make_keypair(server, token: str, name: str) -> dict:
    """A keypair (netbay makes the key) for the token's user, for templates to name."""
    r = httpx.post(f"{server.url}/compute/v2.1/os-keypairs", json={"keypair": {"name": name}},
                   headers={"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.2"}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["keypair"]
