"""Helpers for the container API's tests: Zun clients (raw HTTP and python-zunclient),
Zun's error body, a network with a subnet, a container's wait out of ``Creating``."""

from __future__ import annotations

import time
from typing import Any

import httpx

from conftest import ADMIN_PASSWORD, Server


def zun_http(server: Server, token: str, version: str | None = "container 1.40") -> httpx.Client:
    headers = {"X-Auth-Token": token}
    if version:
        headers["OpenStack-API-Version"] = version
    client = httpx.Client(base_url=f"{server.url}/container/v1", headers=headers, timeout=30)
    server._clients.append(client)
    return client


def zunclient(server: Server, user: str = "admin", password: str = ADMIN_PASSWORD, project: str = "admin") -> Any:
    """The real python-zunclient, through the catalog (service type ``container``)."""
    from keystoneauth1 import session
    from keystoneauth1.identity import v3
    from zunclient import client

    auth = v3.Password(auth_url=server.auth_url, username=user, password=password, project_name=project,
                       user_domain_name="Default", project_domain_name="Default")
    return client.Client("1.latest", session=session.Session(auth=auth), region_name="RegionOne")


def zunclient_at(server: Server, auth: dict[str, str]) -> Any:
    """python-zunclient on ``server``'s Zun endpoint itself (no catalog), as ``auth``
    (keystoneauth's ``v3.Password`` arguments)."""
    from keystoneauth1 import session
    from keystoneauth1.identity import v3
    from zunclient import client

    sess = session.Session(auth=v3.Password(**auth))
    return client.Client("1.latest", session=sess, endpoint_override=f"{server.url}/container/v1")


def settled_container(zc: Any, uuid: str, seconds: float = 60.0) -> dict:
    """The container once it left ``Creating`` (no Docker here: ``Error``, its ports kept)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c = zc.containers.get(uuid)
        if c.status != "Creating":
            return c._info
        time.sleep(0.2)
    raise TimeoutError(f"container {uuid} still Creating")


def zun_error(r: httpx.Response, status: int, detail: str | None = None, *, contains: str | None = None) -> str:
    """Assert Zun's ``{"errors": [...]}`` body with ``status``; return the detail."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"errors"}, body
    (err,) = body["errors"]
    assert {"request_id", "code", "status", "title", "detail", "links"} <= set(err), err
    assert err["status"] == status and err["request_id"] == r.headers["x-openstack-request-id"]
    if detail is not None:
        assert err["detail"] == detail, err
    if contains is not None:
        assert contains in err["detail"], err
    return err["detail"]


def network(neutron: httpx.Client, name: str, cidr: str, **subnet: Any) -> tuple[dict, dict]:
    net = neutron.post("/networks", json={"network": {"name": name}})
    assert net.status_code == 201, net.text
    sub = neutron.post("/subnets", json={"subnet": {"network_id": net.json()["network"]["id"], "cidr": cidr,
                                                    "ip_version": 4, **subnet}})
    assert sub.status_code == 201, sub.text
    return net.json()["network"], sub.json()["subnet"]
