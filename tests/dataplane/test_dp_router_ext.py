"""A router's extra routes and a floating IP's port forwardings through the API and the
agent, with real packets (issue 29): the outside world reaches a sandbox's port 22
through the floating IP's port 2222 and through each port of a range; a sandbox reaches a network that lives behind
another sandbox through the router's extra route."""

from __future__ import annotations

import socket

from netbay.dataplane import links, netns
from netbay.dataplane.l3.rtdump import link_table
from netbay.dataplane.nft import Nft

from .agent_fixtures import Cloud, wait_for
from .dp_helpers import ping

CLOUD_TAG = "rx"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def _reaches(client_ns: str, server_ns: str, dst: str, port: int, listen: int) -> bool:
    with netns.entered(server_ns):
        srv = socket.socket()
    with netns.entered(client_ns):
        cli = socket.socket()
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", listen))
        srv.listen(1)
        cli.settimeout(0.5)
        try:
            cli.connect((dst, port))
        except OSError:
            return False
        return True
    finally:
        cli.close()
        srv.close()


def _fip_limits(ns: str) -> dict[str, dict[str, int]]:
    """{direction: {floating address: bytes/s}} as the router namespace polices them."""
    with Nft(ns) as nft:
        objects = nft.list_table("ip", "netbay-fipqos") or []
    out: dict[str, dict[str, int]] = {}
    for o in objects:
        body = o.get("map")
        for address, name in (body or {}).get("elem") or ():
            out.setdefault(body["name"], {})[address] = int(name.rsplit("_", 2)[1])
    return out


def test_port_forwarding_and_extra_route(cloud: Cloud) -> None:
    conn = cloud.server.connect()
    public = conn.network.find_network("public")
    net = conn.network.create_network(name="rx")
    subnet = conn.network.create_subnet(network_id=net.id, cidr="10.65.0.0/24", ip_version=4)
    router = conn.network.create_router(name="rx", external_gateway_info={"network_id": public.id})
    conn.network.add_interface_to_router(router, subnet_id=subnet.id)
    sg = conn.network.create_security_group(name="ssh")
    conn.network.create_security_group_rule(security_group_id=sg.id, direction="ingress", ethertype="IPv4",
                                            protocol="tcp", port_range_min=22, port_range_max=22)
    b = conn.network.create_port(network_id=net.id, allowed_address_pairs=[{"ip_address": "192.168.77.0/24"}])
    a = conn.network.create_port(network_id=net.id, security_group_ids=[sg.id, *b.security_group_ids])
    ns_a, ns_b = (cloud.sandbox_ns(cloud.sandbox(n, ports=[p.id])["id"]) for n, p in (("rx-a", a), ("rx-b", b)))
    for p in (a, b):
        cloud.wait_status(f"/network/v2.0/ports/{p.id}", "ACTIVE")
    ip_a, ip_b = a.fixed_ips[0]["ip_address"], b.fixed_ips[0]["ip_address"]

    # Metering: a label counting what enters this network through the gateway
    # (Neutron's ingress: -d 10.65.0.0/24 -i qg-), read as the metering agent reports it.
    label = conn.network.create_metering_label(name="rx-meter")
    conn.network.create_metering_label_rule(metering_label_id=label.id, direction="ingress",
                                            remote_ip_prefix="10.65.0.0/24")
    fip = conn.network.create_ip(floating_network_id=public.id)
    single = conn.network.create_floating_ip_port_forwarding(
        fip, internal_port_id=a.id, internal_ip_address=ip_a, internal_port=22, external_port=2222, protocol="tcp")
    cloud.wait_status(f"/network/v2.0/floatingips/{fip.id}", "ACTIVE")
    outside = cloud.names.external(public.id)
    wait_for(lambda: _reaches(outside, ns_a, fip.floating_ip_address, 2222, 22), 15, 0.1,
             "the outside reaching port 22 through the floating IP's 2222")
    assert not _reaches(outside, ns_a, fip.floating_ip_address, 2223, 22)

    def metered() -> dict:
        r = cloud.http.get("/netbay/v1/metering", params={"label_id": label.id})
        assert r.status_code == 200, r.text
        body = r.json()
        return (body["metering"] or [{}])[0]

    wait_for(lambda: metered().get("pkts", 0) >= 2, 30, 0.5, "the label's counts reported")
    report = metered()
    assert report["label_id"] == label.id and report["tenant_id"] == label.project_id
    assert report["bytes"] > 0 and set(report) == {"label_id", "tenant_id", "pkts", "bytes", "time",
                                                   "first_update", "last_update", "host"}
    # A port range (floating-ip-port-forwarding-port-ranges): 2300:2301 all to port 22
    # (which the single forwarding holds until it goes: internal ranges may not overlap).
    conn.network.delete_floating_ip_port_forwarding(fip, single)
    conn.network.create_floating_ip_port_forwarding(fip, internal_port_id=a.id, internal_ip_address=ip_a,
                                                    internal_port_range="22", external_port_range="2300:2301",
                                                    protocol="tcp")
    for port in (2300, 2301):
        wait_for(lambda p=port: _reaches(outside, ns_a, fip.floating_ip_address, p, 22), 15, 0.1,
                 f"the outside reaching port 22 through the range's {port}")
    assert not _reaches(outside, ns_a, fip.floating_ip_address, 2302, 22)

    links.set_up(ns_b, "lo")
    links.add_address(ns_b, "lo", "192.168.77.1/32")
    assert not ping(ns_a, "192.168.77.1", timeout=0.5)
    conn.network.add_extra_routes_to_router(router, {"router": {"routes": [
        {"destination": "192.168.77.0/24", "nexthop": ip_b}]}})
    wait_for(lambda: ping(ns_a, "192.168.77.1", timeout=0.3), 15, 0.1, "the extra route used")
    conn.network.remove_extra_routes_from_router(router, {"router": {"routes": [
        {"destination": "192.168.77.0/24", "nexthop": ip_b}]}})
    wait_for(lambda: not ping(ns_a, "192.168.77.1", timeout=0.3), 15, 0.1, "the route gone")

    # qos-fip: the floating IP's policy's limit in the router's namespace, a rule's change
    # following it there (the policy's change is the router's work), none once taken away.
    policy = conn.network.create_qos_policy(name="rx-fip")
    rule = conn.network.create_qos_bandwidth_limit_rule(policy, max_kbps=8000, direction="ingress")
    conn.network.update_ip(fip, qos_policy_id=policy.id)
    ns_router = cloud.names.router(router.id)
    wait_for(lambda: _fip_limits(ns_router) == {"ingress": {fip.floating_ip_address: 1_000_000}}, 15, 0.1,
             "the floating IP's ingress limit in its router")
    conn.network.update_qos_bandwidth_limit_rule(rule, policy, max_kbps=4000)
    wait_for(lambda: _fip_limits(ns_router) == {"ingress": {fip.floating_ip_address: 500_000}}, 15, 0.1,
             "the changed limit")
    conn.network.update_ip(fip, qos_policy_id=None)
    wait_for(lambda: _fip_limits(ns_router) == {}, 15, 0.1, "no limit once the policy is taken away")


def test_address_scopes_part_a_router_through_the_api(cloud: Cloud) -> None:
    """Address scopes through the API and the agent: two subnets from two pools on one
    router talk while neither pool has a scope, stop when one pool joins a scope (the
    network shows it as ``ipv4_address_scope``), and talk again when both are in it."""
    conn = cloud.server.connect()
    scope = conn.network.create_address_scope(name="rx-scope", ip_version=4)
    pools = [conn.network.create_subnet_pool(name=f"rx-pool{i}", prefixes=[f"10.{66 + i}.0.0/16"],
                                             default_prefix_length=24) for i in (0, 1)]
    nets = [conn.network.create_network(name=f"rx-scoped{i}") for i in (0, 1)]
    subnets = [conn.network.create_subnet(network_id=n.id, ip_version=4, subnetpool_id=p.id)
               for n, p in zip(nets, pools, strict=True)]
    router = conn.network.create_router(name="rx-scopes")
    for subnet in subnets:
        conn.network.add_interface_to_router(router, subnet_id=subnet.id)
    ports = [conn.network.create_port(network_id=n.id) for n in nets]
    ns0, ns1 = (cloud.sandbox_ns(cloud.sandbox(f"rx-s{i}", ports=[p.id])["id"]) for i, p in enumerate(ports))
    for p in ports:
        cloud.wait_status(f"/network/v2.0/ports/{p.id}", "ACTIVE")
    ip1 = ports[1].fixed_ips[0]["ip_address"]
    wait_for(lambda: ping(ns0, ip1, timeout=0.3), 15, 0.1, "routing between unscoped subnets")
    conn.network.update_subnet_pool(pools[0], address_scope_id=scope.id)
    assert conn.network.get_network(nets[0].id).ipv4_address_scope_id == scope.id
    wait_for(lambda: not ping(ns0, ip1, timeout=0.3), 15, 0.1, "no forwarding between scopes")
    assert not ping(ns1, ports[0].fixed_ips[0]["ip_address"], timeout=0.5)
    conn.network.update_subnet_pool(pools[1], address_scope_id=scope.id)
    wait_for(lambda: ping(ns0, ip1, timeout=0.3), 15, 0.1, "routing within one scope")


def _source_seen(outside: str, client: str, dst: str, port: int) -> str | None:
    """Connect from ``client`` to ``dst:port`` (a listener in ``outside``); the source the
    listener saw, or None."""
    with netns.entered(outside):
        srv = socket.socket()
    with netns.entered(client):
        cli = socket.socket()
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(1)
        srv.settimeout(0.5)
        cli.settimeout(0.5)
        try:
            cli.connect((dst, port))
            conn, peer = srv.accept()
        except OSError:
            return None
        conn.close()
        return str(peer[0])
    finally:
        cli.close()
        srv.close()


def test_no_snat_within_one_address_scope_through_the_api(cloud: Cloud) -> None:
    """An internal subnet whose pool shares the external subnet's pool's address scope
    reaches the outside with its own address (Neutron's L3 agent does not SNAT within a
    scope); its pool moved to another scope, it leaves as the router's gateway address."""
    conn = cloud.server.connect()
    scope, other = (conn.network.create_address_scope(name=f"rx-nosnat{i}", ip_version=4) for i in (0, 1))
    ext_pool = conn.network.create_subnet_pool(name="rx-ext-pool", prefixes=["10.92.0.0/24"],
                                               default_prefix_length=24, address_scope_id=scope.id)
    int_pool = conn.network.create_subnet_pool(name="rx-int-pool", prefixes=["10.93.0.0/16"],
                                               default_prefix_length=24, address_scope_id=scope.id)
    ext = conn.network.create_network(name="rx-ext", is_router_external=True)
    conn.network.create_subnet(network_id=ext.id, ip_version=4, subnetpool_id=ext_pool.id)
    outside_port = conn.network.create_port(network_id=ext.id, device_owner="netbay:external", device_id=ext.id,
                                            port_security_enabled=False, security_group_ids=[])
    outside_ip = outside_port.fixed_ips[0]["ip_address"]
    net = conn.network.create_network(name="rx-inner")
    subnet = conn.network.create_subnet(network_id=net.id, ip_version=4, subnetpool_id=int_pool.id)
    router = conn.network.create_router(name="rx-nosnat", external_gateway_info={"network_id": ext.id})
    conn.network.add_interface_to_router(router, subnet_id=subnet.id)
    gw_ip = conn.network.get_router(router.id).external_gateway_info["external_fixed_ips"][0]["ip_address"]
    port = conn.network.create_port(network_id=net.id)
    ns = cloud.sandbox_ns(cloud.sandbox("rx-nosnat", ports=[port.id])["id"])
    cloud.wait_status(f"/network/v2.0/ports/{port.id}", "ACTIVE")
    outside = cloud.names.external(ext.id)
    wait_for(lambda: netns.exists(outside), 15, 0.1, "the external network's outside namespace")
    # The outside routes the scope's internal prefixes back through the router, as an
    # external network of the same scope does (an operator's route or Neutron's BGP speaker).
    index = next(i for name, (i, _) in link_table(outside).items() if name.startswith("ext-"))
    links.replace_route(outside, "10.93.0.0/16", gateway=gw_ip, dev=index)
    ip = port.fixed_ips[0]["ip_address"]
    wait_for(lambda: _source_seen(outside, ns, outside_ip, 7300) == ip, 20, 0.2,
             "the sandbox's own address seen outside (one scope: no SNAT)")
    conn.network.update_subnet_pool(int_pool, address_scope_id=other.id)
    wait_for(lambda: _source_seen(outside, ns, outside_ip, 7300) == gw_ip, 20, 0.2,
             "the gateway's address seen outside (another scope: SNAT)")
