"""A member's cluster (issue 13, item 5; the spec's CSP 4: "deploy a Bay without admin
rights"): a user with only the ``member`` role on a fresh project builds a cluster with
the real ``openstack coe`` CLI (python-magnumclient's plugin) to ``CREATE_COMPLETE``;
every resource the build made is in that project; a member of another project sees
none of it (lists empty, shows 404, the CLI fails); the owner deletes it and nothing
of the project is left.

The server runs without the dataplane agent (as tests/test_clusters_build.py), so the
template has no master load balancer; floating IPs from the admin's external network
are on.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import pytest
from conftest import ADMIN_PASSWORD, Server, unique
from tests.osc import openstack as run_openstack

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

COLLECTIONS = {
    "/network/v2.0/networks": "networks", "/network/v2.0/subnets": "subnets",
    "/network/v2.0/ports": "ports", "/network/v2.0/routers": "routers",
    "/network/v2.0/security-groups": "security_groups", "/network/v2.0/floatingips": "floatingips",
    "/netbay/v1/sandboxes": "sandboxes",
}
# the executor's resource type -> the API collection that shows it
SHOWN_BY = {
    "OS::Neutron::Net": "/network/v2.0/networks", "OS::Neutron::Subnet": "/network/v2.0/subnets",
    "OS::Neutron::Port": "/network/v2.0/ports", "OS::Neutron::Router": "/network/v2.0/routers",
    "OS::Neutron::SecurityGroup": "/network/v2.0/security-groups",
    "OS::Neutron::FloatingIP": "/network/v2.0/floatingips", "OS::Nova::Server": "/netbay/v1/sandboxes",
}


def osc(server: Server, user: tuple[str, str, str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME=user[0], OS_PASSWORD=user[1], OS_PROJECT_NAME=user[2],
               OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
    env.setdefault("SHELL", "/bin/sh")
    return run_openstack(*args, env=env)


def ok(r: subprocess.CompletedProcess) -> object:
    """The command's JSON document (after any line magnumclient prints first), else its text."""
    assert r.returncode == 0, f"{' '.join(r.args)}:\n{r.stdout}\n{r.stderr}"
    starts = [i for i in (r.stdout.find("\n{"), r.stdout.find("\n[")) if i >= 0]
    text = r.stdout if r.stdout.startswith(("[", "{")) else (r.stdout[min(starts) + 1:] if starts else "")
    return json.loads(text) if text else r.stdout


def client(server: Server, user: tuple[str, str, str]) -> httpx.Client:
    c = httpx.Client(base_url=server.url, headers={"X-Auth-Token": server.token(*user)}, timeout=30)
    server._clients.append(c)
    return c


def project_rows(http: httpx.Client, project_id: str) -> dict[str, set[str]]:
    """Ids of everything in ``project_id`` the (admin's) client lists (a project's
    default security group aside: Neutron makes it on first use and keeps it)."""
    out = {}
    for path, key in COLLECTIONS.items():
        r = http.get(path)
        assert r.status_code == 200, r.text
        out[key] = {i["id"] for i in r.json()[key] if i.get("project_id", i.get("tenant_id")) == project_id
                    and not (key == "security_groups" and i.get("name") == "default")}
    return out


@pytest.fixture(scope="module")
def users(server: Server) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    return server.make_user(), server.make_user()


@pytest.mark.slow
def test_member_builds_a_cluster_only_its_project_sees(server: Server, users) -> None:
    owner, stranger = users
    admin = client(server, ("admin", ADMIN_PASSWORD, "admin"))
    mine, theirs = client(server, owner), client(server, stranger)
    project_id = next(p["id"] for p in admin.get("/identity/v3/projects").json()["projects"] if p["name"] == owner[2])

    name = unique("mc")
    tpl = ok(osc(server, owner, "coe", "cluster", "template", "create", name, "--coe", "kubernetes",
                 "--image", "fedora-coreos", "--external-network", "public", "--network-driver", "flannel",
                 "--labels", "flannel_backend=vxlan", "--floating-ip-enabled", "-f", "json"))
    assert tpl["project_id"] == project_id and tpl["public"] is False
    ok(osc(server, owner, "coe", "cluster", "create", name, "--cluster-template", name, "--node-count", "1"))
    deadline = time.monotonic() + 180   # polled through the API (the CLI's show is below)
    while time.monotonic() < deadline:
        if mine.get(f"/container-infra/v1/clusters/{name}").json()["status"].endswith(("COMPLETE", "FAILED")):
            break
        time.sleep(0.2)
    shown = ok(osc(server, owner, "coe", "cluster", "show", name, "-f", "json"))
    assert shown["status"] == "CREATE_COMPLETE", shown.get("status_reason")
    assert shown["project_id"] == project_id and len(shown["node_addresses"]) == 1

    # Every resource the build made is the owner's project's, and the owner sees it.
    rows = mine.get(f"/container-infra/v1/clusters/{shown['uuid']}/resources").json()["resources"]
    made = [r for r in rows if r["type"] in SHOWN_BY and r.get("physical_id")]
    assert {r["type"] for r in made} >= {"OS::Neutron::Net", "OS::Neutron::Subnet", "OS::Neutron::Router",
                                         "OS::Neutron::SecurityGroup", "OS::Nova::Server",
                                         "OS::Neutron::FloatingIP"}, rows
    for r in made:
        path = f"{SHOWN_BY[r['type']]}/{r['physical_id']}"
        body = admin.get(path).json()
        item = next(iter(body.values()))
        assert item.get("project_id", item.get("tenant_id")) == project_id, (r["type"], item)
        assert mine.get(path).status_code == 200, path
        # Another project's member: not found, in the service's own format.
        r2 = theirs.get(path)
        assert r2.status_code == 404, (path, r2.status_code, r2.text)
    for path, key in COLLECTIONS.items():
        seen = {i["id"] for i in theirs.get(path).json()[key]}
        assert not seen & {r["physical_id"] for r in made}, (key, seen)
    before_delete = project_rows(admin, project_id)
    assert before_delete["networks"] and before_delete["sandboxes"] and before_delete["floatingips"]

    # The stranger: an empty list and a 404 from the real CLI, no way to delete it.
    assert ok(osc(server, stranger, "coe", "cluster", "list", "-f", "json")) == []
    assert ok(osc(server, stranger, "coe", "cluster", "template", "list", "-f", "json")) == []
    for verb in ("show", "delete"):
        r = osc(server, stranger, "coe", "cluster", verb, shown["uuid"])
        assert r.returncode != 0 and "could not be found" in r.stderr, (verb, r.stderr)
    assert theirs.get(f"/container-infra/v1/clusters/{shown['uuid']}").status_code == 404
    assert theirs.get(f"/container-infra/v1/clusters/{shown['uuid']}/resources").status_code == 404

    # The owner deletes it; nothing of the project is left.
    ok(osc(server, owner, "coe", "cluster", "delete", name))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and mine.get(f"/container-infra/v1/clusters/{name}").status_code == 200:
        time.sleep(0.2)
    assert osc(server, owner, "coe", "cluster", "show", name).returncode != 0
    assert project_rows(admin, project_id) == {key: set() for key in COLLECTIONS.values()}
    ok(osc(server, owner, "coe", "cluster", "template", "delete", name))
