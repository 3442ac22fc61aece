"""netbay-cni's checks before any real work (no root, no kernel): the environment,
the configuration and the versions as the reference plugins' skel answers them; the
result's shape per CNI version; the thin client with no daemon; the daemon's frame
handling of a bad call. Real calls against a server, an agent and podman:
tests/dataplane/test_dp_cni.py."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from netbay.plugins.cni import client, result, server, spec
from netbay.plugins.cni.spec import CniError

FULL = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
        "CNI_PATH": "/opt/cni/bin"}


def code_of(fn, *args) -> tuple[int, str, str]:
    with pytest.raises(CniError) as info:
        fn(*args)
    return info.value.code, info.value.msg, info.value.details


def test_env_as_skel() -> None:
    assert spec.read_env(FULL)["CNI_ARGS"] == ""
    assert code_of(spec.read_env, {**FULL, "CNI_NETNS": "", "CNI_PATH": ""}) == (
        4, "required env variables [CNI_NETNS,CNI_PATH] missing", "")
    assert spec.read_env({**FULL, "CNI_COMMAND": "DEL", "CNI_NETNS": ""})["CNI_NETNS"] == ""  # optional for DEL
    assert code_of(spec.read_env, {**FULL, "CNI_CONTAINERID": "a/b"})[:2] == (4, "invalid characters in containerID")
    assert code_of(spec.read_env, {**FULL, "CNI_IFNAME": "x" * 16})[:2] == (4, "interface name is too long")
    assert code_of(spec.read_env, {**FULL, "CNI_IFNAME": "a:b"})[0] == 4
    status = spec.read_env({"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"})  # no container needed
    assert status["CNI_CONTAINERID"] == ""


def test_config_and_versions() -> None:
    assert code_of(spec.read_config, b"nope")[0] == 6
    assert code_of(spec.read_config, b"[1]")[0] == 6
    assert code_of(spec.read_config, b'{"cniVersion": "1.0.0"}')[:2] == (7, "missing network name")
    assert code_of(spec.read_config, b'{"name": "a b"}')[:2] == (7, "invalid characters found in network name")
    conf = spec.read_config(b'{"cniVersion": "1.0.0", "name": "n"}')
    assert spec.check_version("ADD", conf) == "1.0.0"
    bad = code_of(spec.check_version, "ADD", {"cniVersion": "9.9.9"})
    assert bad[:2] == (1, "incompatible CNI versions") and '"9.9.9"' in bad[2]
    assert code_of(spec.check_version, "ADD", {})[0] == 1  # no cniVersion: 0.1.0, unsupported
    assert code_of(spec.check_version, "CHECK", {"cniVersion": "0.3.1"})[:2] == (
        1, "config version does not allow CHECK")
    assert code_of(spec.check_version, "STATUS", {"cniVersion": "1.0.0"})[0] == 1
    assert spec.check_version("GC", {"cniVersion": "1.1.0"}) == "1.1.0"
    assert code_of(spec.check_version, "ADD", {"cniVersion": "one"})[0] == 6


def test_args() -> None:
    assert spec.parse_args("IgnoreUnknown=1;K8S_POD_NAME=web;PORT_UUID=p;IPV4=10.0.0.15/16;GW=10.0.0.1") == {
        "IgnoreUnknown": "1", "K8S_POD_NAME": "web", "PORT_UUID": "p", "IPV4": "10.0.0.15/16", "GW": "10.0.0.1"}
    assert spec.parse_args("") == {}
    assert code_of(spec.parse_args, "novalue")[0] == 4


def test_args_as_the_kuryr_document_writes_them() -> None:
    """Comma-joined, and with the pair its line break glued onto the container id."""
    doc = ("K8S_POD_NAMESPACE=default;K8S_POD_NAME=nginx-app-722l8;K8S_POD_INFRA_CONTAINER_ID=8ceb0092c250"
           "PORT_UUID=a28c7404-7495-4557-b7fc-3e293508dbc6,IPV4=10.0.0.15/16,GW=10.0.0.1,PORT_TYPE=midonet")
    assert spec.parse_args(doc) == {
        "K8S_POD_NAMESPACE": "default", "K8S_POD_NAME": "nginx-app-722l8", "K8S_POD_INFRA_CONTAINER_ID": "8ceb0092c250",
        "PORT_UUID": "a28c7404-7495-4557-b7fc-3e293508dbc6", "IPV4": "10.0.0.15/16", "GW": "10.0.0.1",
        "PORT_TYPE": "midonet"}
    # a comma inside a value (host-local's IP=a,b) stays in it
    assert spec.parse_args("IP=10.0.0.1/24,10.0.0.2/24;K8S_POD_NAME=web") == {
        "IP": "10.0.0.1/24,10.0.0.2/24", "K8S_POD_NAME": "web"}


def test_port_type_honoured_or_refused_by_name() -> None:
    def req(args: str) -> spec.Request:
        return spec.Request.parse({"command": "ADD", "args": args, "config": {"name": "n", "network": "x"}})
    assert req("").port_type is None and req("PORT_TYPE=veth").port_type == "veth"
    assert req("PORT_TYPE=bridge").port_type == "bridge"
    code, msg, _ = code_of(lambda: req("PORT_UUID=p,PORT_TYPE=midonet").port_type)
    assert code == 4 and "PORT_TYPE=midonet" in msg and "veth" in msg


def test_result_per_version() -> None:
    subnet = {"gateway_ip": "10.0.0.1", "dns_nameservers": ["10.0.0.53"]}
    old = result.render("0.4.0", "eth0", "fa:16:3e:00:00:01", 1450, "/run/netns/x", [("10.0.0.5/24", subnet)],
                        [("0.0.0.0/0", "10.0.0.1")])
    assert old["ips"] == [{"interface": 0, "address": "10.0.0.5/24", "version": "4", "gateway": "10.0.0.1"}]
    assert old["interfaces"] == [{"name": "eth0", "mac": "fa:16:3e:00:00:01", "sandbox": "/run/netns/x"}]
    assert old["dns"] == {"nameservers": ["10.0.0.53"]}
    new = result.render("1.1.0", "eth0", "fa:16:3e:00:00:01", 1450, "/run/netns/x", [("10.0.0.5/24", {})], [])
    assert new["interfaces"][0]["mtu"] == 1450 and "gateway" not in new["ips"][0] and new["dns"] == {}


def test_client_alone(tmp_path) -> None:
    """No daemon: VERSION and the caller's own mistakes are answered; the rest is 11 (50 for STATUS)."""
    assert client.run({}, lambda: b"")[0] == 0 and "netbay-cni" in client.run({}, lambda: b"")[2]
    rc, out, _ = client.run({"CNI_COMMAND": "VERSION"}, lambda: b"")
    assert rc == 0 and json.loads(out) == spec.version_info()
    sock = str(tmp_path / "none.sock")
    env = {**FULL, "NETBAY_CNI_SOCKET": sock}
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "netbay-cni", "network": "x"}).encode()
    rc, out, _ = client.run(env, lambda: conf)
    assert rc == 1 and json.loads(out)["code"] == 11 and sock in json.loads(out)["msg"]
    assert json.loads(client.run(env, lambda: b"{")[1])["code"] == 6
    assert json.loads(client.run({**env, "CNI_NETNS": ""}, lambda: conf)[1])["code"] == 4
    status = {"CNI_COMMAND": "STATUS", "CNI_PATH": "/x", "NETBAY_CNI_SOCKET": sock}
    conf11 = conf.replace(b"1.0.0", b"1.1.0")
    assert json.loads(client.run(status, lambda: conf11)[1])["code"] == 50
    assert client.socket_path({}, b'{"name": "n", "socket" : "/tmp/s.sock"}') == "/tmp/s.sock"
    assert client.socket_path({}, io.BytesIO(b'{"name": "n"}').read()) == client.DEFAULT_SOCKET


def test_daemon_refuses_before_work() -> None:
    """The daemon's frame handling: checks fail before the service is touched (None here)."""
    def ask(env: dict[str, str], stdin: bytes) -> tuple[int, dict]:
        frame = b"".join(f"{k}={v}\0".encode() for k, v in env.items()) + b"\0" + stdin
        answer = asyncio.run(server.answer(None, frame))  # type: ignore[arg-type]
        return int(answer[:1]), json.loads(answer[1:])

    assert ask(FULL, b"nope") == (1, {"cniVersion": spec.CURRENT, "code": 6,
                                      "msg": "error unmarshall network config: Expecting value: line 1 column 1 "
                                             "(char 0)"})
    assert ask({**FULL, "CNI_COMMAND": "BOGUS"}, b'{"name": "n", "cniVersion": "1.0.0"}')[1]["msg"] == \
        "unknown CNI_COMMAND: BOGUS"
    assert ask({**FULL, "CNI_IFNAME": ""}, b"{}")[1]["code"] == 4
    assert ask({"CNI_COMMAND": "VERSION"}, b"") == (0, spec.version_info())


class PortsOnly:
    """A network backend holding networks and ports, listed by equal fields."""

    name, traits = "ports-only", None

    def __init__(self, networks: list[dict], ports: list[dict]) -> None:
        self.items = {"network": networks, "port": ports}

    def list(self, member: str, **where: str) -> list[dict]:
        tags = set(where.pop("tags").split(",")) if "tags" in where else set()
        return [o for o in self.items[member] if all(o.get(k) == v for k, v in where.items())
                and tags <= set(o.get("tags") or ())]

    def show(self, member: str, obj_id: str) -> dict:
        from netbay.errors import NotFound

        found = self.list(member, id=obj_id)
        if not found:
            raise NotFound(f"{member} {obj_id} not found")
        return found[0]


def test_the_kuryr_controllers_port_is_found_by_pod_identity() -> None:
    """The lookup convention (netbay.k8s.podport) as the controller makes ports and the
    daemon finds them: by the derived device id (then kuryr-kubernetes' pod UID), on
    the port's own network; PORT_UUID first; none yet or an older pod's: code 11."""
    from types import SimpleNamespace

    from netbay.k8s import podport
    from netbay.k8s.controller import Controller
    from netbay.plugins.cni.service import Cni

    dev = podport.device_id("c1", "shop", "web")
    assert Controller._device(SimpleNamespace(refs=SimpleNamespace(cluster_id="c1")), "shop", "web") == dev
    shop, other = podport.device_id("c1", "ns", "shop"), podport.device_id("c1", "ns", "other")  # two uuids
    nets = [{"id": shop, "name": "ns/shop"}, {"id": other, "name": "ns/other"}]
    ours = {"id": "p1", "network_id": shop, "device_id": dev, "device_owner": podport.POD_OWNER,
            "tags": podport.with_uid(["netbay-cluster=c1"], "u1")}
    theirs = {"id": "p2", "network_id": other, "device_id": "u2", "device_owner": podport.POD_OWNER}
    given = {"id": "p3", "network_id": other, "device_id": "", "device_owner": ""}
    cni = Cni(PortsOnly(nets, [ours, theirs, given]), None, "h")  # type: ignore[arg-type]

    def find(args: str, **conf: str) -> tuple:
        req = spec.Request.parse({"command": "ADD", "args": args, "config": {"name": "k", "cluster": "c1", **conf}})
        port, net = asyncio.run(cni._given(req))
        return port and port["id"], net["id"]

    try:
        assert find("K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web;K8S_POD_UID=u1") == ("p1", shop)
        assert find("K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web") == ("p1", shop)   # no UID: by name alone
        assert find("K8S_POD_NAMESPACE=other;K8S_POD_NAME=db;K8S_POD_UID=u2") == ("p2", other)
        assert find("K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web;PORT_UUID=p3") == ("p3", other)
        for args in ("K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web;K8S_POD_UID=u9",   # a newer pod of that name
                     "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=nobody"):
            with pytest.raises(CniError) as info:
                find(args)
            assert info.value.code == spec.TRY_AGAIN_LATER, info.value.msg
        # Without pod identity the config's network is needed, as without "cluster".
        assert find("", network="ns/other") == (None, other)
        with pytest.raises(CniError) as info:
            find("")
        assert info.value.code == spec.INVALID_CONFIG
    finally:
        asyncio.run(cni.aclose())


def test_a_dual_stack_clusters_pods_are_told_both_resolver_addresses() -> None:
    """A dual-stack cluster's resolver answers on its IPv6 service address too: the
    result names both, IPv4 first (as kubelet lists a dual-stack ``--cluster-dns``)."""
    from netbay.plugins.cni.service import Cni

    resolver = {"id": "r", "fixed_ips": [{"ip_address": "fd00:96::a"}, {"ip_address": "10.254.0.10"}],
                "tags": ["netbay-cluster=c1", "netbay-k8s=dns"]}
    cni = Cni(PortsOnly([], [resolver]), None, "h")  # type: ignore[arg-type]
    try:
        dns = asyncio.run(cni.cluster_dns(spec.Request.parse({"command": "ADD", "args": "K8S_POD_NAMESPACE=shop",
                                                              "config": {"name": "k", "cluster": "c1"}})))
        assert dns is not None and dns["nameservers"] == ["10.254.0.10", "fd00:96::a"]
    finally:
        asyncio.run(cni.aclose())


def test_a_kuryr_pods_result_carries_the_cluster_dns() -> None:
    """The cluster's resolver (its port's tag), the pod's namespace's search list first;
    no cluster or no resolver yet: None (the subnets' nameservers, as before)."""
    from netbay.plugins.cni.service import Cni

    resolver = {"id": "r", "fixed_ips": [{"ip_address": "10.254.0.10"}], "tags": ["netbay-cluster=c1", "netbay-k8s=dns"]}
    cni = Cni(PortsOnly([], [resolver]), None, "h")  # type: ignore[arg-type]

    def dns(args: str, **conf: str) -> dict | None:
        return asyncio.run(cni.cluster_dns(spec.Request.parse({"command": "ADD", "args": args,
                                                               "config": {"name": "k", **conf}})))
    try:
        assert dns("K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web", cluster="c1") == {
            "nameservers": ["10.254.0.10"], "domain": "cluster.local", "options": ["ndots:5"],
            "search": ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"]}
        assert dns("", cluster="c1")["search"] == ["svc.cluster.local", "cluster.local"]
        assert dns("", cluster="c2") is None and dns("", network="n") is None
    finally:
        asyncio.run(cni.aclose())
    out = result.render("1.0.0", "eth0", "m", 1500, "/x", [("10.0.0.5/24", {"dns_nameservers": ["1.1.1.1"]})], [],
                        {"nameservers": ["10.254.0.10"]})
    assert out["dns"] == {"nameservers": ["10.254.0.10"]}
