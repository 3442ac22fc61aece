"""The Octavia-compatible load-balancer API v2 through openstacksdk and raw HTTP.

Against netbay's API and a real Octavia alike (``octavia_api``, tests/backendfix.py).
Nothing realizes load balancers here: on netbay, statuses are settled the way the
realizer will (``PUT /netbay/v1/status``); on Octavia, by the provider stand-in
of its noop driver (tests/peers/octavia_provider.py).
"""

from __future__ import annotations

import ipaddress
import itertools
import uuid

import httpx
import openstack.exceptions as osexc
import pytest
from conftest import unique
from lbhelp import make_net, next_octet, octavia_error

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

# --- helpers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(octavia_api):
    """netbay's network and load-balancer APIs, or a real Neutron's and Octavia's."""
    return octavia_api


@pytest.fixture(scope="module")
def lb_admin(server):
    """Raw HTTP to /load-balancer/v2 as admin."""
    client = httpx.Client(base_url=f"{server.load_balancer_url}/v2",
                          headers={"X-Auth-Token": server.token()}, timeout=30)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def lb_member(server, member):
    client = httpx.Client(base_url=f"{server.load_balancer_url}/v2",
                          headers={"X-Auth-Token": member.auth_token}, timeout=30)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def netbay_admin(server):
    client = httpx.Client(base_url=f"{server.url}/netbay/v1", headers={"X-Auth-Token": server.token()},
                          timeout=30)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def other(server):
    """A member of a project that is not ``member``'s."""
    return server.connect(*server.make_user())


@pytest.fixture(scope="module")
def net(member):
    return make_net(member)


@pytest.fixture
def settle(server, request, lb_admin):
    """Load balancers realized (``ACTIVE``/``ONLINE``): reported as the realizer will on
    netbay; on Octavia, once its provider stand-in has reported them."""
    if server.kind == "openstack":
        from netbay.backends import poll

        def settled(*lb_ids: str, value: str = "ACTIVE/ONLINE") -> None:
            assert value == "ACTIVE/ONLINE", "the provider stand-in reports ACTIVE/ONLINE only"
            for lb_id in lb_ids:
                poll.until(lambda i=lb_id: lb_admin.get(f"/lbaas/loadbalancers/{i}").json()["loadbalancer"],
                           lambda lb: not lb["provisioning_status"].startswith("PENDING_"), 60, first=0.05,
                           cap=0.5, late=lambda lb: f"{lb['id']} still {lb['provisioning_status']}")

        return settled
    netbay_admin = request.getfixturevalue("netbay_admin")

    def settle(*lb_ids: str, value: str = "ACTIVE/ONLINE") -> dict:
        r = netbay_admin.put("/status", json={"loadbalancers": {i: value for i in lb_ids}})
        assert r.status_code == 200, r.text
        return r.json()

    return settle


def changes_since(netbay_admin, since: int) -> list[tuple[str, str, str]]:
    out = []
    for _ in range(100):
        batch = netbay_admin.get("/changes", params={"since": since}).json()
        if not batch["changes"]:
            return out
        out += [(c["resource"], c["id"], c["action"]) for c in batch["changes"]]
        since = batch["revision"]
    return out


def last_recorded(netbay_admin, since: int) -> dict[tuple[str, str], dict | None]:
    """What a follower of the change stream knows after ``since``: each row's last data."""
    out: dict[tuple[str, str], dict | None] = {}
    for _ in range(100):
        batch = netbay_admin.get("/changes", params={"since": since}).json()
        if not batch["changes"]:
            return out
        out.update({(c["resource"], c["id"]): c["data"] for c in batch["changes"]})
        since = batch["revision"]
    return out


def latest(netbay_admin) -> int:
    since = 0
    for _ in range(1000):
        batch = netbay_admin.get("/changes", params={"since": since}).json()
        if not batch["changes"]:
            return since
        since = batch["revision"]
    raise AssertionError("change stream does not end")


def new_lb(conn, subnet_id: str, settle=None, **attrs):
    lb = conn.load_balancer.create_load_balancer(vip_subnet_id=subnet_id, name=unique("lb"), **attrs)
    if settle is not None:
        settle(lb.id)
    return lb


# --- discovery --------------------------------------------------------------------------------


@pytest.mark.embedded_only("netbay lists Octavia's versions v2.0…v2.30 under /load-balancer and its own providers (nftables …); Octavia 19 lists its own versions and the peer's noop_driver")
def test_version_discovery_and_catalog(server, member):
    r = httpx.get(f"{server.url}/load-balancer/", timeout=10)
    assert r.status_code == 200
    versions = r.json()["versions"]
    # Every v2.x Octavia lists, v2.0 … v2.30, the last CURRENT (clients send tags from 2.5 on).
    assert [v["id"] for v in versions] == [f"v2.{i}" for i in range(31)]
    assert [v["status"] for v in versions] == ["SUPPORTED"] * 30 + ["CURRENT"]
    assert {v["links"][0]["href"] for v in versions} == {f"{server.url}/load-balancer/v2"}
    r = httpx.get(f"{server.url}/load-balancer/v2", timeout=10)
    assert r.status_code == 200 and r.json()["version"]["id"] == "v2.30"
    # The SDK finds the service in the catalog and the version by discovery.
    assert isinstance(list(member.load_balancer.load_balancers()), list)
    assert [p.name for p in member.load_balancer.providers()] == [
        "nftables", "haproxy", "amphora", "octavia", "ovn", "netbay"]
    r = httpx.get(f"{server.url}/load-balancer/v2/lbaas/loadbalancers", timeout=10)
    octavia_error(r, 401)


# --- load balancers and their VIP port ------------------------------------------------------------


@pytest.mark.embedded_only("netbay's change stream (/netbay/v1/changes) and nftables provider; the peer's stand-in settles PENDING_CREATE at once")
def test_create_load_balancer_makes_vip_port(member, net, netbay_admin):
    since = latest(netbay_admin)
    lb = member.load_balancer.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("lb"),
                                                   description="front", tags=["web"])
    assert lb.provisioning_status == "PENDING_CREATE" and lb.operating_status == "OFFLINE"
    assert lb.provider == "nftables" and lb.is_admin_state_up is True and lb.description == "front"
    assert lb.vip_subnet_id == net.subnet.id and lb.vip_network_id == net.net.id
    assert ipaddress.ip_address(lb.vip_address) in net.cidr
    assert lb.listeners == [] and lb.pools == [] and lb.project_id == member.current_project_id
    assert lb.updated_at is None and lb.created_at and lb.tags == ["web"]
    port = member.network.get_port(lb.vip_port_id)
    assert port.device_owner == "Octavia" and port.device_id == f"lb-{lb.id}"
    assert port.name == f"octavia-lb-{lb.id}" and port.project_id == member.current_project_id
    assert port.security_group_ids == [] and port.is_port_security_enabled is False
    assert [ip["ip_address"] for ip in port.fixed_ips] == [lb.vip_address]
    assert [p.id for p in member.network.ports(device_owner="Octavia", device_id=f"lb-{lb.id}")] == [port.id]
    changes = changes_since(netbay_admin, since)
    assert ("port", port.id, "create") in changes and ("loadbalancer", lb.id, "create") in changes
    # Nothing realized it yet: the API does not pretend.
    assert member.load_balancer.get_load_balancer(lb.id).provisioning_status == "PENDING_CREATE"


@pytest.mark.embedded_only("Octavia's API leaves a caller's vip_port_id port unowned (device_owner ''); its provider plugs it, and the peer's noop driver does not")
def test_vip_by_network_address_and_port(member, admin, settle):
    dual = make_net(member, "dual")
    member.network.create_subnet(network_id=dual.net.id, cidr="fd00:%x::/64" % next_octet(), ip_version=6)
    # By network: the IPv4 subnet is preferred.
    lb = member.load_balancer.create_load_balancer(vip_network_id=dual.net.id)
    assert lb.vip_subnet_id == dual.subnet.id and lb.name == ""
    # An explicit address.
    address = str(dual.cidr.network_address + 200)
    lb2 = member.load_balancer.create_load_balancer(vip_network_id=dual.net.id, vip_address=address)
    assert lb2.vip_address == address and lb2.vip_subnet_id == dual.subnet.id
    # A port the caller made: taken over, and handed back on delete.
    port = member.network.create_port(network_id=dual.net.id, name=unique("vip"),
                                      fixed_ips=[{"subnet_id": dual.subnet.id}])
    lb3 = member.load_balancer.create_load_balancer(vip_port_id=port.id)
    assert lb3.vip_port_id == port.id and lb3.vip_address == port.fixed_ips[0]["ip_address"]
    taken = member.network.get_port(port.id)
    assert taken.device_owner == "Octavia" and taken.device_id == f"lb-{lb3.id}"
    settle(lb.id, lb2.id, lb3.id)
    for each in (lb, lb2, lb3):
        member.load_balancer.delete_load_balancer(each.id)
    released = member.network.get_port(port.id)
    assert released.device_owner == "" and released.device_id == ""
    assert member.network.find_port(lb.vip_port_id) is None
    # The deleted VIP's address is free again.
    lb4 = member.load_balancer.create_load_balancer(vip_subnet_id=dual.subnet.id, vip_address=address)
    assert lb4.vip_address == address


@pytest.mark.embedded_only("Octavia 19 words an unknown attribute 'Unknown attribute for argument load_balancer.loadbalancer: bogus'; netbay 'argument loadbalancer'")
def test_vip_errors(lb_member, net, member, other):
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"name": "x"}})
    octavia_error(r, 400, "Validation failure: VIP must contain one of: vip_port_id, vip_network_id, "
                          "vip_subnet_id.")
    missing = str(uuid.uuid4())
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"vip_subnet_id": missing}})
    octavia_error(r, 400, f"Subnet {missing} not found.")
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"vip_network_id": missing}})
    octavia_error(r, 400, f"Network {missing} not found.")
    # Another project's subnet is as good as missing.
    theirs = make_net(other)
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"vip_subnet_id": theirs.subnet.id}})
    octavia_error(r, 400, f"Subnet {theirs.subnet.id} not found.")
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"vip_subnet_id": "not-a-uuid"}})
    octavia_error(r, 400, "Invalid input for field/attribute vip_subnet_id. Value: 'not-a-uuid'. "
                          "Value should be UUID format")
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"vip_subnet_id": net.subnet.id,
                                                                       "bogus": 1}})
    octavia_error(r, 400, "Unknown attribute for argument loadbalancer: bogus")
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"vip_subnet_id": net.subnet.id,
                                                                       "provider": "f5"}})
    octavia_error(r, 400, "Provider 'f5' is not enabled.")
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {
        "vip_subnet_id": net.subnet.id, "pools": [{"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}]}})
    assert "does not support a requested option" in octavia_error(r, 501)  # top-level pools
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {
        "vip_subnet_id": net.subnet.id, "vip_address": "192.0.2.9"}})
    octavia_error(r, 400, "IP address 192.0.2.9 is not a valid IP for the specified subnet.")
    # Neutron's refusals of the VIP port come through in Octavia's format.
    lb = new_lb(member, net.subnet.id)
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {
        "vip_subnet_id": net.subnet.id, "vip_address": lb.vip_address}})
    octavia_error(r, 409, f"IP address {lb.vip_address} already allocated in subnet {net.subnet.id}")
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {"vip_port_id": lb.vip_port_id}})
    octavia_error(r, 400, f"Validation failure: Port {lb.vip_port_id} already in use by device lb-{lb.id}.")
    r = lb_member.post("/lbaas/loadbalancers", content=b"{nope")
    octavia_error(r, 400)
    r = lb_member.get(f"/lbaas/loadbalancers/{missing}")
    octavia_error(r, 404, f"Load Balancer {missing} not found.")
    with pytest.raises(osexc.NotFoundException):
        member.load_balancer.get_load_balancer(missing)


# --- Octavia's PENDING_* life cycle -----------------------------------------------------------------


@pytest.mark.embedded_only("PENDING_* held until netbay's status report (/netbay/v1/status); the peer's stand-in settles every object within its 0.1 s tick")
def test_pending_load_balancer_is_immutable(member, net, lb_member, netbay_admin, server, settle):
    lb = new_lb(member, net.subnet.id)
    r = lb_member.put(f"/lbaas/loadbalancers/{lb.id}", json={"loadbalancer": {"name": "renamed"}})
    octavia_error(r, 409, f"Invalid state PENDING_CREATE of loadbalancer resource {lb.id}")
    r = lb_member.post("/lbaas/listeners", json={"listener": {
        "loadbalancer_id": lb.id, "protocol": "TCP", "protocol_port": 80}})
    octavia_error(r, 409, f"Load Balancer {lb.id} is immutable and cannot be updated.")
    r = lb_member.delete(f"/lbaas/loadbalancers/{lb.id}")
    octavia_error(r, 409, f"Invalid state PENDING_CREATE of loadbalancer resource {lb.id}")
    with pytest.raises(osexc.ConflictException, match="Invalid state PENDING_CREATE"):
        member.load_balancer.update_load_balancer(lb.id, name="again")
    # Only an admin reports statuses.
    member_status = httpx.put(f"{server.url}/netbay/v1/status", headers={"X-Auth-Token": member.auth_token},
                              json={"loadbalancers": {lb.id: "ACTIVE"}}, timeout=10)
    assert member_status.status_code == 403
    settle(lb.id)
    got = member.load_balancer.get_load_balancer(lb.id)
    assert got.provisioning_status == "ACTIVE" and got.operating_status == "ONLINE"
    updated = member.load_balancer.update_load_balancer(lb.id, name="renamed", description="d")
    assert updated.provisioning_status == "PENDING_UPDATE" and updated.name == "renamed"
    assert updated.updated_at is not None
    r = lb_member.put(f"/lbaas/loadbalancers/{lb.id}", json={"loadbalancer": {"description": "x"}})
    octavia_error(r, 409, f"Invalid state PENDING_UPDATE of loadbalancer resource {lb.id}")
    # ERROR settles too, and an LB in ERROR may be changed again (to be repaired).
    settle(lb.id, value="ERROR/ERROR")
    assert member.load_balancer.get_load_balancer(lb.id).provisioning_status == "ERROR"
    assert member.load_balancer.update_load_balancer(lb.id, is_admin_state_up=False).is_admin_state_up is False


@pytest.mark.embedded_only("netbay's realizer status API (/netbay/v1/status)")
def test_status_reports(netbay_admin, member, net, settle):
    lb = new_lb(member, net.subnet.id)
    missing = str(uuid.uuid4())
    r = netbay_admin.put("/status", json={"loadbalancers": {lb.id: "ACTIVE/DRAINING", missing: "ACTIVE"}})
    assert r.status_code == 200, r.text
    got = member.load_balancer.get_load_balancer(lb.id)
    assert (got.provisioning_status, got.operating_status) == ("ACTIVE", "DRAINING")
    r = netbay_admin.put("/status", json={"loadbalancers": {lb.id: "/ONLINE"}})
    assert r.status_code == 200
    assert member.load_balancer.get_load_balancer(lb.id).operating_status == "ONLINE"
    for bad in ("DONE", "ACTIVE/", "ACTIVE/BUSY", "/"):
        r = netbay_admin.put("/status", json={"loadbalancers": {lb.id: bad}})
        assert r.status_code == 400, (bad, r.text)
    assert member.load_balancer.get_load_balancer(lb.id).operating_status == "ONLINE"


# --- the whole tree with the SDK --------------------------------------------------------------------


@pytest.mark.embedded_only("netbay's change stream and per-member health reports (/netbay/v1); PENDING_* held until reported")
def test_listener_pool_member_monitor_with_sdk(member, net, settle, netbay_admin, lb_member):
    lbs = member.load_balancer
    lb = new_lb(member, net.subnet.id, settle)
    since = latest(netbay_admin)
    listener = lbs.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=80, name=unique("l"))
    assert listener.provisioning_status == "PENDING_CREATE" and listener.operating_status == "OFFLINE"
    assert listener.connection_limit == -1 and listener.default_pool_id is None
    assert listener.load_balancers == [{"id": lb.id}] and listener.timeout_client_data == 50000
    assert listener.timeout_member_connect == 5000 and listener.timeout_tcp_inspect == 0
    assert lbs.get_load_balancer(lb.id).provisioning_status == "PENDING_UPDATE"
    assert changes_since(netbay_admin, since) == [("listener", listener.id, "create"),
                                                   ("loadbalancer", lb.id, "update")]
    settle(lb.id)
    assert lbs.get_listener(listener.id).provisioning_status == "ACTIVE"  # settled with its LB
    assert lbs.get_load_balancer(lb.id).listeners == [{"id": listener.id}]

    pool = lbs.create_pool(listener_id=listener.id, protocol="TCP", lb_algorithm="ROUND_ROBIN",
                           name=unique("p"))
    assert pool.provisioning_status == "PENDING_CREATE" and pool.session_persistence is None
    assert pool.listeners == [{"id": listener.id}] and pool.loadbalancers == [{"id": lb.id}]
    assert lbs.get_listener(listener.id).default_pool_id == pool.id
    settle(lb.id)

    address = str(net.cidr.network_address + 50)
    m1 = lbs.create_member(pool, address=address, protocol_port=8080, subnet_id=net.subnet.id)
    assert m1.operating_status == "NO_MONITOR" and m1.weight == 1 and m1.backup is False
    assert m1.provisioning_status == "PENDING_CREATE" and m1.subnet_id == net.subnet.id
    settle(lb.id)
    monitor = lbs.create_health_monitor(pool_id=pool.id, type="HTTP", delay=5, timeout=5, max_retries=3)
    assert (monitor.http_method, monitor.url_path, monitor.expected_codes) == ("GET", "/", "200")
    assert monitor.max_retries_down == 3 and monitor.pools == [{"id": pool.id}]
    settle(lb.id)
    m2 = lbs.create_member(pool, address=str(net.cidr.network_address + 51), protocol_port=8080, weight=5)
    assert m2.operating_status == "OFFLINE" and m2.subnet_id is None  # monitored, not probed yet
    settle(lb.id)
    assert lbs.get_pool(pool.id).health_monitor_id == monitor.id
    assert sorted(m["id"] for m in lbs.get_pool(pool.id).members) == sorted([m1.id, m2.id])
    assert {m.id for m in lbs.members(pool)} == {m1.id, m2.id}
    assert lbs.find_member(m1.id, pool).address == address
    assert [m.id for m in lbs.members(pool, weight=5)] == [m2.id]
    assert lbs.find_listener(listener.name).id == listener.id and lbs.find_pool(pool.name).id == pool.id

    # The realizer's per-member health reaches the status tree.
    r = netbay_admin.put("/status", json={"members": {m1.id: "/ONLINE", m2.id: "/ERROR"}})
    assert r.status_code == 200, r.text
    tree = lbs.get(f"/lbaas/loadbalancers/{lb.id}/status").json()["statuses"]["loadbalancer"]
    assert tree["id"] == lb.id and tree["provisioning_status"] == "ACTIVE"
    [ltree] = tree["listeners"]
    [ptree] = ltree["pools"]
    assert ltree["id"] == listener.id and ptree["id"] == pool.id
    assert ptree["health_monitor"]["id"] == monitor.id and ptree["health_monitor"]["type"] == "HTTP"
    assert {m["id"]: m["operating_status"] for m in ptree["members"]} == {m1.id: "ONLINE", m2.id: "ERROR"}
    assert {m["address"] for m in ptree["members"]} == {address, str(net.cidr.network_address + 51)}

    # Updates go PENDING_UPDATE and wait for the realizer.
    pool = lbs.update_pool(pool, lb_algorithm="SOURCE_IP")
    assert pool.lb_algorithm == "SOURCE_IP" and pool.provisioning_status == "PENDING_UPDATE"
    assert lbs.get_listener(listener.id).provisioning_status == "PENDING_UPDATE"
    with pytest.raises(osexc.ConflictException, match="is immutable"):
        lbs.update_member(m1, pool, weight=7)
    settle(lb.id)
    assert lbs.update_member(m1, pool, weight=7).weight == 7
    settle(lb.id)
    assert lbs.update_health_monitor(monitor, delay=10, url_path="/healthz").url_path == "/healthz"
    settle(lb.id)
    assert lbs.update_listener(listener, connection_limit=100).connection_limit == 100
    settle(lb.id)

    # Deletes are at once; the load balancer waits for the realizer.
    lbs.delete_member(m2, pool)
    assert lbs.find_member(m2.id, pool) is None
    assert lbs.get_load_balancer(lb.id).provisioning_status == "PENDING_UPDATE"
    settle(lb.id)
    lbs.delete_health_monitor(monitor)
    settle(lb.id)
    assert lbs.get_pool(pool.id).health_monitor_id is None
    r = lb_member.delete(f"/lbaas/loadbalancers/{lb.id}")
    octavia_error(r, 400, f"Validation failure: Cannot delete Load Balancer {lb.id} - it has children")
    lbs.delete_load_balancer(lb.id, cascade=True)
    for path in (f"/lbaas/loadbalancers/{lb.id}", f"/lbaas/listeners/{listener.id}",
                 f"/lbaas/pools/{pool.id}", f"/lbaas/pools/{pool.id}/members/{m1.id}"):
        assert lb_member.get(path).status_code == 404, path
    assert member.network.find_port(lb.vip_port_id) is None
    assert ("loadbalancer", lb.id, "delete") in changes_since(netbay_admin, since)


@pytest.mark.embedded_only("Octavia 19 refuses a listener_id filter on GET /lbaas/pools (400); netbay takes it")
def test_pool_on_load_balancer_and_listener_default_pool(member, net, settle, lb_member):
    lbs = member.load_balancer
    lb = new_lb(member, net.subnet.id, settle)
    pool = lbs.create_pool(loadbalancer_id=lb.id, protocol="HTTP", lb_algorithm="ROUND_ROBIN")
    assert pool.listeners == []
    settle(lb.id)
    listener = lbs.create_listener(loadbalancer_id=lb.id, protocol="HTTP", protocol_port=8080,
                                   default_pool_id=pool.id)
    assert listener.default_pool_id == pool.id
    settle(lb.id)
    assert lbs.get_pool(pool.id).listeners == [{"id": listener.id}]
    assert [p.id for p in lbs.pools(listener_id=listener.id)] == [pool.id]
    r = lb_member.post("/lbaas/pools", json={"pool": {"listener_id": listener.id, "protocol": "HTTP",
                                                      "lb_algorithm": "ROUND_ROBIN"}})
    octavia_error(r, 409, "This listener already has a default pool")
    # Deleting the pool leaves the listener without one.
    lbs.delete_pool(pool)
    assert lbs.get_listener(listener.id).default_pool_id is None
    settle(lb.id)
    lbs.delete_listener(listener)
    settle(lb.id)
    assert lbs.get_load_balancer(lb.id).listeners == []
    lbs.delete_load_balancer(lb.id)


# --- refusals -----------------------------------------------------------------------------------------


@pytest.mark.embedded_only("netbay's nftables provider offers HTTP, HTTPS, TCP… (and 501 for what it does not); Octavia lists every protocol it knows")
def test_listener_and_pool_errors(member, net, settle, lb_member):
    lbs = member.load_balancer
    lb = new_lb(member, net.subnet.id, settle)

    def post(kind: str, **attrs):
        return lb_member.post(f"/lbaas/{kind}s", json={kind: attrs})

    r = post("listener", loadbalancer_id=lb.id, protocol="FOO", protocol_port=80)
    assert octavia_error(r, 400).startswith("Invalid input for field/attribute protocol. Value: 'FOO'. "
                                            "Value should be one of: HTTP, HTTPS, TCP")
    r = post("listener", loadbalancer_id=lb.id, protocol="HTTPS", protocol_port=443)
    assert "protocol HTTPS is not offered" in octavia_error(r, 501)
    r = post("listener", loadbalancer_id=lb.id, protocol="TCP", protocol_port=0)
    octavia_error(r, 400, "Invalid input for field/attribute protocol_port. Value: '0'. "
                          "Value should be greater or equal to 1")
    r = post("listener", loadbalancer_id=lb.id, protocol="TCP")
    octavia_error(r, 400, "Invalid input for field/attribute protocol_port. Value: 'None'. "
                          "Mandatory field missing.")
    r = post("listener", loadbalancer_id=lb.id, protocol="TCP", protocol_port=80,
             default_tls_container_ref="https://barbican/x")
    assert "default_tls_container_ref is not offered" in octavia_error(r, 501)
    missing = str(uuid.uuid4())
    r = post("listener", loadbalancer_id=missing, protocol="TCP", protocol_port=80)
    octavia_error(r, 404, f"Load Balancer {missing} not found.")

    tcp = lbs.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=53)
    settle(lb.id)
    for protocol in ("TCP", "HTTP"):
        r = post("listener", loadbalancer_id=lb.id, protocol=protocol, protocol_port=53)
        octavia_error(r, 409, "Another Listener on this Load Balancer is already using protocol TCP and "
                              "protocol_port 53")
    udp = lbs.create_listener(loadbalancer_id=lb.id, protocol="UDP", protocol_port=53)
    assert udp.protocol == "UDP"
    settle(lb.id)
    # SCTP is a transport of its own (forwarded by nftables, as the amphora's LVS), its pools SCTP only.
    sctp_listener = lbs.create_listener(loadbalancer_id=lb.id, protocol="SCTP", protocol_port=53)
    settle(lb.id)
    r = post("pool", listener_id=sctp_listener.id, protocol="UDP", lb_algorithm="ROUND_ROBIN")
    octavia_error(r, 400, "Validation failure: The pool protocol 'UDP' is invalid while the listener "
                          "protocol is 'SCTP'.")
    lbs.delete_listener(sctp_listener)
    settle(lb.id)

    r = post("pool", listener_id=tcp.id, protocol="PROXY", lb_algorithm="LEAST_CONNECTIONS")
    message = octavia_error(r, 501)
    assert message.startswith("Provider 'nftables' does not support a requested option")
    assert "protocol PROXY is not offered by provider nftables" in message
    r = post("pool", listener_id=tcp.id, protocol="UDP", lb_algorithm="ROUND_ROBIN")
    octavia_error(r, 400, "Validation failure: The pool protocol 'UDP' is invalid while the listener "
                          "protocol is 'TCP'.")
    r = post("pool", protocol="TCP", lb_algorithm="ROUND_ROBIN")
    octavia_error(r, 400, "Validation failure: Must provide at least one of: loadbalancer_id, listener_id")
    r = post("pool", listener_id=tcp.id, protocol="TCP", lb_algorithm="ROUND_ROBIN",
             session_persistence={"type": "SOURCE_IP"})
    assert "session_persistence SOURCE_IP is not offered by provider nftables" in octavia_error(r, 501)
    r = post("pool", listener_id=missing, protocol="TCP", lb_algorithm="ROUND_ROBIN")
    octavia_error(r, 404, f"Listener {missing} not found.")
    pool = lbs.create_pool(listener_id=udp.id, protocol="UDP", lb_algorithm="SOURCE_IP")
    settle(lb.id)

    # Members: duplicates and reachability.
    # A backup member (taken only while no other member can serve) is realized by every provider.
    spare = lbs.create_member(pool, address="10.9.9.8", protocol_port=53, backup=True)
    assert spare.backup is True
    settle(lb.id)
    r = lb_member.post(f"/lbaas/pools/{pool.id}/members", json={"member": {
        "address": "10.9.9.9", "protocol_port": 53, "weight": 257}})
    octavia_error(r, 400, "Invalid input for field/attribute weight. Value: '257'. "
                          "Value should be lower or equal to 256")
    lbs.create_member(pool, address="10.9.9.9", protocol_port=53)
    settle(lb.id)
    r = lb_member.post(f"/lbaas/pools/{pool.id}/members", json={"member": {
        "address": "10.9.9.9", "protocol_port": 53}})
    octavia_error(r, 409, "Another member on this pool is already using ip 10.9.9.9 on protocol_port 53")
    r = lb_member.get(f"/lbaas/pools/{missing}/members")
    octavia_error(r, 404, f"Pool {missing} not found.")

    # Health monitors.
    def monitor(**attrs):
        return post("healthmonitor", pool_id=pool.id, delay=3, timeout=2, max_retries=2, **attrs)

    for kind in ("HTTPS", "TLS-HELLO", "PING"):
        octavia_error(monitor(type=kind), 400, "Validation failure: The associated pool protocol is UDP, so "
                                               "only a UDP-CONNECT/SCTP/TCP/HTTP health monitor is supported.")
    sctp = monitor(type="SCTP")   # an INIT to the member (netbay.dataplane.sctp), as the amphora's check
    assert sctp.status_code == 201, sctp.text
    settle(lb.id)
    lb_member.delete(f"/lbaas/healthmonitors/{sctp.json()['healthmonitor']['id']}")
    settle(lb.id)
    r = post("healthmonitor", pool_id=pool.id, type="UDP-CONNECT", delay=1, timeout=1, max_retries=2)
    octavia_error(r, 400, "Validation failure: The request delay value 1 should be larger than 3 for "
                          "UDP-CONNECT health monitor type.")
    r = post("healthmonitor", pool_id=pool.id, type="TCP", delay=3, timeout=2, max_retries=11)
    octavia_error(r, 400, "Invalid input for field/attribute max_retries. Value: '11'. "
                          "Value should be lower or equal to 10")
    r = monitor(type="HTTP", expected_codes="2xx")
    assert octavia_error(r, 400).startswith("Invalid input for field/attribute expected_codes. Value: '2xx'.")
    r = monitor(type="TCP", url_path="/health")
    assert "url_path can only be set on HTTP health monitors" in octavia_error(r, 400)
    r = monitor(type="HTTP", expected_codes="200-204", http_method="HEAD")
    assert r.status_code == 201, r.text
    assert r.json()["healthmonitor"]["expected_codes"] == "200-204"
    settle(lb.id)
    octavia_error(monitor(type="TCP"), 409, "This pool already has a health monitor")
    lbs.delete_load_balancer(lb.id, cascade=True)


@pytest.mark.embedded_only("netbay refuses a member subnet its VIP cannot route to; Octavia's API leaves that to the provider (201)")
def test_member_subnet_must_be_reachable(member, settle, lb_member):
    lbs = member.load_balancer
    front, back, island = make_net(member, "front"), make_net(member, "back"), make_net(member, "island")
    router = member.network.create_router(name=unique("lbr"))
    member.network.add_interface_to_router(router, subnet=front.subnet.id)
    member.network.add_interface_to_router(router, subnet=back.subnet.id)
    lb = new_lb(member, front.subnet.id, settle)
    pool = lbs.create_pool(loadbalancer_id=lb.id, protocol="TCP", lb_algorithm="ROUND_ROBIN")
    settle(lb.id)
    routed = lbs.create_member(pool, address=str(back.cidr.network_address + 10), protocol_port=80,
                               subnet_id=back.subnet.id)
    assert routed.subnet_id == back.subnet.id
    settle(lb.id)
    r = lb_member.post(f"/lbaas/pools/{pool.id}/members", json={"member": {
        "address": str(island.cidr.network_address + 10), "protocol_port": 80, "subnet_id": island.subnet.id}})
    message = octavia_error(r, 400)
    assert message.startswith(f"Validation failure: Member subnet {island.subnet.id} is not reachable")
    missing = str(uuid.uuid4())
    r = lb_member.post(f"/lbaas/pools/{pool.id}/members", json={"member": {
        "address": "10.1.1.1", "protocol_port": 80, "subnet_id": missing}})
    octavia_error(r, 400, f"Subnet {missing} not found.")
    # Nothing was claimed by the refusals.
    assert lbs.get_load_balancer(lb.id).provisioning_status == "ACTIVE"
    lbs.delete_load_balancer(lb.id, cascade=True)


# --- projects, listing ----------------------------------------------------------------------------------


def test_project_scoping(server, admin, member, other, net, lb_admin):
    lb = new_lb(member, net.subnet.id)
    assert lb.id not in [x.id for x in other.load_balancer.load_balancers()]
    # Octavia finds another project's object, then its policy check refuses it: 403.
    with pytest.raises(osexc.ForbiddenException):
        other.load_balancer.get_load_balancer(lb.id)
    with pytest.raises(osexc.ForbiddenException):
        other.load_balancer.delete_load_balancer(lb.id, ignore_missing=False)
    assert admin.load_balancer.get_load_balancer(lb.id).project_id == member.current_project_id
    # An admin may create one for another project, on that project's subnet.
    made = admin.load_balancer.create_load_balancer(vip_subnet_id=net.subnet.id,
                                                    project_id=member.current_project_id)
    assert made.project_id == member.current_project_id
    assert made.id in [x.id for x in member.load_balancer.load_balancers()]
    r = httpx.post(f"{server.load_balancer_url}/v2/lbaas/loadbalancers",
                   headers={"X-Auth-Token": other.auth_token},
                   json={"loadbalancer": {"vip_subnet_id": make_net(other).subnet.id,
                                          "project_id": member.current_project_id}}, timeout=10)
    octavia_error(r, 403, "Policy does not allow this request to be performed.")
    assert lb.id in [x["id"] for x in lb_admin.get("/lbaas/loadbalancers",
                                                   params={"project_id": member.current_project_id}
                                                   ).json()["loadbalancers"]]


@pytest.mark.embedded_only("Octavia 19 answers fields=id,name (one comma-joined value) with empty objects; netbay splits it")
def test_list_filters_sort_and_pages(member, lb_member):
    nets = make_net(member, "page")
    tag = unique("page")
    ids = [member.load_balancer.create_load_balancer(vip_subnet_id=nets.subnet.id, name=f"{tag}-{i}",
                                                     tags=[tag]).id for i in range(3)]
    r = lb_member.get("/lbaas/loadbalancers", params={"tags": tag, "sort": "name:desc"})
    assert [x["name"] for x in r.json()["loadbalancers"]] == [f"{tag}-2", f"{tag}-1", f"{tag}-0"]
    assert r.json()["loadbalancers_links"] == []
    r = lb_member.get("/lbaas/loadbalancers", params={"tags": tag, "sort_key": "name", "sort_dir": "asc",
                                                       "limit": 2})
    page = r.json()
    assert [x["name"] for x in page["loadbalancers"]] == [f"{tag}-0", f"{tag}-1"]
    [link] = [x for x in page["loadbalancers_links"] if x["rel"] == "next"]
    rest = httpx.get(link["href"], headers=lb_member.headers, timeout=10).json()
    assert [x["name"] for x in rest["loadbalancers"]] == [f"{tag}-2"]
    assert {x["rel"] for x in rest["loadbalancers_links"]} == {"previous"}
    r = lb_member.get("/lbaas/loadbalancers", params={"name": f"{tag}-1", "fields": "id,name"})
    assert r.json()["loadbalancers"] == [{"id": ids[1], "name": f"{tag}-1"}]
    assert {x.id for x in member.load_balancer.load_balancers(provisioning_status="ACTIVE", tags=tag)} == set()
    assert {x.id for x in member.load_balancer.load_balancers(tags=tag)} == set(ids)
    octavia_error(lb_member.get("/lbaas/loadbalancers", params={"sort": "vip_port:sideways"}), 400,
                  "Supplied sort key 'vip_port' is not valid.")
    octavia_error(lb_member.get("/lbaas/loadbalancers", params={"sort": "name:sideways"}), 400,
                  "Supplied sort direction 'sideways' is not valid.")
    octavia_error(lb_member.get("/lbaas/loadbalancers", params={"limit": "x"}), 400,
                  "Supplied pagination limit 'x' is not valid.")
    octavia_error(lb_member.get("/lbaas/loadbalancers", params={"marker": str(uuid.uuid4())}), 400)


# --- bad input never breaks the server ------------------------------------------------------------------

_WEIRD = [None, True, 2**40, "\x00", {}, "a" * 300]
_FIELDS = {
    "loadbalancer": ["name", "admin_state_up", "vip_address", "vip_port_id", "vip_network_id", "provider",
                     "flavor_id", "tags", "pools", "project_id"],
    "listener": ["name", "protocol", "protocol_port", "connection_limit", "default_pool_id",
                 "timeout_member_data", "insert_headers", "admin_state_up", "tags"],
    "pool": ["protocol", "lb_algorithm", "listener_id", "session_persistence", "description"],
    "member": ["address", "protocol_port", "weight", "subnet_id", "monitor_port", "backup", "name"],
    "healthmonitor": ["type", "delay", "max_retries", "max_retries_down", "http_method", "url_path",
                      "expected_codes", "pool_id"],
}


@pytest.mark.embedded_only("also refuses bad netbay status reports (/netbay/v1/status)")
def test_bad_input_is_a_client_error(admin, lb_admin, netbay_admin, settle):
    nets = make_net(admin, "fuzz")
    lb = new_lb(admin, nets.subnet.id, settle)
    pool = admin.load_balancer.create_pool(loadbalancer_id=lb.id, protocol="TCP", lb_algorithm="ROUND_ROBIN")
    settle(lb.id)
    valid = {
        "loadbalancer": {"vip_subnet_id": nets.subnet.id},
        "listener": {"loadbalancer_id": lb.id, "protocol": "TCP", "protocol_port": 81},
        "pool": {"loadbalancer_id": lb.id, "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"},
        "member": {"address": str(nets.cidr.network_address + 9), "protocol_port": 80},
        "healthmonitor": {"pool_id": pool.id, "type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1},
    }
    paths = {"member": f"/lbaas/pools/{pool.id}/members"}
    for kind, fields in _FIELDS.items():
        path = paths.get(kind, f"/lbaas/{kind}s")
        for attr, value in itertools.product(fields, _WEIRD):
            r = lb_admin.post(path, json={kind: {**valid[kind], attr: value}})
            assert (r.status_code < 500 or r.status_code == 501) and "faultstring" in r.json() \
                or r.status_code == 201, (kind, attr, r.text)   # 501: an option not offered
            if r.status_code == 201:  # some odd values are fine (a name of "", tags [])
                settle(lb.id)
                if kind != "loadbalancer":
                    lb_admin.delete(f"{path}/{r.json()[kind]['id']}")
                    settle(lb.id)
    for query in ({"limit": "-1"}, {"created_at": "yesterday"}, {"admin_state_up": "maybe"},
                  {"protocol_port": "x"}, {"weight": str(2**40)}, {"bogus": "1"}, {"page_reverse": "x"}):
        for path in ("/lbaas/loadbalancers", "/lbaas/listeners", f"/lbaas/pools/{pool.id}/members"):
            assert 400 <= lb_admin.get(path, params=query).status_code < 500, (path, query)
    for report in (None, [], {"loadbalancers": None}, {"loadbalancers": {lb.id: None}}, {"members": {"x": 1}},
                   {"nothing": {}}, {"loadbalancers": {lb.id: "ACTIVE/ONLINE/X"}}):
        assert netbay_admin.put("/status", json=report).status_code == 400, report


@pytest.mark.embedded_only("netbay's change stream (/netbay/v1/changes) and PENDING_* held until reported")
def test_fully_populated_create_is_one_tree_in_one_request(member, net, lb_member, settle, netbay_admin):
    """Octavia's single-call create: listeners, default pools, members and monitors with
    the load balancer; the realizer's one report settles the whole tree."""
    since = latest(netbay_admin)
    address = str(net.cidr[20])
    body = {"loadbalancer": {"name": unique("full"), "vip_subnet_id": net.subnet.id, "listeners": [{
        "name": "web", "protocol": "TCP", "protocol_port": 80, "default_pool": {
            "name": "web-pool", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
            "members": [{"address": address, "protocol_port": 8080}, {"address": str(net.cidr[21]),
                                                                    "protocol_port": 8080, "weight": 2}],
            "healthmonitor": {"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 2}}},
        {"name": "dns", "protocol": "UDP", "protocol_port": 53}]}}
    r = lb_member.post("/lbaas/loadbalancers", json=body)
    assert r.status_code == 201, r.text
    lb = r.json()["loadbalancer"]
    assert lb["provisioning_status"] == "PENDING_CREATE" and len(lb["listeners"]) == 2 and len(lb["pools"]) == 1
    # Octavia answers a create with the tree whole (LoadBalancerFullResponse): listeners
    # and pools as objects, each pool with its members and health monitor.
    answered = {x["name"]: x for x in lb["listeners"]}
    assert answered["web"]["protocol_port"] == 80 and answered["web"]["default_pool_id"] == lb["pools"][0]["id"]
    assert answered["dns"]["protocol"] == "UDP" and answered["dns"]["default_pool_id"] is None
    assert {(m["address"], m["protocol_port"], m["weight"]) for m in lb["pools"][0]["members"]} == {
        (address, 8080, 1), (str(net.cidr[21]), 8080, 2)}
    assert lb["pools"][0]["healthmonitor"]["type"] == "TCP"
    assert lb["pools"][0]["healthmonitor"]["id"] == lb["pools"][0]["healthmonitor_id"]
    listeners = lb_member.get("/lbaas/listeners", params={"loadbalancer_id": lb["id"]}).json()["listeners"]
    web = next(x for x in listeners if x["name"] == "web")
    assert web["default_pool_id"] == lb["pools"][0]["id"]
    pool = lb_member.get(f"/lbaas/pools/{web['default_pool_id']}").json()["pool"]
    assert pool["healthmonitor_id"] and len(pool["members"]) == 2
    members = lb_member.get(f"/lbaas/pools/{pool['id']}/members").json()["members"]
    assert {(m["address"], m["weight"]) for m in members} == {(address, 1), (str(net.cidr[21]), 2)}
    assert {x["provisioning_status"] for x in [*listeners, pool, *members]} == {"PENDING_CREATE"}
    # A follower of the change stream (the realizer) knows the tree as the API shows it:
    # the listener's default pool, the pool's members and monitor.
    known = last_recorded(netbay_admin, since)
    assert known[("listener", web["id"])]["default_pool_id"] == pool["id"]
    # ... from one row per object, written as the tree ended up (not once as made and
    # again as each child joined it)
    rows = [(c["resource"], c["id"]) for c in netbay_admin.get("/changes", params={"since": since}).json()["changes"]
            if c["resource"] != "port"]
    assert sorted(rows) == sorted({*rows}) and len(rows) == 7, rows   # lb, 2 listeners, pool, 2 members, monitor
    assert known[("loadbalancer", lb["id"])]["listeners"] == [{"id": x["id"]} for x in lb["listeners"]]
    assert known[("pool", pool["id"])]["healthmonitor_id"] == pool["healthmonitor_id"]
    assert {m["id"] for m in known[("pool", pool["id"])]["members"]} == {m["id"] for m in members}
    settle(lb["id"])
    tree = lb_member.get(f"/lbaas/loadbalancers/{lb['id']}/status").json()["statuses"]["loadbalancer"]
    assert tree["provisioning_status"] == "ACTIVE"
    web_tree = next(x for x in tree["listeners"] if x["name"] == "web")
    assert web_tree["provisioning_status"] == "ACTIVE"
    assert {m["provisioning_status"] for m in web_tree["pools"][0]["members"]} == {"ACTIVE"}
    assert web_tree["pools"][0]["health_monitor"]["provisioning_status"] == "ACTIVE"
    assert lb_member.delete(f"/lbaas/loadbalancers/{lb['id']}", params={"cascade": "true"}).status_code == 204


@pytest.mark.parametrize("listeners, attr", [
    ([{"protocol": "TCP", "protocol_port": 80, "default_pool": {
        "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": [{"address": "not-an-ip", "protocol_port": 1}]}}],
     "address"),
    ([{"protocol": "TCP", "protocol_port": 80}, {"protocol": "TCP", "protocol_port": 80}], None),
    ([{"protocol": "TCP", "protocol_port": 80, "default_pool": {"protocol": "PROXY", "lb_algorithm": "ROUND_ROBIN"}}],
     None),
    ("nope", "listeners"),
])
def test_a_bad_populated_create_makes_nothing(member, net, lb_member, listeners, attr):
    name = unique("bad")
    vips_before = {p.id for p in member.network.ports(network_id=net.net.id, device_owner="Octavia")}
    r = lb_member.post("/lbaas/loadbalancers", json={"loadbalancer": {
        "name": name, "vip_subnet_id": net.subnet.id, "listeners": listeners}})
    assert r.status_code in (400, 409, 501), r.text
    if attr:
        assert attr in r.text
    assert lb_member.get("/lbaas/loadbalancers", params={"name": name}).json()["loadbalancers"] == []
    assert {p.id for p in member.network.ports(network_id=net.net.id, device_owner="Octavia")} == vips_before
