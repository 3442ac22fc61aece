"""netbay-cni, called as a CNI runtime calls it, on a real netbay server + agent, real
packets — and side by side with the reference ``bridge`` plugin of this machine for
the error cases (same exit status, same code).

The daemon (``netbay cni-daemon``) is a child process on a socket of this run; the
plugin is the launcher ``netbay cni-install`` writes, in a bin dir of this run. Pod
namespaces are made here (``nbt<hex>-cni-p…``); the reference plugin runs inside a
namespace of its own (never the host's).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.dataplane import netns
from netbay.dataplane.names import Names

from .agent_fixtures import Cloud, wait_for
from .cni_fixtures import (REFERENCE_DIR, Call, Daemon, Podman, bin_dir, bridge_conf, daemon,  # noqa: F401 - fixtures
                           invoke, netbay_conf, podman_available, reference_available)
from .dp_helpers import PREFIX, ping

TAG = "cni"
NS = f"{PREFIX}{TAG}-"


CLOUD_TAG = TAG   # the shared `cloud` fixture (conftest.py): its namespace prefix


@pytest.fixture(scope="module")
def network(cloud: Cloud) -> tuple[dict, dict]:
    return cloud.network(f"{NS}net", "10.9.60.0/24")


@pytest.fixture
def pod_ns(request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace standing in for a pod's (the runtime's), deleted afterwards."""
    names = []

    def make(suffix: str = "") -> str:
        name = f"{NS}p{len(names)}{suffix}"
        netns.create(name)
        names.append(name)
        return name

    yield make  # type: ignore[misc]
    for name in names:
        netns.delete(name)


def plugin(bin_dir: Path) -> Path:
    return bin_dir / "netbay-cni"


def ports_of(cloud: Cloud, **params: str) -> list[dict]:
    return cloud.ok(cloud.http.get("/network/v2.0/ports", params=params))["ports"]


def taps(cloud: Cloud) -> list[str]:
    return cloud.taps()


def link(ns: str, ifname: str = "eth0"):
    from netbay.runtime.inside import opened

    with opened(netns.path(ns)) as r:
        lk = r.link(ifname)
        return (lk, [a for a in r.addresses(lk.index) if ":" not in a]) if lk else (None, [])


# --- the verbs ----------------------------------------------------------------------------


def test_add_check_del(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict], pod_ns) -> None:
    net, sub = network
    ns = pod_ns()
    conf = netbay_conf(f"{NS}conf", net["name"], daemon.sock)
    args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;K8S_POD_UID=uid-web-1"
    add = invoke(plugin(bin_dir), "ADD", conf, container="ctr1", netns=netns.path(ns), args=args)
    assert add.rc == 0, add
    result = add.json
    assert result["cniVersion"] == "1.0.0"
    (port,) = ports_of(cloud, device_id="uid-web-1")
    ip = port["fixed_ips"][0]["ip_address"]
    assert result["interfaces"] == [{"name": "eth0", "mac": port["mac_address"], "sandbox": netns.path(ns)}]
    assert result["ips"] == [{"interface": 0, "address": f"{ip}/24", "gateway": sub["gateway_ip"]}]
    assert result["routes"] == [{"dst": "0.0.0.0/0", "gw": sub["gateway_ip"]}]
    assert port["name"] == "default/web-1" and port["device_owner"] == "compute:netbay"
    assert port["binding:host_id"] and port["network_id"] == net["id"]
    lk, addrs = link(ns)
    assert lk.address == port["mac_address"] and addrs == [f"{ip}/24"] and lk.up
    cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")  # the agent adopted it

    # a netbay sandbox on the same network reaches the pod, and the pod the sandbox
    sb = cloud.sandbox(f"{NS}sb", networks=[net["id"]])
    sb_port = wait_for(lambda: ports_of(cloud, device_id=sb["id"]), 10, 0.05, "sandbox port")[0]
    cloud.wait_status(f"/network/v2.0/ports/{sb_port['id']}", "ACTIVE")
    try:
        assert wait_for(lambda: ping(cloud.sandbox_ns(sb["id"]), ip), 10, 0.05, "sandbox -> pod")
        assert ping(ns, sb_port["fixed_ips"][0]["ip_address"])

        check = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": result}, container="ctr1",
                       netns=netns.path(ns), args=args)
        assert (check.rc, check.out) == (0, ""), check
        # CHECK finds what differs: the address taken away
        from netbay.runtime.inside import opened

        with opened(netns.path(ns)) as r:
            r.del_address(r.link("eth0").index, f"{ip}/24")
        bad = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": result}, container="ctr1",
                     netns=netns.path(ns), args=args)
        assert bad.rc == 1 and bad.code == 999 and "lacks address" in bad.json["msg"], bad

        for _ in range(2):  # DEL twice: both succeed
            gone = invoke(plugin(bin_dir), "DEL", {**conf, "prevResult": result}, container="ctr1",
                          netns=netns.path(ns), args=args)
            assert (gone.rc, gone.out) == (0, ""), gone
        assert ports_of(cloud, device_id="uid-web-1") == []
        assert link(ns)[0] is None
        assert Names.tap(port["id"]) not in taps(cloud)
        assert not ping(cloud.sandbox_ns(sb["id"]), ip, timeout=0.3)
    finally:
        cloud.delete_sandbox(sb["id"])


def test_check_finds_what_is_gone(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict],
                                  pod_ns) -> None:
    """CHECK fails, as the spec says, once the container's interface, its namespace or
    its port is gone, or the port is bound elsewhere (the kernel is read while the port
    is looked up: each still found; a change made in the API reaches the daemon's watch
    of the change feed within milliseconds)."""
    from netbay.runtime.inside import opened

    net, _sub = network
    conf = netbay_conf(f"{NS}conf", net["id"], daemon.sock)

    def check(ns: str, container: str, result: dict) -> Call:
        return invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": result}, container=container,
                      netns=netns.path(ns))

    ns = pod_ns()
    add = invoke(plugin(bin_dir), "ADD", conf, container="gone1", netns=netns.path(ns))
    assert add.rc == 0, add
    ok = check(ns, "gone1", add.json)
    assert (ok.rc, ok.out) == (0, ""), ok
    with opened(netns.path(ns)) as r:   # the interface (its pair, the fabric end with it)
        r.delete_link("eth0")
    bad = check(ns, "gone1", add.json)
    assert bad.rc == 1 and bad.code == 999 and f"eth0 is not in {netns.path(ns)}" in bad.json["msg"], bad
    assert "fabric end is gone" in bad.json["msg"], bad
    netns.delete(ns)   # the namespace
    bad = check(ns, "gone1", add.json)
    assert bad.rc == 1 and "failed to open netns" in bad.json["msg"], bad
    assert invoke(plugin(bin_dir), "DEL", conf, container="gone1", netns=netns.path(ns)).rc == 0

    ns = pod_ns()
    add = invoke(plugin(bin_dir), "ADD", conf, container="gone2", netns=netns.path(ns))
    assert add.rc == 0, add
    assert check(ns, "gone2", add.json).rc == 0   # the daemon's watch knows the port now
    (port,) = ports_of(cloud, tags="netbay.cni.ctr:gone2")
    cloud.ok(cloud.http.delete(f"/network/v2.0/ports/{port['id']}"), 204)   # the port, behind the daemon's back
    # CHECK reads the port from the daemon's watch of the change feed: the deletion
    # reaches it within milliseconds (bounded here), and CHECK names the missing port from
    # then on. The server's agent follows the same feed and may unplug the port first: a
    # CHECK between the two fails on the gone fabric end instead (a whole run saw it once).
    def names_the_port() -> Call | None:
        c = check(ns, "gone2", add.json)
        return c if c.rc == 1 and "no port for container gone2" in (c.json or {}).get("msg", "") else None

    bad = wait_for(names_the_port, timeout=2.0, what="CHECK to name the deleted port")
    assert bad.code == 999, bad
    assert check(ns, "gone2", add.json).rc == 1
    gone = invoke(plugin(bin_dir), "DEL", conf, container="gone2", netns=netns.path(ns))
    assert (gone.rc, gone.out) == (0, ""), gone
    assert link(ns)[0] is None

    ns = pod_ns()   # the port bound to another host in the API: CHECK fails (an update the feed brings)
    add = invoke(plugin(bin_dir), "ADD", conf, container="gone3", netns=netns.path(ns))
    assert add.rc == 0, add
    assert check(ns, "gone3", add.json).rc == 0
    (port,) = ports_of(cloud, tags="netbay.cni.ctr:gone3")
    cloud.ok(cloud.http.put(f"/network/v2.0/ports/{port['id']}", json={"port": {"binding:host_id": "elsewhere"}}), 200)
    bad = wait_for(lambda: (c := check(ns, "gone3", add.json)).rc == 1 and c, timeout=2.0, what="CHECK fails")
    # Whichever CHECK sees first: the binding in the API, or this host's agent having
    # already unplugged the port that is no longer bound here (its fabric end gone).
    assert "is bound to 'elsewhere'" in bad.json["msg"] or "fabric end is gone" in bad.json["msg"], bad
    assert invoke(plugin(bin_dir), "DEL", conf, container="gone3", netns=netns.path(ns)).rc == 0


def test_result_versions(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict], pod_ns) -> None:
    """0.4.0 results carry ips[].version; 1.1.0 interfaces carry the MTU."""
    net, _sub = network
    for i, version in enumerate(("0.4.0", "1.1.0")):
        ns = pod_ns()
        conf = netbay_conf(f"{NS}conf", net["id"], daemon.sock, version=version)
        add = invoke(plugin(bin_dir), "ADD", conf, container=f"v{i}", netns=netns.path(ns))
        assert add.rc == 0, add
        body = add.json
        assert body["cniVersion"] == version
        if version == "0.4.0":
            assert body["ips"][0]["version"] == "4"
        else:
            assert body["interfaces"][0]["mtu"] == 1500 and "version" not in body["ips"][0]
        assert invoke(plugin(bin_dir), "DEL", conf, container=f"v{i}", netns=netns.path(ns)).rc == 0


def test_given_port(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict], pod_ns) -> None:
    """PORT_UUID (a controller made the port): plugged as is; DEL unbinds, keeps it."""
    net, sub = network
    port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": net["id"], "fixed_ips": [{"ip_address": "10.9.60.77"}]}}), 201)["port"]
    ns = pod_ns()
    conf = netbay_conf(f"{NS}conf", net["name"], daemon.sock)
    wrong = invoke(plugin(bin_dir), "ADD", conf, container="given", netns=netns.path(ns),
                   args=f"PORT_UUID={port['id']};IPV4=10.9.60.78/24")
    assert wrong.rc == 1 and wrong.code == 4, wrong
    args = f"PORT_UUID={port['id']};IPV4=10.9.60.77/24;GW={sub['gateway_ip']}"
    add = invoke(plugin(bin_dir), "ADD", conf, container="given", netns=netns.path(ns), args=args)
    assert add.rc == 0, add
    assert add.json["interfaces"][0]["mac"] == port["mac_address"]
    assert link(ns)[1] == ["10.9.60.77/24"]
    bound = cloud.port(port["id"])
    assert bound["device_owner"] == "compute:netbay" and bound["binding:host_id"]
    assert invoke(plugin(bin_dir), "DEL", conf, container="given", netns=netns.path(ns), args=args).rc == 0
    kept = cloud.port(port["id"])
    assert kept["binding:host_id"] == "" and kept["device_id"] == "" and kept["device_owner"] == ""
    assert not [t for t in kept["tags"] if t.startswith("netbay.cni")]
    assert link(ns)[0] is None
    cloud.ok(cloud.http.delete(f"/network/v2.0/ports/{port['id']}"), 204)


def test_gc_and_status(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict], pod_ns) -> None:
    net, _sub = network
    conf = netbay_conf(f"{NS}gc", net["name"], daemon.sock, version="1.1.0")
    spaces = [pod_ns(), pod_ns()]
    for i, ns in enumerate(spaces):
        assert invoke(plugin(bin_dir), "ADD", conf, container=f"gc{i}", netns=netns.path(ns)).rc == 0
    made = {p["device_id"]: p for p in ports_of(cloud, tags=f"netbay.cni.net:{NS}gc")}
    assert set(made) == {"gc0", "gc1"}
    gc = invoke(plugin(bin_dir), "GC", {**conf, "cni.dev/valid-attachments": [
        {"containerID": "gc0", "ifname": "eth0"}]}, ifname="")
    assert (gc.rc, gc.out) == (0, ""), gc
    assert {p["device_id"] for p in ports_of(cloud, tags=f"netbay.cni.net:{NS}gc")} == {"gc0"}
    assert Names.tap(made["gc1"]["id"]) not in taps(cloud) and link(spaces[1])[0] is None
    assert link(spaces[0])[0] is not None
    status = invoke(plugin(bin_dir), "STATUS", conf, ifname="")
    assert (status.rc, status.out) == (0, ""), status
    missing = invoke(plugin(bin_dir), "STATUS", {**conf, "network": f"{NS}no-such-net"}, ifname="")
    assert missing.rc == 1 and missing.code == 50, missing
    old = invoke(plugin(bin_dir), "STATUS", {**conf, "cniVersion": "1.0.0"}, ifname="")
    assert old.rc == 1 and old.code == 1, old
    assert invoke(plugin(bin_dir), "GC", {**conf, "cni.dev/valid-attachments": []}, ifname="").rc == 0
    assert ports_of(cloud, tags=f"netbay.cni.net:{NS}gc") == []


def test_daemon_down(bin_dir: Path, tmp_path: Path) -> None:
    """No daemon: "try again later" (STATUS: "not available"); the caller's own mistakes
    are still said as such."""
    conf = netbay_conf(f"{NS}x", "whatever", tmp_path / "absent.sock", version="1.1.0")
    add = invoke(plugin(bin_dir), "ADD", conf, container="c", netns="/run/netns/x")
    assert add.rc == 1 and add.code == 11, add
    env = {"NETBAY_CNI_SOCKET": str(tmp_path / "absent.sock")}
    bad = invoke(plugin(bin_dir), "ADD", b"{not json", container="c", netns="/run/netns/x", extra_env=env)
    assert bad.rc == 1 and bad.code == 6, bad
    old = invoke(plugin(bin_dir), "ADD", {**conf, "cniVersion": "0.2.0"}, container="c", netns="/run/netns/x")
    assert old.rc == 1 and old.code == 1, old
    status = invoke(plugin(bin_dir), "STATUS", conf, ifname="")
    assert status.rc == 1 and status.code == 50, status


# --- error cases, side by side with the reference bridge plugin -------------------------------


@pytest.mark.skipif(reference_available() is not None, reason=str(reference_available()))
def test_errors_as_reference(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict],
                             pod_ns, tmp_path: Path) -> None:
    net, _sub = network
    host = pod_ns("h")  # where bridge runs (and makes its bridge)
    ours_ns, ref_ns = pod_ns(), pod_ns()
    ours_conf = netbay_conf(f"{NS}err", net["name"], daemon.sock)
    ref_conf = bridge_conf(f"{NS}err", "10.9.61.0/24", tmp_path / "ipam")

    def both(command: str, conf_edit=None, *, stdin: bytes | None = None, **kw) -> tuple[Call, Call]:
        calls = []
        for p, conf, ns in ((plugin(bin_dir), ours_conf, ours_ns), (REFERENCE_DIR / "bridge", ref_conf, ref_ns)):
            c = dict(conf)
            if conf_edit:
                conf_edit(c)
            env = {"container": "errc", "netns": netns.path(ns), **kw}
            if p.name != "bridge":  # the daemon's socket, for calls whose config cannot say it
                env["extra_env"] = {"NETBAY_CNI_SOCKET": str(daemon.sock)}
            calls.append(invoke(p, command, stdin if stdin is not None else c,
                                run_in=host if p.name == "bridge" else None, **env))
        return calls[0], calls[1]

    def same(pair: tuple[Call, Call], what: str) -> Call:
        ours, ref = pair
        assert (ours.rc, ours.code) == (ref.rc, ref.code), f"{what}: netbay-cni {ours} vs bridge {ref}"
        if ref.rc != 0 and isinstance(ref.json, dict):  # the spec's error object, field for field
            assert isinstance(ours.json, dict) and set(ref.json) - {"details"} <= set(ours.json), \
                f"{what}: netbay-cni {ours} vs bridge {ref}"
            assert isinstance(ours.json["msg"], str) and ours.json["msg"], f"{what}: no msg in {ours}"
        return ours

    same(both("ADD", stdin=b"not json"), "bad JSON")
    same(both("ADD", stdin=b""), "empty config")
    same(both("ADD", lambda c: c.pop("name")), "no network name")
    same(both("ADD", lambda c: c.update(cniVersion="9.9.9")), "unsupported version")
    same(both("ADD", netns=""), "no CNI_NETNS")
    same(both("ADD", container=""), "no CNI_CONTAINERID")
    same(both("ADD", ifname=""), "no CNI_IFNAME")
    same(both("ADD", netns="/run/netns/" + NS + "missing"), "missing netns")
    same(both("BOGUS"), "unknown command")
    same(both("CHECK"), "CHECK without prevResult")
    same(both("CHECK", lambda c: c.update(prevResult={"cniVersion": "1.0.0", "ips": []}), container="unknown"),
         "CHECK of an unknown container")
    same(both("DEL", container="unknown"), "DEL of an unknown container")
    first = same(both("ADD"), "ADD")
    assert first.rc == 0
    again = same(both("ADD"), "second ADD, same interface")
    assert "already exists" in again.json["msg"]
    same(both("DEL", netns="/run/netns/" + NS + "missing"), "DEL, netns gone")
    same(both("DEL", netns=""), "DEL without CNI_NETNS")
    same(both("DEL"), "DEL")
    same(both("DEL"), "DEL again")
    assert ports_of(cloud, tags=f"netbay.cni.net:{NS}err") == []
    assert link(ours_ns)[0] is None


def test_version_constant() -> None:
    from netbay.plugins.cni import client, spec

    assert json.loads(client.VERSION) == spec.version_info()
    assert ", ".join(spec.SUPPORTED) == client.SUPPORTED


# --- a real CNI runtime: podman on its CNI backend ----------------------------------------------


def _host_links() -> set[str]:
    with open("/proc/net/dev") as f:
        return {ln.split(":")[0].strip() for ln in list(f)[2:]}


@pytest.mark.skipif(podman_available() is not None, reason=str(podman_available()))
def test_podman(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict],
                tmp_path_factory: pytest.TempPathFactory) -> None:
    net, sub = network
    links_before = _host_links()
    pm = Podman(Path(tempfile.mkdtemp(prefix="nbtpm-", dir="/tmp")), bin_dir)
    name = f"{NS}podman"
    sb = cloud.sandbox(f"{NS}psb", networks=[net["id"]])
    try:
        pm.import_busybox()
        pm.network(name, [{"type": "netbay-cni", "network": net["name"], "socket": str(daemon.sock)}])
        # A bad configuration fails the container (podman then runs DEL, which succeeds):
        # nothing is left of it. (No reference plugin here: podman runs plugins in the
        # host's namespace — bridge would build there; they are compared in
        # test_errors_as_reference, inside a namespace of their own.)
        pm.network(f"{name}-bad", [{"type": "netbay-cni", "network": f"{NS}no-such-net", "socket": str(daemon.sock)}])
        bad = pm.cli("run", "--rm", "--network", f"{name}-bad", Podman.IMAGE, "true", check=False)
        assert bad.returncode != 0, bad
        assert "plugin type=\"netbay-cni\" failed (add)" in bad.stderr and "no network" in bad.stderr, bad.stderr
        assert ports_of(cloud, tags=f"netbay.cni.net:{name}-bad") == []
        cid = pm.cli("run", "-d", "--name", "c1", "--network", name, Podman.IMAGE, "sleep", "600").stdout.strip()
        (port,) = ports_of(cloud, tags=f"netbay.cni.net:{name}")
        assert port["device_id"] == cid and port["name"] == "cni-c1"
        ip = port["fixed_ips"][0]["ip_address"]
        shown = pm.cli("exec", "c1", "ip", "-o", "addr", "show", "eth0").stdout + \
            pm.cli("exec", "c1", "ip", "-o", "link", "show", "eth0").stdout
        assert f"inet {ip}/24" in shown and port["mac_address"] in shown, shown
        assert f"default via {sub['gateway_ip']}" in pm.cli("exec", "c1", "ip", "route").stdout
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")

        # real packets both ways with a netbay sandbox on the same network
        sb_port = wait_for(lambda: ports_of(cloud, device_id=sb["id"]), 10, 0.05, "sandbox port")[0]
        cloud.wait_status(f"/network/v2.0/ports/{sb_port['id']}", "ACTIVE")
        assert wait_for(lambda: ping(cloud.sandbox_ns(sb["id"]), ip), 10, 0.05, "sandbox -> podman container")
        out = pm.cli("exec", "c1", "ping", "-c", "1", "-W", "3", sb_port["fixed_ips"][0]["ip_address"]).stdout
        assert "1 packets received" in out, out

        # CHECK as libcni would run it, with the result podman cached
        sandbox_key = pm.cli("inspect", "c1", "--format", "{{.NetworkSettings.SandboxKey}}").stdout.strip()
        conf = netbay_conf(name, net["name"], daemon.sock)
        add_result = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "mac": port["mac_address"],
                                                             "sandbox": sandbox_key}],
                      "ips": [{"interface": 0, "address": f"{ip}/24", "gateway": sub["gateway_ip"]}]}
        check = invoke(plugin(bin_dir), "CHECK", {**conf, "prevResult": add_result}, container=cid,
                       netns=sandbox_key)
        assert (check.rc, check.out) == (0, ""), check

        pm.cli("rm", "--force", "--time", "0", "c1")  # podman runs DEL
        assert ports_of(cloud, tags=f"netbay.cni.net:{name}") == []
        assert Names.tap(port["id"]) not in taps(cloud)
        again = invoke(plugin(bin_dir), "DEL", conf, container=cid, netns=sandbox_key)
        assert (again.rc, again.out) == (0, ""), again
        assert not ping(cloud.sandbox_ns(sb["id"]), ip, timeout=0.3)
    finally:
        pm.close()
        cloud.delete_sandbox(sb["id"])
    # podman made nothing in the host's namespace (no cni-podman0), nor did we (other
    # suites' Docker ends may come and go meanwhile: only this port's name is ours)
    new = _host_links() - links_before
    assert not [n for n in new if n.startswith(("cni", "podman")) or n == Names.container_end(port["id"])], new


def test_parallel_adds_and_daemon_restart(cloud: Cloud, daemon: Daemon, bin_dir: Path, network: tuple[dict, dict],
                                          pod_ns) -> None:
    """Eight ADDs at once (different containers) all succeed with distinct ports; the
    daemon SIGKILLed and restarted still finds and removes every attachment (its state
    is the ports' tags)."""
    from concurrent.futures import ThreadPoolExecutor

    net, _sub = network
    conf = netbay_conf(f"{NS}par", net["name"], daemon.sock)
    spaces = [pod_ns() for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        adds = list(pool.map(lambda i: invoke(plugin(bin_dir), "ADD", conf, container=f"par{i}",
                                              netns=netns.path(spaces[i])), range(8)))
    assert all(a.rc == 0 for a in adds), [a for a in adds if a.rc]
    ips = {a.json["ips"][0]["address"] for a in adds}
    assert len(ips) == 8
    made = ports_of(cloud, tags=f"netbay.cni.net:{NS}par")
    assert len(made) == 8
    for p in made:
        cloud.wait_status(f"/network/v2.0/ports/{p['id']}", "ACTIVE")

    assert daemon.proc is not None
    daemon.proc.kill()
    daemon.proc.wait(timeout=10)
    down = invoke(plugin(bin_dir), "DEL", conf, container="par0", netns=netns.path(spaces[0]))
    assert down.rc == 1 and down.code == 11, down  # nobody to ask: try again later
    daemon.start()
    with ThreadPoolExecutor(8) as pool:
        dels = list(pool.map(lambda i: invoke(plugin(bin_dir), "DEL", conf, container=f"par{i}",
                                              netns=netns.path(spaces[i])), range(8)))
    assert all((d.rc, d.out) == (0, "") for d in dels), dels
    assert ports_of(cloud, tags=f"netbay.cni.net:{NS}par") == []
    assert not {Names.tap(p["id"]) for p in made} & set(taps(cloud))
    assert all(link(ns)[0] is None for ns in spaces)
