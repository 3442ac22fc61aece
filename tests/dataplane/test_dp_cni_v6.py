"""netbay-cni over IPv6 alone and dual-stack (issue 28): ADD returns every family the
port has (CNI 1.x ``ips``) with a default route per family, CHECK verifies both, and
packets flow over both families — with a netbay sandbox on the same network, and in a
podman container on the CNI backend.

Same fixtures as test_dp_cni.py (a real netbay server and agent, ``netbay cni-daemon``
as a child process, pod namespaces made here). IPv6 prefixes are ULAs (fd00::/8).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.runtime.inside import opened

from .agent_fixtures import Cloud, wait_for
from .cni_fixtures import Daemon, Podman, bin_dir, daemon, invoke, netbay_conf, podman_available  # noqa: F401
from .dp_helpers import PREFIX, fixed_ip, ping

TAG = "cni6"
NS = f"{PREFIX}{TAG}-"
CLOUD_TAG = TAG   # the shared `cloud` fixture (conftest.py): its namespace prefix


@pytest.fixture(scope="module")
def dual(cloud: Cloud) -> tuple[dict, dict, dict]:
    """A dual-stack network: (network, IPv4 subnet, IPv6 subnet)."""
    net, sub4 = cloud.network(f"{NS}dual", "10.9.61.0/24")
    return net, sub4, cloud.subnet6(net["id"], "fd00:9:61::/64")


@pytest.fixture
def pod_ns() -> Iterator:
    names: list[str] = []

    def make() -> str:
        name = f"{NS}p{len(names)}"
        netns.create(name)
        names.append(name)
        return name

    yield make
    for name in names:
        netns.delete(name)


def plugin(bin_dir: Path) -> Path:
    return bin_dir / "netbay-cni"


def ports_of(cloud: Cloud, **params: str) -> list[dict]:
    return cloud.ok(cloud.http.get("/network/v2.0/ports", params=params))["ports"]


def addresses(ns: str, ifname: str = "eth0") -> set[str]:
    """The global addresses of ``ifname`` in ``ns`` (link-local left out)."""
    with opened(netns.path(ns)) as r:
        lk = r.link(ifname)
        return {a for a in r.addresses(lk.index) if not a.startswith("fe80:")} if lk else set()


def sandbox_on(cloud: Cloud, name: str, net: dict) -> tuple[dict, dict]:
    """A netbay sandbox on ``net`` and its port, ACTIVE."""
    sb = cloud.sandbox(name, networks=[net["id"]])
    port = wait_for(lambda: ports_of(cloud, device_id=sb["id"]), 10, 0.05, "sandbox port")[0]
    cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
    return sb, port


def test_dual_stack_add_check_del(cloud: Cloud, daemon: Daemon, bin_dir: Path, dual: tuple[dict, dict, dict],
                                  pod_ns) -> None:
    net, sub4, sub6 = dual
    ns = pod_ns()
    conf = netbay_conf(f"{NS}conf", net["name"], daemon.sock)
    add = invoke(plugin(bin_dir), "ADD", conf, container="ds1", netns=netns.path(ns))
    assert add.rc == 0, add
    result = add.json
    (port,) = ports_of(cloud, device_id="ds1")
    ip4, ip6 = fixed_ip(port, 4), fixed_ip(port, 6)
    assert result["ips"] == [{"interface": 0, "address": f"{ip4}/24", "gateway": sub4["gateway_ip"]},
                             {"interface": 0, "address": f"{ip6}/64", "gateway": sub6["gateway_ip"]}]
    assert result["routes"] == [{"dst": "0.0.0.0/0", "gw": sub4["gateway_ip"]},
                                {"dst": "::/0", "gw": sub6["gateway_ip"]}]
    assert addresses(ns) == {f"{ip4}/24", f"{ip6}/64"}
    cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")

    sb, sb_port = sandbox_on(cloud, f"{NS}sb", net)
    try:
        sb_ns = cloud.sandbox_ns(sb["id"])
        for version in (4, 6):   # both families, both ways, usable at once (no DAD wait)
            mine = fixed_ip(port, version)
            assert wait_for(lambda m=mine: ping(sb_ns, m), 10, 0.05, f"sandbox -> pod over IPv{version}")
            assert ping(ns, fixed_ip(sb_port, version)), f"pod -> sandbox over IPv{version}"

        check = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": result}, container="ds1",
                       netns=netns.path(ns))
        assert (check.rc, check.out) == (0, ""), check
        # a prevResult lacking the IPv6 address is not the port's
        only4 = {**result, "ips": result["ips"][:1]}
        short = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": only4}, container="ds1", netns=netns.path(ns))
        assert short.rc == 1 and "are not the port's" in short.json["msg"], short
        # the IPv6 default route taken away: CHECK says so
        with opened(netns.path(ns)) as r:
            r.del_route("::/0", gateway=sub6["gateway_ip"])
        bad = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": result}, container="ds1", netns=netns.path(ns))
        assert bad.rc == 1 and f"no route to ::/0 via {sub6['gateway_ip']}" in bad.json["msg"], bad
        # ... and the IPv6 address
        with opened(netns.path(ns)) as r:
            r.del_address(r.link("eth0").index, f"{ip6}/64")
        bad = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": result}, container="ds1", netns=netns.path(ns))
        assert bad.rc == 1 and f"lacks address {ip6}/64" in bad.json["msg"], bad

        gone = invoke(plugin(bin_dir), "DEL", {**conf, "prevResult": result}, container="ds1", netns=netns.path(ns))
        assert (gone.rc, gone.out) == (0, ""), gone
        assert ports_of(cloud, device_id="ds1") == []
        assert not ping(sb_ns, ip6, timeout=0.3)
    finally:
        cloud.delete_sandbox(sb["id"])


def test_ipv6_only(cloud: Cloud, daemon: Daemon, bin_dir: Path, pod_ns) -> None:
    """A network with an IPv6 subnet alone: one address, one default route, packets flow;
    0.4.0 results say ``version: "6"``."""
    net, sub6 = cloud.network6(f"{NS}only6", "fd00:9:62::/64")
    ns = pod_ns()
    conf = netbay_conf(f"{NS}conf6", net["id"], daemon.sock, version="0.4.0")
    add = invoke(plugin(bin_dir), "ADD", conf, container="v6only", netns=netns.path(ns))
    assert add.rc == 0, add
    (port,) = ports_of(cloud, device_id="v6only")
    ip6 = fixed_ip(port, 6)
    assert add.json["ips"] == [{"interface": 0, "address": f"{ip6}/64", "version": "6",
                                "gateway": sub6["gateway_ip"]}]
    assert add.json["routes"] == [{"dst": "::/0", "gw": sub6["gateway_ip"]}]
    assert addresses(ns) == {f"{ip6}/64"}
    sb, sb_port = sandbox_on(cloud, f"{NS}sb6", net)
    try:
        assert wait_for(lambda: ping(cloud.sandbox_ns(sb["id"]), ip6), 10, 0.05, "sandbox -> pod over IPv6")
        assert ping(ns, fixed_ip(sb_port, 6))
        check = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": add.json}, container="v6only",
                       netns=netns.path(ns))
        assert (check.rc, check.out) == (0, ""), check
        assert invoke(plugin(bin_dir), "DEL", conf, container="v6only", netns=netns.path(ns)).rc == 0
    finally:
        cloud.delete_sandbox(sb["id"])


@pytest.mark.skipif(podman_available() is not None, reason=str(podman_available()))
def test_podman_dual_stack(cloud: Cloud, daemon: Daemon, bin_dir: Path, dual: tuple[dict, dict, dict]) -> None:
    """podman's CNI backend runs a container with both families: both addresses and default
    routes inside, ICMP both ways over each family, then a second container: pod <-> pod."""
    net, sub4, sub6 = dual
    pm = Podman(Path(tempfile.mkdtemp(prefix="nbtpm-", dir="/tmp")), bin_dir)
    name = f"{NS}podman"
    sb, sb_port = sandbox_on(cloud, f"{NS}psb", net)
    try:
        pm.import_busybox()
        pm.network(name, [{"type": "netbay-cni", "network": net["name"], "socket": str(daemon.sock)}])
        for c in ("c1", "c2"):
            pm.cli("run", "-d", "--name", c, "--network", name, Podman.IMAGE, "sleep", "600")
        ports = {p["name"]: p for p in ports_of(cloud, tags=f"netbay.cni.net:{name}")}
        p1, p2 = ports["cni-c1"], ports["cni-c2"]
        shown = pm.cli("exec", "c1", "ip", "-o", "addr", "show", "eth0").stdout
        assert f"inet {fixed_ip(p1, 4)}/24" in shown and f"inet6 {fixed_ip(p1, 6)}/64" in shown, shown
        assert f"default via {sub6['gateway_ip']}" in pm.cli("exec", "c1", "ip", "-6", "route").stdout
        assert f"default via {sub4['gateway_ip']}" in pm.cli("exec", "c1", "ip", "route").stdout
        for p in (p1, p2):
            cloud.wait_status(f"/network/v2.0/ports/{p['id']}", "ACTIVE")
        sb_ns = cloud.sandbox_ns(sb["id"])
        for version in (4, 6):
            mine = fixed_ip(p1, version)
            assert wait_for(lambda m=mine: ping(sb_ns, m), 10, 0.05, f"sandbox -> podman over IPv{version}")
            for dst in (fixed_ip(sb_port, version), fixed_ip(p2, version)):   # container -> sandbox, pod -> pod
                out = pm.cli("exec", "c1", "ping", "-c", "1", "-W", "3", dst, check=False).stdout
                assert "1 packets received" in out, (dst, out)
        pm.cli("rm", "--force", "--time", "0", "c1", "c2")   # podman runs DEL
        assert ports_of(cloud, tags=f"netbay.cni.net:{name}") == []
        assert Names.tap(p1["id"]) not in cloud.taps()
    finally:
        pm.close()
        cloud.delete_sandbox(sb["id"])
