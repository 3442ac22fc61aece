"""Labels through the whole system (issue 13, item 3; the spec's expand-labels-scope).

A template's labels merged with a cluster's own (``merge_labels``) reach: every node's
server metadata (the HOT export) and sandbox, every pod (with the pod's own labels
on top), and filter lists with ``?labels=k=v`` on pods, sandboxes and containers;
labels no driver reads are kept and reported as ignored; ``netbay cluster show`` and
``netbay cluster topology`` print them. A bad filter is a 400 in the API's format.
The server runs the conductor but no agent (pods stay ``BUILD``; containers without
Docker end in ``Error``, their rows and labels stay).
"""

from __future__ import annotations

import httpx
import pytest
from clihelp import cli_here, ok
from coehelp import ci_client, make_template, wait_status
from conftest import unique
from zunhelp import network, zun_http

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

TEMPLATE_LABELS = {"flannel_backend": "vxlan", "team": "blue", "tier": "web"}
CLUSTER_LABELS = {"tier": "db", "owner": "ops"}
MERGED = {"flannel_backend": "vxlan", "team": "blue", "tier": "db", "owner": "ops"}


@pytest.fixture(scope="module")
def nb(server) -> httpx.Client:
    client = httpx.Client(base_url=f"{server.url}/netbay/v1", headers={"X-Auth-Token": server.token()},
                          timeout=30)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def cluster(server) -> dict:
    ci = ci_client(server, server.token())
    t = make_template(ci, name=unique("lbl"), external_network_id="public", network_driver="flannel",
                      floating_ip_enabled=False, master_lb_enabled=False, labels=TEMPLATE_LABELS)
    r = ci.post("/clusters", json={"name": unique("lbl"), "cluster_template_id": t["uuid"], "node_count": 1,
                                   "labels": CLUSTER_LABELS, "merge_labels": True})
    assert r.status_code == 202, r.text
    c = wait_status(ci, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"))
    assert c["status"] == "CREATE_COMPLETE", c["status_reason"]
    return c


def test_cluster_labels_merged_and_unknown_ones_kept(cluster: dict) -> None:
    assert cluster["labels"] == MERGED
    assert cluster["labels_ignored"] == ["owner", "team", "tier"]


def test_nodes_carry_the_labels(server, cluster: dict, nb: httpx.Client) -> None:
    ci = ci_client(server, server.token())
    hot = ci.get(f"/clusters/{cluster['uuid']}/template").json()["template"]
    servers = {n: r for n, r in hot["resources"].items() if r["type"] == "OS::Nova::Server"}
    assert len(servers) == 2
    assert all(r["properties"]["metadata"]["labels"] == MERGED for r in servers.values())
    rows = ci.get(f"/clusters/{cluster['uuid']}/resources").json()["resources"]
    node_ids = {r["physical_id"] for r in rows if r["type"] == "OS::Nova::Server"}
    for sid in node_ids:
        assert nb.get(f"/sandboxes/{sid}").json()["sandbox"]["labels"] == MERGED
    lone = nb.post("/sandboxes", json={"sandbox": {"name": "lone", "labels": {"tier": "db", "n": 1}}})
    assert lone.status_code == 201, lone.text
    assert lone.json()["sandbox"]["labels"] == {"tier": "db", "n": "1"}   # values kept as strings

    def ids(query: str) -> set[str]:
        r = nb.get(f"/sandboxes?{query}")
        assert r.status_code == 200, r.text
        return {s["id"] for s in r.json()["sandboxes"]}
    assert ids("labels=team=blue") == node_ids
    assert ids("labels=tier=db") == node_ids | {lone.json()["sandbox"]["id"]}
    assert ids("labels=team=blue,tier=db") == ids("labels=team=blue&labels=tier=db") == node_ids
    assert ids("labels=tier=web") == set()
    assert ids("labels=n=1") == {lone.json()["sandbox"]["id"]}
    r = nb.get("/sandboxes?labels=nokv")
    assert r.status_code == 400 and r.json()["NeutronError"]["message"] == \
        "Invalid input for labels. Reason: 'nokv' is not KEY=VALUE.", r.text
    assert nb.delete(f"/sandboxes/{lone.json()['sandbox']['id']}").status_code == 204


def test_pods_carry_the_labels(cluster: dict, nb: httpx.Client) -> None:
    def create(name: str, labels: dict | None = None) -> dict:
        body = {"name": name, "cluster_id": cluster["uuid"], **({"labels": labels} if labels else {})}
        r = nb.post("/pods", json={"pod": body})
        assert r.status_code == 201, r.text
        return r.json()["pod"]
    plain = create("plain")
    api = create("api", {"app": "api", "tier": "cache"})
    assert plain["labels"] == MERGED
    assert api["labels"] == {**MERGED, "app": "api", "tier": "cache"}   # the pod's own on top
    assert nb.get(f"/pods/{api['id']}").json()["pod"]["labels"] == api["labels"]

    def names(query: str) -> set[str]:
        r = nb.get(f"/pods?cluster_id={cluster['uuid']}&{query}")
        assert r.status_code == 200, r.text
        return {p["name"] for p in r.json()["pods"]}
    assert names("labels=team=blue") == {"plain", "api"}
    assert names("labels=tier=db") == {"plain"}
    assert names("labels=app=api,team=blue") == {"api"}
    assert names("labels=app=nope") == set()
    assert nb.get("/pods?labels=app").status_code == 400


def test_container_labels_filter(server) -> None:
    # A project and an IPv4 network of its own: the shared server's admin project holds other
    # tests' networks, an IPv6-only one among them, which Zun's default rule may pick.
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    zun = zun_http(server, token)
    net, _ = network(server.http(token), unique("labels"), "10.94.7.0/24")
    made = []
    for labels in ({"tier": "db", "team": "blue"}, {"tier": "web"}):
        r = zun.post("/containers", json={"image": "busybox", "labels": labels, "nets": [{"network": net["id"]}]})
        assert r.status_code == 202, r.text
        made.append(r.json()["uuid"])

    def uuids(query: str) -> set[str]:
        r = zun.get(f"/containers?{query}")
        assert r.status_code == 200, r.text
        return {c["uuid"] for c in r.json()["containers"]} & set(made)
    assert uuids("labels=tier=db") == {made[0]}
    assert uuids("labels=tier=web") == {made[1]}
    assert uuids("labels=tier=db,team=blue") == {made[0]}
    assert uuids("labels=team=red") == set()
    assert uuids("") == set(made)


def test_cli_shows_the_labels(server, cluster: dict) -> None:
    shown = ok(cli_here(server, "cluster", "show", cluster["name"]))
    assert "labels_ignored" in shown and "owner" in shown and "tier" in shown
    topo = " ".join(ok(cli_here(server, "cluster", "topology", cluster["name"])).split())
    assert "labels flannel_backend=vxlan, owner=ops, team=blue, tier=db" in topo
    assert "(ignored by the driver, kept: owner, team, tier)" in topo
