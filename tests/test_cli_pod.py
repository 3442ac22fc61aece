"""``netbay pod`` and ``netbay cluster connectivity`` / ``topology --svg`` driven as a user
drives them (the real CLI in a subprocess) against a real server with the dataplane
agent wiring the kernel — on SQLite and on PostgreSQL.

A flannel (vxlan) cluster of 1 master and 2 minions gets a pod per minion through the
CLI; ``pod exec`` runs ``ip`` inside a pod's namespace; the connectivity matrix
pings, for real, from every pod and node namespace to every pod and node address and
finds all 25 cells reachable; a second cluster on its own private network (and its
own pod network) is isolated: the first cluster's pods do NOT reach its pod, while
its own nodes do. Errors come back with the server's message, the HTTP status and a
non-zero exit.

Needs root (namespaces, raw ICMP sockets). The agent runs in this process with a
namespace prefix under the run's ``nbt<hex>-``; every namespace with it is deleted
at the end, also on failure, and the root namespace is checked unchanged.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from clihelp import check_svg_readable, cli, ok
from coehelp import ci_client
from conftest import Server, start_server, stop_server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="pods are wired in network namespaces: needs root")


@dataclass
class Cloud:
    server: Server
    ci: httpx.Client
    prefix: str

    def run(self, *args: str, timeout: float = 120) -> Any:
        return cli(self.server, *args, timeout=timeout)

    def pod_ns(self, pod_id: str) -> str:
        from netbay.dataplane.names import Names

        return Names(self.prefix).pod(pod_id)


@pytest.fixture(scope="module")
def cloud(database_url: str, db_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    """A server on ``database_url`` and an in-process agent with this module's prefix;
    afterwards: clusters deleted, agent and server stopped, namespaces swept, the root
    namespace compared with its state before."""
    from dataplane.agent_fixtures import InProcessAgent, sweep_prefix
    from dataplane.dp_helpers import PREFIX, diff_snapshots, root_snapshot
    from netbay.dataplane.names import Names

    prefix = f"{PREFIX}cp{db_backend[0]}-"
    before = root_snapshot()
    server = start_server(database_url, tmp_path_factory.mktemp("podcli"))
    agent = InProcessAgent(server, Names(prefix))
    try:
        agent.start()
        cloud = Cloud(server, ci_client(server, server.token()), prefix)
        yield cloud
        for c in cloud.ci.get("/clusters").json()["clusters"]:
            cloud.ci.delete(f"/clusters/{c['uuid']}")
        wait(lambda: not cloud.ci.get("/clusters").json()["clusters"], 90, "the clusters to go")
    finally:
        try:
            agent.stop()
        finally:
            stop_server(server)
            sweep_prefix(prefix)
    bad, foreign = diff_snapshots(before, root_snapshot())
    if foreign:
        warnings.warn("root namespace changed by other software: " + "; ".join(foreign), stacklevel=1)
    assert not bad, "root namespace changed:\n  " + "\n  ".join(bad)


def wait(cond: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.1) + 2):
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def make_cluster(cloud: Cloud, name: str, nodes: int, **labels: str) -> dict:
    r = cloud.ci.post("/clustertemplates", json={
        "name": f"{name}-t", "coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
        "master_lb_enabled": False, "floating_ip_enabled": False, "labels": {"flannel_backend": "vxlan", **labels}})
    assert r.status_code == 201, r.text
    r = cloud.ci.post("/clusters", json={"name": name, "cluster_template_id": r.json()["uuid"], "node_count": nodes})
    assert r.status_code == 202, r.text
    uuid = r.json()["uuid"]
    cluster = wait(lambda: (c := cloud.ci.get(f"/clusters/{uuid}").json())["status"].endswith(("COMPLETE", "FAILED"))
                   and c, 120, f"cluster {name}")
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
    return cluster


def create_pod(cloud: Cloud, name: str, cluster: str, *extra: str) -> dict:
    """``netbay pod create``; returns the pod as the API shows it."""
    out = ok(cloud.run("pod", "create", name, "--cluster", cluster, "--timeout", "60", *extra))
    assert f"pod {name} ACTIVE in " in out, out
    pod_id = out.split(f"pod {name} (")[1].split(")")[0]
    pod = cloud.ci.get(f"{cloud.server.url}/netbay/v1/pods/{pod_id}").json()["pod"]
    assert f"placed on {pod['node']}, address {pod['address']}" in out
    assert pod["status"] == "ACTIVE"
    return pod


def matrix(cloud: Cloud, *clusters: str) -> tuple[dict, dict[tuple[str, str], dict]]:
    """``netbay cluster connectivity --json``: the document and its cells by (from, to) name."""
    r = cloud.run("cluster", "connectivity", *clusters, "--prefix", cloud.prefix, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    doc = json.loads(r.stdout)
    doc["returncode"] = r.returncode
    name = {m["id"]: f"{m['cluster']}/{m['name']}" for m in doc["members"]}
    return doc, {(name[c["from"]], name[c["to"]]): c for c in doc["cells"]}


@pytest.fixture(scope="module")
def ca(cloud: Cloud) -> dict:
    return make_cluster(cloud, "ca", 2)


@pytest.fixture(scope="module")
def pods_a(cloud: Cloud, ca: dict) -> list[dict]:
    """A pod on each minion of ``ca`` (the second by the cluster's uuid)."""
    pa0 = create_pod(cloud, "pa0", "ca")
    pa1 = create_pod(cloud, "pa1", ca["uuid"])
    assert {pa0["node"], pa1["node"]} == {"kube_minion_0", "kube_minion_1"}   # least-loaded: one each
    return [pa0, pa1]


def test_pod_list_show_exec(cloud: Cloud, ca: dict, pods_a: list[dict]) -> None:
    from netbay.dataplane import netns

    pa0, pa1 = pods_a
    listed = ok(cloud.run("pod", "list", "--cluster", "ca"))
    for p in pods_a:
        assert p["id"] in listed and p["address"] in listed and p["node"] in listed
    assert listed.count("ACTIVE") == 2 and " ca " in listed
    assert pa0["id"] in ok(cloud.run("pod", "list"))

    for ident in ("pa0", pa0["id"]):
        shown = ok(cloud.run("pod", "show", ident, "--prefix", cloud.prefix))
        assert pa0["address"] in shown and pa0["node"] in shown and pa0["sandbox_id"] in shown
        assert cloud.pod_ns(pa0["id"]) in shown and "│ cluster " in shown and " ca " in shown

    # exec: the pod's own namespace (eth0 holds its address, the default route is its node's cni0)
    for p in pods_a:
        assert netns.exists(cloud.pod_ns(p["id"]))
        out = ok(cloud.run("pod", "exec", p["name"], "--prefix", cloud.prefix, "--", "ip", "-4", "addr", "show",
                           "eth0"))
        assert f"inet {p['address']}/24" in out
        other = next(q for q in pods_a if q is not p)
        assert other["address"] not in out
    out = ok(cloud.run("pod", "exec", pa1["id"], "--prefix", cloud.prefix, "--", "ip", "-4", "route"))
    assert f"default via {pa1['address'].rsplit('.', 1)[0]}.1 dev eth0" in out
    r = cloud.run("pod", "exec", "pa1", "--cluster", "ca", "--prefix", cloud.prefix, "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr
    r = cloud.run("pod", "exec", "pa0", "--prefix", "nbnone-", "--", "true")
    assert r.returncode == 1 and f"namespace nbnone-p-{pa0['id']} does not exist on this host" in r.stderr


def test_errors_are_clear(cloud: Cloud, ca: dict, pods_a: list[dict]) -> None:
    r = cloud.run("pod", "create", "x", "--cluster", "no-such-cluster")
    assert r.returncode == 1 and "no-such-cluster could not be found" in r.stderr and "HTTP 404" in r.stderr
    r = cloud.run("pod", "create", "x", "--cluster", "ca", "--node", "kube_minion_9")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "has no node kube_minion_9" in r.stderr and "HTTP 404" in r.stderr
    r = cloud.run("pod", "create", "pa0", "--cluster", "ca")
    assert r.returncode == 1 and "A pod named pa0 already exists" in r.stderr and "HTTP 409" in r.stderr
    for verb in ("show", "delete"):
        r = cloud.run("pod", verb, "no-such-pod")
        assert r.returncode == 1 and "Pod no-such-pod could not be found" in r.stderr and "HTTP 404" in r.stderr
    r = cloud.run("pod", "show", "pa0", "--cluster", "no-such-cluster")
    assert r.returncode == 1 and "could not be found" in r.stderr
    assert "x" not in [p["name"] for p in cloud.ci.get(f"{cloud.server.url}/netbay/v1/pods").json()["pods"]]


def test_connectivity_all_reachable(cloud: Cloud, ca: dict, pods_a: list[dict]) -> None:
    doc, cells = matrix(cloud, "ca")
    assert doc["returncode"] == 0
    members = {(m["kind"], m["name"]): m for m in doc["members"]}
    assert set(members) == {("master", "kube_master_0"), ("minion", "kube_minion_0"), ("minion", "kube_minion_1"),
                            ("pod", "pa0"), ("pod", "pa1")}
    assert all(m["present"] for m in doc["members"])
    assert {members[("pod", p["name"])]["address"] for p in pods_a} == {p["address"] for p in pods_a}
    assert len(cells) == 25
    assert all(c["reachable"] is True and c["same_cluster"] for c in cells.values()), \
        [k for k, c in cells.items() if c["reachable"] is not True]
    assert doc["summary"]["within"] == {"cells": 25, "probed": 25, "reachable": 25, "not_routed": 0}
    assert doc["summary"]["all_reachable_within"] is True

    out = ok(cloud.run("cluster", "connectivity", "ca", "--prefix", cloud.prefix))
    assert "all 25 cells within the cluster reachable" in out and "✗" not in out
    assert "pod pa0 @kube_minion_0" in out or "pod pa0 @kube_minion_1" in out
    r = cloud.run("cluster", "connectivity", "ca")   # the product prefix: none of its namespaces here
    assert r.returncode == 1 and "no namespace of cluster ca" in r.stderr


def test_the_prefix_comes_from_the_openrc(cloud: Cloud, ca: dict, pods_a: list[dict],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``netbay up`` writes ``NETBAY_AGENT_PREFIX`` into its openrc; with it sourced, the
    client commands find the agent's namespaces without ``--prefix``."""
    monkeypatch.setenv("NETBAY_AGENT_PREFIX", cloud.prefix)
    pa0 = pods_a[0]
    assert cloud.pod_ns(pa0["id"]) in ok(cloud.run("pod", "show", "pa0"))
    assert f"inet {pa0['address']}/24" in ok(cloud.run("pod", "exec", "pa0", "--", "ip", "-4", "addr", "show", "eth0"))
    assert "all 25 cells within the cluster reachable" in ok(cloud.run("cluster", "connectivity", "ca"))
    sandbox = pa0["sandbox_id"]   # the node's sandbox: `sandbox exec` learns the prefix too
    assert "eth0" in ok(cloud.run("sandbox", "exec", sandbox, "--", "ip", "-brief", "link", "show", "eth0"))


def test_another_cluster_is_isolated(cloud: Cloud, ca: dict, pods_a: list[dict]) -> None:
    """A second cluster: its own private network and router, its own pod network. Its pod
    answers its own nodes but not the first cluster's pods, and the other way round."""
    make_cluster(cloud, "cb", 1, flannel_network_cidr="10.101.0.0/16")
    pb0 = create_pod(cloud, "pb0", "cb")
    assert pb0["address"].startswith("10.101.")
    doc, cells = matrix(cloud, "ca", "cb")
    unreachable = [k for k, c in cells.items() if c["same_cluster"] and c["reachable"] is not True]
    assert doc["returncode"] == 0, (doc["summary"], unreachable)   # every cell within a cluster reachable
    within = [c for c in cells.values() if c["same_cluster"]]
    assert len(within) == 25 + 9 and all(c["reachable"] is True for c in within)
    for pa in pods_a:                                          # the cells that must fail, both ways
        for key in ((f"ca/{pa['name']}", "cb/pb0"), ("cb/pb0", f"ca/{pa['name']}")):
            assert cells[key]["reachable"] is False and cells[key]["note"] == "", (key, cells[key])
    for key in (("cb/kube_master_0", "cb/pb0"), ("cb/kube_minion_0", "cb/pb0"), ("cb/pb0", "cb/kube_master_0")):
        assert cells[key]["reachable"] is True, key
    # Both private networks are 10.0.0.0/24: a node address of the other cluster lies in
    # the row's own network (an echo would be answered there, if by anyone), so it is
    # not probed across; pod networks differ (10.100/16, 10.101/16): those are probed.
    spaces = {c["name"]: c["address_space"] for c in doc["clusters"]}
    assert "10.0.0.0/24" in spaces["ca"] and "10.0.0.0/24" in spaces["cb"]
    kind = {f"{m['cluster']}/{m['name']}": m["kind"] for m in doc["members"]}
    for (src, dst), c in cells.items():
        if c["same_cluster"]:
            continue
        if kind[dst] == "pod":
            assert c["reachable"] is False and c["note"] == "", (src, dst, c)
        else:
            assert c["reachable"] is None and c["note"] == "overlap", (src, dst, c)
    assert doc["summary"]["between"] == {"cells": 30, "probed": 11, "reachable": 0}

    out = ok(cloud.run("cluster", "connectivity", "ca", "cb", "--prefix", cloud.prefix))
    assert "✗" in out and "cb/pb0" in out and "all 34 cells within the clusters reachable" in out
    assert "between clusters: 0/11 probed cells reachable; 19 not probed (overlap" in " ".join(out.split())

    # Pods of the same name in two clusters: by name alone is ambiguous, --cluster tells.
    ok(cloud.run("pod", "create", "pa0", "--cluster", "cb", "--no-wait"))
    r = cloud.run("pod", "show", "pa0")
    assert r.returncode == 1 and "2 pods are named 'pa0'" in r.stderr
    assert "10.101." in ok(cloud.run("pod", "show", "pa0", "--cluster", "cb"))
    ok(cloud.run("pod", "delete", "pa0", "--cluster", "cb"))
    assert pods_a[0]["address"] in ok(cloud.run("pod", "show", "pa0"))


def test_topology_picture(cloud: Cloud, ca: dict, pods_a: list[dict], tmp_path: Path) -> None:
    picture = tmp_path / "ca.svg"
    out = ok(cloud.run("cluster", "topology", "ca", "--svg", str(picture)))
    net = cloud.ci.get(f"{cloud.server.url}/netbay/v1/clusternets/{ca['uuid']}").json()["clusternet"]
    text = check_svg_readable(picture)
    for node in net["nodes"]:
        for shown in (out, text):
            assert f"ca-{node['name']}" in shown and node["address"].split("/")[0] in shown
            assert f"lease {node['lease']}" in shown
    for p in pods_a:
        assert f"pod {p['name']} {p['address']} ACTIVE" in out
        assert f"pod {p['name']}" in text and p["address"] in text
    assert "external network public" in text and "router ca-extrouter" in text and "network ca-fixed_network" in text


def test_pod_delete(cloud: Cloud, ca: dict, pods_a: list[dict]) -> None:
    """Last: the pods go, and with them their namespaces; the matrix is the nodes'."""
    from netbay.dataplane import netns

    out = ok(cloud.run("pod", "delete", "pa0", "pa1", "--cluster", "ca"))
    assert "deleted pod pa0" in out and "deleted pod pa1" in out
    wait(lambda: not any(netns.exists(cloud.pod_ns(p["id"])) for p in pods_a), 30, "the pods' namespaces to go")
    assert "pa0" not in ok(cloud.run("pod", "list", "--cluster", "ca"))
    doc, cells = matrix(cloud, "ca")
    assert len(cells) == 9 and all(c["reachable"] is True for c in cells.values())
