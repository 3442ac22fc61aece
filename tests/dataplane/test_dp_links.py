"""Links, addresses, routes and sysctls inside test-owned namespaces."""

from __future__ import annotations

import errno
import subprocess

import pytest

from netbay.dataplane import links, netns
from .dp_helpers import ifname, ip_netns_exec


def root_link_names() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10).stdout
    return {ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines()}


def test_bridge_is_idempotent(make_ns):
    fab = make_ns("fab")
    br = ifname("b")
    idx = links.bridge(fab, br, 1450, mac="fa:16:3e:aa:00:01")
    assert links.bridge(fab, br, 1450, mac="fa:16:3e:aa:00:01") == idx
    link = links.get_link(fab, br)
    assert link is not None
    assert (link.kind, link.mtu, link.up, link.address) == ("bridge", 1450, True,
                                                            "fa:16:3e:aa:00:01")
    links.bridge(fab, br, 1400)  # "ensure" also converges attributes
    assert links.get_link(fab, br).mtu == 1400
    assert br not in root_link_names()


def test_bridge_name_taken_by_another_kind(make_ns):
    a, b = make_ns("kind-a"), make_ns("kind-b")
    links.veth_pair(a, "x0", b, "x1")
    with pytest.raises(links.LinkError) as ei:
        links.bridge(a, "x0")
    assert ei.value.errno == errno.EEXIST


def test_veth_peer_is_created_in_the_other_namespace(make_ns):
    fab, sb = make_ns("vfab"), make_ns("vsb")
    br = links.bridge(fab, "br0")
    host = ifname("t")
    idx = links.veth_pair(fab, host, sb, "eth0", 1450, mac_b="fa:16:3e:00:00:07",
                          master_a=br, up_a=True)
    a = links.get_link(fab, host)
    assert a.index == idx and a.kind == "veth" and a.master == br and a.up and a.mtu == 1450
    b = links.get_link(sb, "eth0")
    assert b.kind == "veth" and b.address == "fa:16:3e:00:00:07" and b.mtu == 1450
    assert not b.up
    assert links.get_link(fab, "eth0") is None
    assert host not in root_link_names()
    # idempotent: the same pair again is fine; a half-matching one is refused
    assert links.veth_pair(fab, host, sb, "eth0", 1450, master_a=br, up_a=True) == idx
    with pytest.raises(links.LinkError):
        links.veth_pair(fab, host, sb, "eth9")
    # deleting one end removes the pair
    assert links.delete_link(fab, host) is True
    assert links.delete_link(fab, host) is False
    assert links.get_link(sb, "eth0") is None


def test_link_setters(make_ns):
    a, b = make_ns("set-a"), make_ns("set-b")
    br = links.bridge(a, "br0")
    links.veth_pair(a, "p0", b, "p1")
    links.set_mtu(a, "p0", 1300)
    links.set_mac(a, "p0", "FA:16:3E:00:00:99")
    links.set_master(a, "p0", "br0")
    links.set_up(a, "p0")
    l0 = links.get_link(a, "p0")
    assert (l0.mtu, l0.address, l0.master, l0.up) == (1300, "fa:16:3e:00:00:99", br, True)
    links.set_master(a, "p0", None)
    links.set_up(a, "p0", False)
    l0 = links.get_link(a, "p0")
    assert (l0.master, l0.up) == (None, False)
    assert {x.ifname for x in links.links(a)} == {"lo", "br0", "p0"}
    with pytest.raises(links.LinkError) as ei:
        links.set_up(a, "nosuch")
    assert ei.value.errno == errno.ENODEV
    with pytest.raises(ValueError):
        links.set_mac(a, "p0", "not-a-mac")
    with pytest.raises(ValueError):
        links.bridge(a, "a-name-longer-than-15")


def test_addresses_and_routes(make_ns):
    a, b = make_ns("rt-a"), make_ns("rt-b")
    links.veth_pair(a, "eth0", b, "eth0")
    links.set_up(a, "eth0")
    assert links.add_address(a, "eth0", "10.9.0.2/24") is True
    assert links.add_address(a, "eth0", "10.9.0.2/24") is False  # idempotent
    assert "10.9.0.2/24" in links.addresses(a, "eth0")
    links.replace_route(a, "default", gateway="10.9.0.1")
    links.replace_route(a, "192.168.77.0/24", gateway="10.9.0.5", dev="eth0")
    links.replace_route(a, "192.168.77.0/24", gateway="10.9.0.6", dev="eth0")  # replaced
    links.replace_route(a, "172.24.4.0/24", gateway="172.24.9.1", dev="eth0", onlink=True)
    rts = {r.dst: r for r in links.routes(a)}
    assert rts["0.0.0.0/0"].gateway == "10.9.0.1"
    assert rts["192.168.77.0/24"].gateway == "10.9.0.6"
    assert rts["172.24.4.0/24"].onlink and rts["172.24.4.0/24"].gateway == "172.24.9.1"
    r = ip_netns_exec(a, "ip", "route")
    assert "default via 10.9.0.1 dev eth0" in r.stdout
    assert "172.24.4.0/24 via 172.24.9.1 dev eth0" in r.stdout and "onlink" in r.stdout
    assert links.del_route(a, "192.168.77.0/24") is True
    assert links.del_route(a, "192.168.77.0/24") is False
    assert links.del_address(a, "eth0", "10.9.0.2/24") is True
    assert links.del_address(a, "eth0", "10.9.0.2/24") is False
    with pytest.raises(ValueError):
        links.replace_route(a, "10.1.0.0/24")  # neither gateway nor device


def test_sysctl_is_per_namespace(make_ns):
    a = make_ns("sysctl")
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        host_before = f.read()
    links.sysctl(a, "net.ipv4.ip_forward", 1)
    assert links.read_sysctl(a, "net.ipv4.ip_forward") == "1"
    links.bridge(a, "br0")  # br_netfilter's sysctls exist per namespace
    links.sysctl(a, "net.bridge.bridge-nf-call-iptables", 1)
    assert links.read_sysctl(a, "net/bridge/bridge-nf-call-iptables") == "1"
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        assert f.read() == host_before
    assert ip_netns_exec(a, "cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip() == "1"


@pytest.mark.parametrize("key", ["kernel.hostname", "vm.swappiness", "net/../kernel/x",
                                 "fs.file-max"])
def test_sysctl_outside_net_is_refused(make_ns, key):
    a = make_ns("sysctl-bad")
    with pytest.raises(ValueError):
        links.sysctl(a, key, 1)


def test_missing_sysctl_is_a_clear_error(make_ns):
    a = make_ns("sysctl-miss")
    with pytest.raises(links.LinkError) as ei:
        links.read_sysctl(a, "net.ipv4.conf.nosuch0.forwarding")
    assert "does not exist" in str(ei.value)


def test_home_namespace_is_refused(make_ns, monkeypatch):
    a = make_ns("home")
    links.close(a)
    monkeypatch.setattr(netns, "in_home", lambda: True)
    with pytest.raises(links.LinkError) as ei:
        links.ipr(a)
    assert ei.value.errno == errno.EPERM
    with pytest.raises(links.LinkError):
        links.sysctl(a, "net.ipv4.ip_forward", 1)


def test_sockets_are_per_thread_and_closed_on_delete(make_ns):
    import threading

    a = make_ns("cache")
    links.bridge(a, "br0")
    s1 = links.ipr(a)
    assert links.ipr(a) is s1
    other: list[object] = []

    def in_other_thread() -> None:
        mine = links.ipr(a)
        other.append(mine)
        other.append({m.get("ifname") for m in mine.link("dump")})
        try:
            s1.link("dump")  # the main thread's socket: refused, not silently re-opened
        except RuntimeError as exc:
            other.append(exc)

    t = threading.Thread(target=in_other_thread)
    t.start()
    t.join(10)
    assert other[0] is not s1
    assert other[1] == {"lo", "br0"}  # a socket made for another thread is also in `a`
    assert isinstance(other[2], RuntimeError)
    netns.delete(a)
    assert links.SOCKETS.held(a) == []
    with pytest.raises(OSError):
        s1.link("dump")


def test_both_netlink_layers_share_one_socket_cache(make_ns):
    """pyroute2's sockets and the codec's are kept the same way (rtnl.sockets): per
    namespace and thread, opened again for a namespace made again, all closed with it."""
    import threading

    from netbay.dataplane import rtnl

    a = make_ns("shared")
    fast, slow = rtnl.rtnl(a), links.ipr(a)
    assert rtnl.rtnl(a) is fast and links.ipr(a) is slow
    assert {x.ifname for x in fast.links()} == {x.ifname for x in links.links(a)} == {"lo"}
    other: list[rtnl.Rtnl] = []
    t = threading.Thread(target=lambda: other.append(rtnl.rtnl(a)))
    t.start()
    t.join(10)
    assert other[0] is not fast and set(rtnl.SOCKETS.held(a)) == {fast, other[0]}
    rtnl.release(a)                             # this thread's only
    assert fast.closed and rtnl.SOCKETS.held(a) == [other[0]] and rtnl.rtnl(a) is not fast
    netns.delete(a)
    assert rtnl.SOCKETS.held(a) == [] == links.SOCKETS.held(a)
    assert other[0].closed and other[0].sock.fileno() == -1


def test_wire_port(make_ns):
    fab = make_ns("wfab")
    sb = make_ns("wsb")  # made by the fixture so it is cleaned up; wire_port adopts it
    br = links.bridge(fab, "br0", 1450)
    port = links.wire_port(fab, "br0", sb, host_ifname=ifname("w"), mac="fa:16:3e:00:01:02",
                           cidrs=["10.1.0.5/24"], gateway="10.1.0.1", mtu=1450,
                           host_routes=[("192.168.9.0/24", "10.1.0.9")])
    assert port.sandbox_ns == sb and port.ifname == "eth0"
    eth0 = links.get_link(sb, "eth0")
    assert eth0.up and eth0.mtu == 1450 and eth0.address == "fa:16:3e:00:01:02"
    assert links.get_link(sb, "lo").up
    assert links.get_link(fab, ifname("w")).master == br
    assert "10.1.0.5/24" in links.addresses(sb, "eth0")
    rts = {r.dst: r for r in links.routes(sb)}
    assert rts["0.0.0.0/0"].gateway == "10.1.0.1" and not rts["0.0.0.0/0"].onlink
    assert rts["192.168.9.0/24"].gateway == "10.1.0.9"
    # again: converges, no error
    again = links.wire_port(fab, br, sb, host_ifname=ifname("w"), mac="fa:16:3e:00:01:02",
                            cidrs=["10.1.0.5/24"], gateway="10.1.0.1", mtu=1450)
    assert again.index == port.index
    links.unwire_port(fab, ifname("w"), sandbox_ns=sb, delete_sandbox=True)
    assert not netns.exists(sb)
    assert links.get_link(fab, ifname("w")) is None


def test_wire_port_gateway_outside_subnet_is_onlink(make_ns):
    fab, sb = make_ns("ofab"), make_ns("osb")
    links.bridge(fab, "br0")
    links.wire_port(fab, "br0", sb, host_ifname=ifname("o"), cidrs=["10.2.0.5/32"],
                    gateway="10.2.0.1")
    rts = {r.dst: r for r in links.routes(sb)}
    assert rts["0.0.0.0/0"].onlink


def test_namespace_recreated_behind_our_back(make_ns):
    """A cached socket must not keep configuring a namespace that was replaced."""
    import subprocess

    a = make_ns("recreate")
    links.bridge(a, "br-old")
    # someone else deletes and re-creates it (iproute2 here), bypassing netbay
    subprocess.run(["ip", "netns", "del", a], check=True, timeout=10)
    with pytest.raises(netns.NetnsError):
        links.links(a)
    subprocess.run(["ip", "netns", "add", a], check=True, timeout=10)
    assert {x.ifname for x in links.links(a)} == {"lo"}  # the new one, not the old


def test_sockets_of_dead_threads_are_closed_on_delete(make_ns):
    import threading

    a = make_ns("deadthread")
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(links.ipr(a)))
    t.start()
    t.join(10)
    handle = next(h for h in links.SOCKETS.held(a) if h.ipr is got[0])
    assert handle.sock.fileno() >= 0
    netns.delete(a)
    assert handle.sock.fileno() == -1


def test_no_descriptor_leak_over_many_namespaces():
    from .dp_helpers import PREFIX

    def fds() -> int:
        import os
        return len(os.listdir("/proc/self/fd"))

    names = [f"{PREFIX}fd{i}" for i in range(30)]
    try:
        netns.create(names[0])
        links.bridge(names[0], "br0")
        netns.delete(names[0])
        before = fds()
        for n in names:
            netns.create(n)
            links.bridge(n, "br0")
            netns.delete(n)
        assert fds() - before <= 3
    finally:
        for n in names:
            netns.delete(n)
