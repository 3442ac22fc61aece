"""``/netbay/v1/pods`` without the kernel: scheduling, addressing, errors, and the
cluster network (leases) the conductor keeps with the cluster — on SQLite and PostgreSQL.

The server runs the conductor but no agent: pods stay ``BUILD`` until a status
report (the agent's ``PUT /netbay/v1/status``) says otherwise.
"""

from __future__ import annotations

import ipaddress

import httpx
import pytest
from coehelp import make_template, wait_status
from conftest import neutron_error, unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)


@pytest.fixture(scope="module")
def nb(server) -> httpx.Client:
    client = httpx.Client(base_url=f"{server.url}/netbay/v1", headers={"X-Auth-Token": server.token()},
                          timeout=30)
    server._clients.append(client)
    return client




def cluster(ci: httpx.Client, nodes: int, **labels: str) -> str:
    t = make_template(ci, name=unique("k8s"), external_network_id="public", network_driver="flannel",
                      floating_ip_enabled=False, master_lb_enabled=False, labels=labels)
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": t["uuid"], "node_count": nodes})
    assert r.status_code == 202, r.text
    c = wait_status(ci, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"))
    assert c["status"] == "CREATE_COMPLETE", c["status_reason"]
    return c["uuid"]


def clusternet(nb: httpx.Client, cid: str) -> dict | None:
    return next((n for n in nb.get("/state").json()["clusternets"] if n["id"] == cid), None)


def create(nb: httpx.Client, name: str, cid: str, node: str | None = None) -> httpx.Response:
    return nb.post("/pods", json={"pod": {"name": name, "cluster_id": cid, **({"node": node} if node else {})}})


def test_scheduling_and_addressing(ci: httpx.Client, nb: httpx.Client) -> None:
    cid = cluster(ci, 2)
    net = clusternet(nb, cid)
    assert net is not None and net["driver"] == "flannel"
    assert [n["role"] for n in net["nodes"]] == ["master", "minion", "minion"]
    leases = net["leases"]
    assert sorted(leases.values()) == ["10.100.1.0/24", "10.100.2.0/24", "10.100.3.0/24"]
    assert all(n["lease"] == leases[n["name"]] for n in net["nodes"])
    minions = [n["name"] for n in net["nodes"] if n["role"] == "minion"]

    pods = [create(nb, f"p{i}", cid).json()["pod"] for i in range(4)]
    assert all(p["status"] == "BUILD" for p in pods)
    assert sorted(p["node"] for p in pods) == sorted(minions * 2)      # least-loaded minion each time
    for p in pods:
        lease = ipaddress.ip_network(leases[p["node"]])
        assert ipaddress.ip_address(p["address"]) in lease
    per_node = {m: sorted(p["address"].rsplit(".", 1)[1] for p in pods if p["node"] == m) for m in minions}
    assert all(v == ["2", "3"] for v in per_node.values()), per_node    # after the gateway (.1)

    master = net["nodes"][0]
    on_master = create(nb, "m", cid, master["name"]).json()["pod"]
    assert on_master["node"] == master["name"] and on_master["sandbox_id"] == master["sandbox_id"]
    by_sandbox = create(nb, "m2", cid, master["sandbox_id"]).json()["pod"]
    assert by_sandbox["node"] == master["name"]

    # Deleting frees the address for the next pod on that node.
    assert nb.delete(f"/pods/{pods[0]['id']}").status_code == 204
    again = create(nb, "again", cid, pods[0]["node"]).json()["pod"]
    assert again["address"] == pods[0]["address"]

    listed = nb.get("/pods", params={"cluster_id": cid}).json()["pods"]
    assert len(listed) == 6 and {p["cluster_id"] for p in listed} == {cid}
    assert any(p["id"] == again["id"] for p in nb.get("/state").json()["pods"])

    # The agent's reports: ERROR with its reason, then ACTIVE (the reason goes).
    r = nb.put("/status", json={"pods": {again["id"]: "ERROR: LinkError: bridge 'cni0' missing"}})
    assert r.status_code == 200 and r.json()["updated"]["pods"] == [again["id"]], r.text
    shown = nb.get(f"/pods/{again['id']}").json()["pod"]
    assert (shown["status"], shown["status_reason"]) == ("ERROR", "LinkError: bridge 'cni0' missing")
    r = nb.put("/status", json={"pods": {again["id"]: "ACTIVE"}})
    assert r.status_code == 200, r.text
    shown = nb.get(f"/pods/{again['id']}").json()["pod"]
    assert (shown["status"], shown["status_reason"]) == ("ACTIVE", None)
    assert nb.put("/status", json={"pods": {again["id"]: "RUNNING"}}).status_code == 400

    # Deleting the cluster takes its pods and its cluster network along.
    assert ci.delete(f"/clusters/{cid}").status_code == 204
    wait_status(ci, cid, ("GONE",))
    assert nb.get("/pods", params={"cluster_id": cid}).json()["pods"] == []
    assert clusternet(nb, cid) is None


def test_errors(ci: httpx.Client, nb: httpx.Client) -> None:
    cid = cluster(ci, 1, flannel_network_subnetlen="30")   # a /30 lease: room for one pod
    neutron_error(create(nb, "x", "no-such-cluster"), 404, "ClusterNotFound")
    neutron_error(create(nb, "x", cid, "kube_minion_7"), 404, "NodeNotFound")
    neutron_error(nb.get("/pods/8d3c7c1e-0000-4000-8000-000000000000"), 404, "PodNotFound")
    r = nb.post("/pods", json={"pod": {"cluster_id": cid}})
    assert r.status_code == 400, r.text
    one = create(nb, "one", cid)
    assert one.status_code == 201, one.text
    lease = ipaddress.ip_network(clusternet(nb, cid)["leases"]["kube_minion_0"])
    assert one.json()["pod"]["address"] == str(lease.network_address + 2)   # .1 is cni0's
    neutron_error(create(nb, "one", cid), 409, "PodExists")
    msg = neutron_error(create(nb, "two", cid, "kube_minion_0"), 409, "IpAddressGenerationFailure")
    assert "is full" in msg
    assert nb.put("/status", json={"clusters": {cid: "UPDATE_FAILED: test"}}).status_code == 200
    neutron_error(create(nb, "three", cid), 409, "ClusterNotReady")
    assert nb.put("/status", json={"clusters": {cid: "UPDATE_COMPLETE"}}).status_code == 200
    assert create(nb, "three", cid, "kube_master_0").status_code == 201


def test_too_small_network(ci: httpx.Client) -> None:
    t = make_template(ci, name=unique("k8s"), external_network_id="public", network_driver="flannel",
                      floating_ip_enabled=False, master_lb_enabled=False,
                      labels={"flannel_network_cidr": "10.100.0.0/23"})
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": t["uuid"], "node_count": 2})
    assert r.status_code == 400, r.text
    assert "needs 3 flannel node leases" in r.text and "room for 1 node lease(s)" in r.text


def test_runtime_docker_pods_share_the_lease_and_swarm_gets_a_network(ci: httpx.Client, nb: httpx.Client) -> None:
    """A pod row ``runtime: docker`` (a Docker container the plugin plugs into the node)
    takes the next address of the same lease as agent-made pods, filters by runtime; an
    unknown runtime is a 400. A swarm cluster (docker driver) now has a container network."""
    cid = cluster(ci, 1)
    plain = create(nb, "p", cid, "kube_minion_0").json()["pod"]
    r = nb.post("/pods", json={"pod": {"name": "docker-x", "cluster_id": cid, "node": "kube_minion_0",
                                       "runtime": "docker"}})
    assert r.status_code == 201, r.text
    d = r.json()["pod"]
    assert (plain["runtime"], d["runtime"]) == ("", "docker")
    assert ipaddress.ip_address(d["address"]) == ipaddress.ip_address(plain["address"]) + 1
    assert [p["name"] for p in nb.get("/pods", params={"cluster_id": cid, "runtime": "docker"}).json()["pods"]] == \
        ["docker-x"]
    r = nb.post("/pods", json={"pod": {"name": "bad", "cluster_id": cid, "runtime": "podman"}})
    assert r.status_code == 400, r.text
    t = make_template(ci, name=unique("sw"), coe="swarm", external_network_id="public",
                      floating_ip_enabled=False, master_lb_enabled=False)
    assert t["network_driver"] == "docker"
    r = ci.post("/clusters", json={"name": unique("s"), "cluster_template_id": t["uuid"], "node_count": 1})
    assert r.status_code == 202, r.text
    sw = wait_status(ci, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"))
    assert sw["status"] == "CREATE_COMPLETE", sw["status_reason"]
    net = clusternet(nb, sw["uuid"])
    assert net is not None and net["driver"] == "docker" and net["config"] == {"network": "10.200.0.0/16"}
    assert create(nb, "on-swarm", sw["uuid"]).status_code == 201   # was 409: no container network
