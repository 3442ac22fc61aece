"""Cluster API behaviour that must be the same on both network backends (issue 14):
template references and errors, create → ``CREATE_COMPLETE`` with every network
object made in THAT backend and tagged, scaling, the HOT export, a delete that leaves
nothing, every node's port let to carry the pods' network (an allowed address pair,
as the backend's own ``openstack port show`` lists it), a cluster too big for the
``fixed_subnet`` it names refused before anything is made, rollback of a failure
midway naming the backend's own error, and the delete-by-tag sweep after a crash.

One parametrized fixture, ``cluster_api`` (``tests/backendfix.py``), runs each test
against a netbay server on its embedded network service and against ``netbay up
--backend openstack`` on a real cloud's Keystone and Neutron (API server only, no
agents: its ports stay DOWN, so these tests assert API effects, never packets; that
cloud has no Nova, so nodes are claims on their ports, ``device_owner=compute:netbay``,
where embedded nodes are netbay's sandboxes). A master load balancer is made in the
backend's Octavia: the cloud's (noop provider, a stand-in reporting the statuses a
provider would: ``tests/peers/octavia_peer.py``) or netbay's own, settled by a
stand-in for its dataplane agent (``tests.backendfix.agent_reports``). Octavia's
quota and load balancers adopted after a crash, a cloud without Octavia and ``netbay
up``'s refusal of an unreachable cloud stay in ``tests/test_cloud_cluster.py``; a
SIGKILLed server and subnet room in ``tests/test_clusters_build.py``.
"""

from __future__ import annotations

import ipaddress
import json
import uuid

import pytest
from coehelp import magnum_error, make_template, wait_status
from conftest import unique

from netbay.coe.compose import build
from netbay.coe.executor import Interrupted, Stack
from netbay.store.db import Store
from tests.backendfix import ClusterApi, agent_reports, cloud_snapshot, octavia_snapshot, openstack

BUILD_TIMEOUT = 300
TEMPLATE = {"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
            "floating_ip_enabled": True, "master_lb_enabled": False, "labels": {"flannel_backend": "vxlan"}}
POD_NETWORK = "10.100.0.0/16"   # flannel's default flannel_network_cidr


def _pairs(api: ClusterApi, port_id: str) -> list[str]:
    """The port's allowed address pairs as the backend's own ``openstack port show`` lists them."""
    shown = json.loads(openstack(api.env, "port", "show", port_id, "-f", "json"))["allowed_address_pairs"]
    if isinstance(shown, str):   # older clients print "ip_address='…', mac_address='…'" per pair
        return [part.split("'")[1] for part in shown.split(",") if "ip_address" in part]
    return [pair["ip_address"] for pair in shown]


def _template(api: ClusterApi, **extra) -> dict:
    return make_template(api.ci, **{**TEMPLATE, "name": unique("k8s"), **extra})


def _create(api: ClusterApi, template: dict, node_count: int, **extra) -> str:
    r = api.ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template["uuid"],
                                       "node_count": node_count, **extra})
    assert r.status_code == 202, r.text
    return r.json()["uuid"]


def _settled(api: ClusterApi, cid: str, verb: str = "CREATE") -> dict:
    return wait_status(api.ci, cid, (f"{verb}_COMPLETE", f"{verb}_FAILED"), BUILD_TIMEOUT)


def _delete(api: ClusterApi, cid: str) -> None:
    assert api.ci.delete(f"/clusters/{cid}").status_code == 204
    assert wait_status(api.ci, cid, ("GONE", "DELETE_FAILED"), BUILD_TIMEOUT)["status"] == "GONE"


# --- templates: what they name is looked up in the backend ------------------------------------------


def test_template_references_are_looked_up_in_the_backends_neutron(cluster_api: ClusterApi) -> None:
    api, net = cluster_api, cluster_api.conn.network
    public = net.find_network("public")
    assert make_template(api.ci, external_network_id=public.id)["external_network_id"] == public.id
    magnum_error(api.ci.post("/clustertemplates", json={"coe": "kubernetes", "external_network_id": "nowhere"}),
                 400, "Unable to find external network nowhere.")
    name = unique("inner")
    inner = api.seam.create("network", {"name": name})
    try:
        api.seam.create("subnet", {"network_id": inner["id"], "cidr": "10.77.0.0/24", "ip_version": 4,
                                   "name": name + "-sub"})
        magnum_error(api.ci.post("/clustertemplates", json={"coe": "kubernetes", "external_network_id": name}),
                     400, f"Unable to find external network {name}.")
        t = make_template(api.ci, fixed_network=name, fixed_subnet=name + "-sub")
        assert (t["fixed_network"], t["fixed_subnet"]) == (name, name + "-sub")
        magnum_error(api.ci.post("/clustertemplates", json={"coe": "kubernetes", "fixed_network": "nope"}),
                     400, "Unable to find fixed network nope.")
        magnum_error(api.ci.post("/clustertemplates", json={"coe": "kubernetes", "fixed_network": name,
                                                            "fixed_subnet": "nope"}),
                     400, "Unable to find fixed subnet nope.")
        assert api.ci.delete(f"/clustertemplates/{t['uuid']}").status_code == 204
    finally:
        api.seam.delete("network", inner["id"])


@pytest.mark.parametrize("body, status, detail", [
    ({"network_driver": "docker"}, 400, "Network driver type docker is not supported"),
    ({"labels": {"flannel_backend": "udp"}}, 400, "flannel_backend=udp"),
    ({"labels": {"flannel_network_cidr": "not-a-cidr"}}, 400, "flannel_network_cidr"),
    ({"external_network_id": "nowhere"}, 400, "Unable to find external network nowhere"),
    ({"coe": "frobnetes"}, 400, "Invalid input for field/attribute coe"),
    ({"frobs": 1}, 400, "Unknown attribute for argument cluster_template: frobs"),
])
def test_bad_templates_are_refused_in_magnums_words(cluster_api: ClusterApi, body: dict, status: int,
                                                    detail: str) -> None:
    """Raw (Magnum's error body) and through python-magnumclient, which raises on it."""
    from magnumclient import exceptions as mexc

    magnum_error(cluster_api.ci.post("/clustertemplates", json={"coe": "kubernetes", **body}), status,
                 contains=detail)
    if "frobs" not in body:   # magnumclient refuses unknown attributes itself
        with pytest.raises(mexc.BadRequest) as bad:
            cluster_api.magnum.cluster_templates.create(**{"coe": "kubernetes", **body})
        assert detail in str(bad.value)


# --- a cluster's life ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_cluster_is_made_in_the_backend_tagged_scaled_exported_and_deleted_without_trace(
        cluster_api: ClusterApi) -> None:
    api, net = cluster_api, cluster_api.conn.network
    before, cli_before = api.snapshot(), cloud_snapshot(api.env)
    ct = api.magnum.cluster_templates.create(**{**TEMPLATE, "name": unique("mc")})
    cid = api.magnum.clusters.create(name=unique("mcc"), cluster_template_id=ct.uuid, node_count=2).uuid
    cluster = _settled(api, cid)
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
    assert api.magnum.clusters.get(cid).status == "CREATE_COMPLETE" and cluster["stack_id"]
    tag = f"netbay-cluster={cid}"
    networks, subnets, routers = (list(net.networks(tags=tag)), list(net.subnets(tags=tag)),
                                  list(net.routers(tags=tag)))
    assert (len(networks), len(subnets), len(routers)) == (1, 1, 1)
    assert len(list(net.security_groups(tags=tag))) >= 3
    # Three nodes, each with a floating IP on the backend's public network.
    fips = list(net.ips(tags=tag))
    public = net.find_network("public")
    assert len(fips) == 3 and all(f.floating_network_id == public.id for f in fips)
    node_ports = {p.id for p in net.ports(tags=tag, network_id=networks[0].id)
                  if p.device_owner not in ("network:router_interface", "network:dhcp")}
    assert {f.port_id for f in fips} <= node_ports
    assert all(_pairs(api, p) == [POD_NETWORK] for p in node_ports)   # pods' traffic passes anti-spoofing
    assert len(cluster["master_addresses"]) == 1 and len(cluster["node_addresses"]) == 2
    assert set(cluster["master_addresses"]) | set(cluster["node_addresses"]) == {f.floating_ip_address for f in fips}
    assert cluster["api_address"] == f"https://{cluster['master_addresses'][0]}:6443"
    interfaces = list(net.ports(device_id=routers[0].id, device_owner="network:router_interface"))
    assert [ip["subnet_id"] for p in interfaces for ip in p.fixed_ips] == [subnets[0].id]
    assert routers[0].external_gateway_info["network_id"] == public.id
    if api.kind == "openstack":   # no Nova and no agents: nodes are port claims Neutron never binds
        nodes = [p for p in net.ports(tags=tag) if p.device_owner == "compute:netbay"]
        assert len(nodes) == 3 and all(p.status == "DOWN" for p in nodes)
    else:
        assert len(api.snapshot()["sandbox"] - before["sandbox"]) == 3

    resources = api.ci.get(f"/clusters/{cid}/resources").json()
    assert resources["stack"]["status"] == "CREATE_COMPLETE"
    assert {"OS::Neutron::Net", "OS::Neutron::Subnet", "OS::Neutron::Router", "OS::Nova::Server",
            "OS::Neutron::FloatingIP", "OS::Neutron::SecurityGroup"} <= {r["type"] for r in resources["resources"]}
    assert all(r["status"] == "CREATE_COMPLETE" and r["physical_id"] for r in resources["resources"])
    assert networks[0].id in {r["physical_id"] for r in resources["resources"]}   # the backend's own ids
    hot = api.ci.get(f"/clusters/{cid}/template").json()
    assert len([n for n, r in hot["template"]["resources"].items() if r["type"] == "OS::Nova::Server"]) == 3

    api.magnum.clusters.update(cid, [{"op": "replace", "path": "/node_count", "value": 3}])
    cluster = _settled(api, cid, "UPDATE")
    assert cluster["status"] == "UPDATE_COMPLETE", cluster["status_reason"]
    assert len(cluster["node_addresses"]) == 3 and len(list(net.ips(tags=tag))) == 4
    grown = {p.id for p in net.ports(tags=tag, network_id=networks[0].id)
             if p.device_owner not in ("network:router_interface", "network:dhcp")}
    assert len(grown - node_ports) == 1 and all(_pairs(api, p) == [POD_NETWORK] for p in grown)   # once each
    api.magnum.clusters.update(cid, [{"op": "replace", "path": "/node_count", "value": 1}])
    cluster = _settled(api, cid, "UPDATE")
    assert cluster["status"] == "UPDATE_COMPLETE" and len(cluster["node_addresses"]) == 1
    assert len(list(net.ips(tags=tag))) == 2

    api.magnum.clusters.delete(cid)
    assert wait_status(api.ci, cid, ("GONE", "DELETE_FAILED"), BUILD_TIMEOUT)["status"] == "GONE"
    api.magnum.cluster_templates.delete(ct.uuid)
    assert api.snapshot() == before
    assert cloud_snapshot(api.env) == cli_before   # as the backend lists it to a client of its clouds.yaml


@pytest.mark.slow
def test_a_cluster_too_big_for_its_fixed_subnet_is_400_before_anything_is_made(cluster_api: ClusterApi) -> None:
    """The room is the subnet's allocation pools less the addresses its ports hold, as the
    backend reports them: a port of someone else's takes one."""
    api = cluster_api
    name = unique("small")
    network = api.seam.create("network", {"name": name})
    try:
        subnet = api.seam.create("subnet", {"network_id": network["id"], "cidr": "10.78.0.0/29", "ip_version": 4,
                                            "name": name + "-sub"})
        api.seam.create("port", {"network_id": network["id"], "name": name + "-other"})
        held = sum(1 for p in api.seam.list("port", network_id=network["id"])
                   for ip in p["fixed_ips"] if ip["subnet_id"] == subnet["id"])
        room = 5 - held      # .2-.6 of the /29
        assert room >= 1
        template = _template(api)
        before, cli_before = api.snapshot(), cloud_snapshot(api.env)
        r = api.ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template["uuid"],
                                           "node_count": room, "fixed_network": name, "fixed_subnet": name + "-sub"})
        magnum_error(r, 400, f"A cluster of 1 master(s) and {room} node(s) needs {room + 1} addresses on its "
                             f"private subnet 10.78.0.0/29, which has room for {room}. Use a larger "
                             "fixed_subnet_cidr or fewer nodes.")
        assert api.snapshot() == before and cloud_snapshot(api.env) == cli_before
        assert api.ci.delete(f"/clustertemplates/{template['uuid']}").status_code == 204
    finally:
        for port in api.seam.list("port", network_id=network["id"]):
            api.seam.delete("port", port["id"])
        api.seam.delete("network", network["id"])


def test_a_port_quota_midway_rolls_back_and_names_the_backends_error(cluster_api: ClusterApi) -> None:
    """Both Neutrons count the project's ports (nodes' and the router interface): 3 are
    not enough for 1 master and 3 minions, so a port create in the middle is refused,
    set as an operator sets it: ``openstack quota set --ports``."""
    api = cluster_api
    before = api.snapshot()
    template = _template(api)
    openstack(api.env, "quota", "set", "--ports", "3", api.project_id)
    try:
        cid = _create(api, template, node_count=3)
        cluster = _settled(api, cid)
    finally:
        openstack(api.env, "quota", "set", "--ports", "-1", api.project_id)
    assert cluster["status"] == "CREATE_FAILED"
    assert "(OS::Neutron::" in cluster["status_reason"]
    assert "Quota exceeded for resources: ['port']" in cluster["status_reason"], cluster["status_reason"]
    assert "rollback incomplete" not in cluster["status_reason"]
    assert api.snapshot() == before
    _delete(api, cid)
    assert api.snapshot() == before


def test_a_subnet_the_backend_refuses_fails_the_create_with_its_reason_and_leaves_nothing(
        cluster_api: ClusterApi) -> None:
    """The cluster's private subnet overlaps the backend's external one: the router's
    interface on it is refused by that backend's Neutron."""
    api = cluster_api
    public_cidr = next(api.conn.network.subnets(network_id=api.conn.network.find_network("public").id)).cidr
    before = api.snapshot()
    cid = _create(api, _template(api), node_count=1,
                  labels={"flannel_backend": "vxlan", "fixed_subnet_cidr": str(ipaddress.ip_network(public_cidr))})
    cluster = _settled(api, cid)
    assert cluster["status"] == "CREATE_FAILED"
    assert "failed" in cluster["status_reason"] and "(OS::Neutron::" in cluster["status_reason"], \
        cluster["status_reason"]
    assert "rollback incomplete" not in cluster["status_reason"]
    assert api.snapshot() == before
    _delete(api, cid)


@pytest.fixture
def octavia_conn(cluster_api: ClusterApi, request: pytest.FixtureRequest):
    """An admin connection with the backend's Octavia in its catalog, whose load balancers settle."""
    if cluster_api.kind == "openstack":
        request.getfixturevalue("octavia")
        conn = request.getfixturevalue("cloud").connection()   # a connection reads the catalog once
        yield conn
        conn.close()
    else:
        halt = agent_reports(cluster_api.server)
        try:
            yield cluster_api.conn
        finally:
            halt()


def test_a_master_load_balancer_is_made_in_the_backends_octavia_and_deleted_without_trace(
        cluster_api: ClusterApi, octavia_conn) -> None:
    """No floating IPs: one on the API load balancer needs its VIP port in Neutron, which a
    real provider makes and the cloud's noop provider does not (it invents its id)."""
    api, conn = cluster_api, octavia_conn
    before, lbs_before = api.snapshot(), octavia_snapshot(conn)
    cid = _create(api, _template(api, master_lb_enabled=True, floating_ip_enabled=False), node_count=1)
    cluster = _settled(api, cid)
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
    tag = f"netbay-cluster={cid}"
    lbs = list(conn.load_balancer.load_balancers(tags=tag))
    assert len(lbs) == 2 and all(lb.provisioning_status == "ACTIVE" for lb in lbs)   # the API's and etcd's
    subnet = list(conn.network.subnets(tags=tag))[0]
    assert {lb.vip_subnet_id for lb in lbs} == {subnet.id}   # VIPs on the cluster's subnet in that Neutron
    assert 6443 in {ls.protocol_port for ls in conn.load_balancer.listeners(tags=tag)}
    members = [m for p in conn.load_balancer.pools(tags=tag) for m in conn.load_balancer.members(p)]
    masters = [p for p in conn.network.ports(tags=tag) if "master" in (p.name or "")]
    assert masters and {ip["ip_address"] for p in masters for ip in p.fixed_ips} <= {m.address for m in members}
    api_lb = next(lb for lb in lbs if "api_lb" in lb.name)
    assert cluster["api_address"] == f"https://{api_lb.vip_address}:6443"
    assert octavia_snapshot(conn) != lbs_before
    _delete(api, cid)
    assert octavia_snapshot(conn) == lbs_before and api.snapshot() == before


# --- the delete-by-tag sweep ------------------------------------------------------------------------


def test_a_restart_adopts_by_tag_and_a_crashed_delete_is_finished(store: Store, cluster_api: ClusterApi) -> None:
    """The executor on the backend, as the conductor builds it: it stops dead right after
    the backend made a network, a security group, a port and a floating IP but before
    their ids were written down; a new executor finds them by tag instead of making them
    twice. A delete stopped half-way is finished by the next one, and the sweep leaves nothing."""
    api = cluster_api
    c = {"name": unique("c"), "uuid": str(uuid.uuid4()), "master_count": 1, "node_count": 2}
    graph = build(TEMPLATE, c)
    lost = {next(n for n, node in sorted(graph.nodes.items()) if node.type == t)
            for t in ("OS::Neutron::Net", "OS::Neutron::SecurityGroup", "OS::Neutron::Port",
                      "OS::Neutron::FloatingIP")}
    before = api.snapshot()

    def stack(**kw) -> Stack:
        return Stack(store, api.api, cluster_id=c["uuid"], name=c["name"], project_id=api.project_id,
                     net=api.seam, **kw)

    def crash_after_made(name: str, action: str, status: str) -> None:
        if status == "MADE" and name in lost:
            raise Interrupted()

    with pytest.raises(Interrupted):
        stack(hook=crash_after_made).create(graph, {"template": TEMPLATE, "cluster": c})
    outcome = stack().resume()
    assert outcome is not None and outcome.status == "CREATE_COMPLETE", outcome
    tag = f"netbay-cluster={c['uuid']}"
    net = api.conn.network
    counts = (len(list(net.networks(tags=tag))), len(list(net.ports(tags=tag))),
              len(list(net.ips(tags=tag))), len(list(net.security_groups(tags=tag))))
    groups = sum(node.type == "OS::Neutron::SecurityGroup" for node in graph.nodes.values())
    assert counts == (1, 3, 3, groups), counts   # nothing made twice
    if api.api is not None:
        assert len(api.snapshot()["sandbox"] - before["sandbox"]) == 3

    deleted = [0]

    def crash_midway(name: str, action: str, status: str) -> None:
        if action == "DELETE" and status == "COMPLETE":
            deleted[0] += 1
            if deleted[0] == 6:
                raise Interrupted()

    with pytest.raises(Interrupted):
        stack(hook=crash_midway).delete()
    assert api.snapshot() != before
    assert stack().resume().status == "DELETE_COMPLETE"
    assert api.snapshot() == before
