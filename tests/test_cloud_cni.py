"""netbay-cni on a real cloud: ``netbay cni-daemon --backend openstack --os-cloud peer``
makes each pod's port in the cloud's Neutron (Keystone and Neutron's API server from
PyPI, ``tests/peers/openstack_cloud.py``), with kuryr's conventions — ``device_owner``
``compute:kuryr``, ``binding:host_id`` this host, the pod's ``K8S_POD_*`` identity as
its name and ``device_id`` — and plugs the veth into the pod's namespace as on
netbay's own network.

The CNI calls are real: the ``netbay-cni`` executable, forked with the environment
and stdin configuration a runtime sends. That Neutron runs without agents (ML2, no
mechanism drivers): nobody wires the host end (that is the cloud agent's job; here it
stays in the fabric namespace of this run), so the tests assert what the API and the
pod's namespace show — the port, its address and MAC on the pod's interface, its
binding — never packets.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.dataplane import netns
from netbay.plugins.cni.launcher import install
from tests.dataplane.cni_fixtures import Daemon, invoke, netbay_conf
from tests.backendfix import openstack
from tests import zygote

pytestmark = [pytest.mark.peers,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the pods' network namespaces)")]

PREFIX = f"nbt{secrets.token_hex(3)}-cc-"
CIDR = "10.77.0.0/24"


def port_ids(env: dict[str, str]) -> set[str]:
    """The cloud's ports, as its own CLI lists them."""
    return {row["ID"] for row in json.loads(openstack(env, "port", "list", "-f", "json", "-c", "ID"))}


@pytest.fixture(scope="module")
def admin(cloud):
    conn = cloud.connection()
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def network(admin) -> Iterator[tuple]:
    """A pod network in the cloud, as an operator (or kuryr's controller) made it."""
    net = admin.network.create_network(name=f"{PREFIX}pods")
    sub = admin.network.create_subnet(network_id=net.id, cidr=CIDR, ip_version=4, is_dhcp_enabled=False,
                                      name=f"{PREFIX}pods")
    yield net, sub
    for port in admin.network.ports(network_id=net.id):
        admin.network.delete_port(port)
    admin.network.delete_network(net)


@pytest.fixture(scope="module")
def daemon(cloud_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = tmp_path_factory.mktemp("cloudcni")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    dm = Daemon(d / "cni.sock", "http://127.0.0.1:9", PREFIX, {**env, **cloud_env, "NETBAY_LOG_LEVEL": "INFO"},
                d / "daemon.log", extra=("--backend", "openstack", "--os-cloud", "peer", "--plug", "fabric"))
    dm.start(timeout=60)
    try:
        yield dm
    finally:
        dm.stop()
        for name in netns.list(PREFIX):   # the pods' and the fabric namespace the host ends sat in
            netns.delete(name)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("cnibin"))


@pytest.fixture
def pod_ns() -> Iterator[str]:
    name = f"{PREFIX}p{secrets.token_hex(2)}"
    netns.create(name)
    yield name
    netns.delete(name)


def pod_link(ns: str, ifname: str = "eth0"):
    from netbay.runtime.inside import opened

    with opened(netns.path(ns)) as r:
        lk = r.link(ifname)
        return (lk, [a for a in r.addresses(lk.index) if ":" not in a]) if lk else (None, [])


def test_add_makes_the_pods_port_in_the_cloud_check_passes_del_twice_leaves_nothing(
        admin, network, daemon: Daemon, plugin: Path, pod_ns: str, cloud_env: dict[str, str]) -> None:
    net, sub = network
    before = port_ids(cloud_env)
    uid = str(uuid.uuid4())
    conf = netbay_conf(f"{PREFIX}conf", net.name, daemon.sock)
    args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;K8S_POD_UID={uid}"
    add = invoke(plugin, "ADD", conf, container="ctr-cloud-1", netns=netns.path(pod_ns), args=args)
    assert add.rc == 0, (add, daemon.log.read_text()[-2000:])
    result = add.json

    (port,) = admin.network.ports(network_id=net.id, device_id=uid)
    ip = port.fixed_ips[0]["ip_address"]
    assert result["interfaces"] == [{"name": "eth0", "mac": port.mac_address, "sandbox": netns.path(pod_ns)}]
    assert result["ips"] == [{"interface": 0, "address": f"{ip}/24", "gateway": sub.gateway_ip}]
    assert port.device_owner == "compute:kuryr" and port.binding_host_id == socket.gethostname()
    assert port.name == "default/web-1"
    assert {"netbay.cni.made", "netbay.cni.ctr:ctr-cloud-1", "netbay.cni.if:eth0",
            f"netbay.cni.net:{PREFIX}conf"} <= set(port.tags)
    assert port_ids(cloud_env) == before | {port.id}        # the cloud's own CLI sees it
    lk, addrs = pod_link(pod_ns)
    assert lk.address == port.mac_address and addrs == [f"{ip}/24"] and lk.up

    check = invoke(plugin, "CHECK", {**conf, "prevResult": result}, container="ctr-cloud-1",
                   netns=netns.path(pod_ns), args=args)
    assert (check.rc, check.out) == (0, ""), check
    wrong = {**result, "ips": [{"interface": 0, "address": "10.77.0.250/24", "gateway": sub.gateway_ip}]}
    bad = invoke(plugin, "CHECK", {**conf, "prevResult": wrong}, container="ctr-cloud-1",
                 netns=netns.path(pod_ns), args=args)
    assert bad.rc == 1 and bad.code == 999 and "are not the port's" in bad.json["msg"], bad

    for _ in range(2):  # DEL twice: both succeed
        gone = invoke(plugin, "DEL", conf, container="ctr-cloud-1", netns=netns.path(pod_ns), args=args)
        assert (gone.rc, gone.out) == (0, ""), gone
    assert pod_link(pod_ns)[0] is None
    assert port_ids(cloud_env) == before


def test_a_port_the_controller_made_is_adopted_and_kept(
        admin, network, daemon: Daemon, plugin: Path, pod_ns: str, cloud_env: dict[str, str]) -> None:
    """kuryr's controller makes the pod's port first (``device_id`` = the pod's UID):
    ADD plugs that port, bound to this host; DEL unbinds it and leaves it to its maker."""
    net, _sub = network
    uid = str(uuid.uuid4())
    made = admin.network.create_port(network_id=net.id, device_id=uid, name="default/db-0",
                                     fixed_ips=[{"ip_address": "10.77.0.77"}])
    before = port_ids(cloud_env)
    try:
        conf = netbay_conf(f"{PREFIX}conf", net.id, daemon.sock, version="1.1.0")
        args = f"K8S_POD_NAMESPACE=default;K8S_POD_NAME=db-0;K8S_POD_UID={uid};IPV4=10.77.0.77/24"
        add = invoke(plugin, "ADD", conf, container="ctr-cloud-2", netns=netns.path(pod_ns), args=args)
        assert add.rc == 0, add
        assert add.json["interfaces"][0]["mac"] == made.mac_address
        bound = admin.network.get_port(made.id)
        assert bound.binding_host_id == socket.gethostname() and bound.device_owner == "compute:kuryr"
        assert pod_link(pod_ns)[1] == ["10.77.0.77/24"]
        assert port_ids(cloud_env) == before                     # no second port
        assert invoke(plugin, "DEL", conf, container="ctr-cloud-2", netns=netns.path(pod_ns), args=args).rc == 0
        kept = admin.network.get_port(made.id)
        assert kept.binding_host_id == "" and kept.device_id == uid
        assert not [t for t in kept.tags if t.startswith("netbay.cni")]
        assert pod_link(pod_ns)[0] is None
    finally:
        admin.network.delete_port(made)


def test_a_network_the_cloud_lacks_is_a_config_error_and_status_says_so(
        daemon: Daemon, plugin: Path, pod_ns: str, cloud_env: dict[str, str]) -> None:
    before = port_ids(cloud_env)
    conf = netbay_conf(f"{PREFIX}none", f"{PREFIX}no-such-net", daemon.sock, version="1.1.0")
    add = invoke(plugin, "ADD", conf, container="ctr-cloud-3", netns=netns.path(pod_ns))
    assert add.rc == 1 and add.code == 7 and "no network" in add.json["msg"], add
    status = invoke(plugin, "STATUS", conf, ifname="")
    assert status.rc == 1 and status.code == 50, status
    assert port_ids(cloud_env) == before


def test_gc_removes_the_attachments_the_runtime_no_longer_knows(
        admin, network, daemon: Daemon, plugin: Path, cloud_env: dict[str, str]) -> None:
    net, _sub = network
    before = port_ids(cloud_env)
    conf = netbay_conf(f"{PREFIX}gc", net.name, daemon.sock, version="1.1.0")
    spaces = [f"{PREFIX}gc{i}" for i in range(2)]
    try:
        for i, ns in enumerate(spaces):
            netns.create(ns)
            add = invoke(plugin, "ADD", conf, container=f"gc{i}", netns=netns.path(ns))
            assert add.rc == 0, add
        made = {p.device_id: p.id for p in admin.network.ports(tags=f"netbay.cni.net:{PREFIX}gc")}
        assert set(made) == {"gc0", "gc1"}
        gc = invoke(plugin, "GC", {**conf, "cni.dev/valid-attachments": [{"containerID": "gc0", "ifname": "eth0"}]},
                    ifname="")
        assert (gc.rc, gc.out) == (0, ""), gc
        assert port_ids(cloud_env) == before | {made["gc0"]}
        assert pod_link(spaces[0])[0] is not None
        assert invoke(plugin, "GC", {**conf, "cni.dev/valid-attachments": []}, ifname="").rc == 0
        assert port_ids(cloud_env) == before
    finally:
        for ns in spaces:
            netns.delete(ns)


def test_a_cloud_clouds_yaml_lacks_is_said_at_start(cloud_env: dict[str, str], tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OS_")}, **cloud_env}
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "cni-daemon", "--socket", str(tmp_path / "s.sock"),
                    "--prefix", PREFIX, "--backend", "openstack", "--os-cloud", "no-such-cloud"],
                   capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "no-such-cloud" in r.stderr, r
    assert not (tmp_path / "s.sock").exists()
