"""Port mirroring with real packets (issue 13, item 1).

A real server and agent; the tap service and flows are made with the real
``openstack tap …`` CLI (python-openstackclient and neutronclient's TaaS plugin, run in
the test's process: tests/osc.py); ``netbay tap capture`` plugs the tap service's port into a
sandbox and runs tcpdump there; the pcap it writes is read back here. A sandbox
``src`` pings and opens TCP connections to a sandbox ``peer``; the capture must see
both halves with ``BOTH``, only what ``src`` sends with ``OUT``, only what it
receives with ``IN``, and nothing once the flow is deleted.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ADMIN_PASSWORD
from oschelp import osc_as, osc_json

from netbay.dataplane import links, netns, probe
from netbay.dataplane.mirror import mirrors_of

from .agent_fixtures import Cloud, wait_for
from .sg_lab import tcp
from tests import zygote

ICMP, TCP = 1, 6
ECHO_REQUEST, ECHO_REPLY = 8, 0
SYN, ACK = 0x02, 0x10


CLOUD_TAG = "tp"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def _env(cloud: Cloud) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=cloud.server.auth_url, OS_USERNAME="admin", OS_PASSWORD=ADMIN_PASSWORD,
               OS_PROJECT_NAME="admin", OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default",
               OS_IDENTITY_API_VERSION="3", NETBAY_AGENT_PREFIX=cloud.names.prefix)
    return env


def _osc(cloud: Cloud, *args: str) -> dict:
    """``openstack ARGS -f json`` as the admin (the CLI in this process: tests/osc.py)."""
    found = osc_json(cloud.server, *args)
    assert isinstance(found, dict)
    return found


class Lab:
    """src and peer sandboxes on one network, and a tap service on a port of its own."""

    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        net, _ = cloud.network("taas-net", "10.61.0.0/24")
        self.src = cloud.sandbox("taas-src", networks=[net["id"]])
        self.peer = cloud.sandbox("taas-peer", networks=[net["id"]])
        for sb in (self.src, self.peer):
            cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        self.src_port = self.src["ports"][0]["port_id"]
        self.src_ip, self.peer_ip = cloud.ip_of(self.src_port), cloud.ip_of(self.peer["ports"][0]["port_id"])
        tap_port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
            "network_id": net["id"], "name": "taas-tap-port", "port_security_enabled": False}}), 201)["port"]
        self.service = _osc(cloud, "tap", "service", "create", "--name", "taas-ts", "--port", tap_port["id"])

    def flow(self, direction: str) -> dict:
        return _osc(self.cloud, "tap", "flow", "create", "--port", self.src_port, "--tap-service", "taas-ts",
                    "--direction", direction)

    @contextlib.contextmanager
    def holder(self) -> Iterator[dict]:
        """The tap service's port plugged into a sandbox of the user's while inside."""
        holder = self.cloud.sandbox("taas-holder", ports=[self.service["port_id"]])
        try:
            self.cloud.wait_status(f"/netbay/v1/sandboxes/{holder['id']}", "ACTIVE")
            yield holder
        finally:
            self.cloud.delete_sandbox(holder["id"])

    def delete_flow(self, flow: dict) -> None:
        r = osc_as(self.cloud.server, "tap", "flow", "delete", flow["id"])
        assert r.returncode == 0, r.stderr

    def traffic(self) -> None:
        src_ns, peer_ns = self.cloud.sandbox_ns(self.src["id"]), self.cloud.sandbox_ns(self.peer["id"])
        assert probe.ping(src_ns, self.peer_ip, timeout=2.0, count=2)
        assert tcp(src_ns, peer_ns, self.peer_ip, 8080, timeout=3.0)

    def _wait_mirrored_into_capture(self) -> None:
        """Until the source's mirrors point at the tap service port's veth as the capture
        plugged it. A flow may read ACTIVE already from the previous capture's veth (its
        sandbox still being taken down): the agent restates the mirror when the port is
        rewired, shortly after, and traffic sent before that is not copied anywhere."""
        fabric = self.cloud.names.fabric
        source, target = "tap" + self.src_port[:11], "tap" + self.service["port_id"][:11]

        def mirrored() -> bool:
            index = links.get_link(fabric, target)
            found = mirrors_of(fabric, source)
            return index is not None and bool(found) and all(i == index.index for i in found)

        wait_for(mirrored, 15, interval=0.05, what="the mirrors into the capture's port")

    def capture(self, tmp: Path, flow: dict | None) -> list[tuple[str, str, int, int]]:
        """Run ``netbay tap capture`` while ``traffic`` flows; the packets it wrote."""
        pcap = tmp / f"cap-{time.monotonic_ns()}.pcap"
        cmd = [sys.executable, "-m", "netbay.cli.main", "tap", "capture", "--tap-service", "taas-ts",
               "--write", str(pcap), "--seconds", "8", "--url", self.cloud.server.url]
        log = tmp / f"cap-{time.monotonic_ns()}.log"
        proc = zygote.popen(cmd, env=_env(self.cloud), stdout=log, stderr=subprocess.STDOUT)

        def said() -> str:
            return log.read_text() if log.exists() else ""

        try:   # tcpdump says "listening on eth0 …" once it captures
            wait_for(lambda: "listening on" in said() or proc.poll() is not None, 30, interval=0.05,
                     what="the capture to start")
            assert "listening on" in said(), f"capture did not start: {said()}"
            if flow is not None:
                self.cloud.wait_status(f"/network/v2.0/taas/tap_flows/{flow['id']}", "ACTIVE")
                self._wait_mirrored_into_capture()
            self.traffic()
            assert proc.wait(timeout=30) == 0, said()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return read_pcap(pcap)


def read_pcap(path: Path) -> list[tuple[str, str, int, int]]:
    """(src, dst, protocol, ICMP type or TCP flags) of every IPv4 packet in a pcap file."""
    data = path.read_bytes()
    magic, = struct.unpack_from("<I", data)
    assert magic == 0xA1B2C3D4, hex(magic)   # microsecond pcap, little-endian, as tcpdump writes
    linktype, = struct.unpack_from("<I", data, 20)
    assert linktype == 1   # Ethernet
    out, off = [], 24
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from("<IIII", data, off)
        frame = data[off + 16: off + 16 + caplen]
        off += 16 + caplen
        if len(frame) < 34 or frame[12:14] != b"\x08\x00":
            continue
        ihl = (frame[14] & 0x0F) * 4
        proto = frame[23]
        src, dst = socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34])
        l4 = frame[14 + ihl:]
        detail = l4[0] if proto == ICMP else (l4[13] if proto == TCP and len(l4) > 13 else -1)
        out.append((src, dst, proto, detail))
    return out


@pytest.fixture(scope="module")
def lab(cloud: Cloud) -> Lab:
    return Lab(cloud)


def _seen(packets: list[tuple[str, str, int, int]], lab: Lab) -> dict[str, bool]:
    s, p = lab.src_ip, lab.peer_ip
    return {
        "echo request": (s, p, ICMP, ECHO_REQUEST) in packets,
        "echo reply": (p, s, ICMP, ECHO_REPLY) in packets,
        "syn": any(x[:3] == (s, p, TCP) and x[3] & SYN and not x[3] & ACK for x in packets),
        "syn-ack": any(x[:3] == (p, s, TCP) and x[3] & SYN and x[3] & ACK for x in packets),
    }


def test_both_directions_are_captured(lab: Lab, tmp_path: Path) -> None:
    flow = lab.flow("BOTH")
    try:
        seen = _seen(lab.capture(tmp_path, flow), lab)
        assert all(seen.values()), seen
    finally:
        lab.delete_flow(flow)


@pytest.mark.parametrize("direction", ["IN", "OUT"])
def test_one_direction_sees_only_its_half(lab: Lab, tmp_path: Path, direction: str) -> None:
    flow = lab.flow(direction)
    try:
        seen = _seen(lab.capture(tmp_path, flow), lab)
        sent, received = seen["echo request"] and seen["syn"], seen["echo reply"] and seen["syn-ack"]
        sent_any, received_any = seen["echo request"] or seen["syn"], seen["echo reply"] or seen["syn-ack"]
        if direction == "OUT":
            assert sent and not received_any, seen
        else:
            assert received and not sent_any, seen
    finally:
        lab.delete_flow(flow)


def test_deleting_the_flow_stops_the_copies(lab: Lab, cloud: Cloud, tmp_path: Path) -> None:
    # This time the tap service's port is held by a sandbox of the user's: the capture uses it.
    with lab.holder() as holder:
        flow = lab.flow("BOTH")
        fabric, tap = cloud.names.fabric, "tap" + lab.src_port[:11]
        target = links.index(fabric, "tap" + lab.service["port_id"][:11])
        wait_for(lambda: mirrors_of(fabric, tap) == [target, target], 15,   # ingress and egress
                 what="the mirrors of the flow")
        cloud.wait_status(f"/network/v2.0/taas/tap_flows/{flow['id']}", "ACTIVE")
        cloud.wait_status(f"/network/v2.0/taas/tap_services/{lab.service['id']}", "ACTIVE")
        lab.delete_flow(flow)
        wait_for(lambda: not mirrors_of(fabric, tap), 15, what="the mirrors to go")
        seen = _seen(lab.capture(tmp_path, None), lab)
        assert not any(seen.values()), seen
        assert cloud.ok(cloud.http.get(f"/netbay/v1/sandboxes/{holder['id']}"))["sandbox"]["status"] == "ACTIVE"


def test_deleting_the_source_port_removes_its_flows(lab: Lab, cloud: Cloud) -> None:
    net_id = cloud.port(lab.src_port)["network_id"]
    extra = cloud.sandbox("taas-extra", networks=[net_id])
    cloud.wait_status(f"/netbay/v1/sandboxes/{extra['id']}", "ACTIVE")
    port = extra["ports"][0]["port_id"]
    flow = _osc(cloud, "tap", "flow", "create", "--port", port, "--tap-service", "taas-ts", "--direction", "IN")
    tap = "tap" + port[:11]
    with lab.holder():
        wait_for(lambda: mirrors_of(cloud.names.fabric, tap), 15, what="the mirror")
        cloud.delete_sandbox(extra["id"])
    assert cloud.http.get(f"/network/v2.0/taas/tap_flows/{flow['id']}").status_code == 404
    assert cloud.agent.agent is not None
    wait_for(lambda: flow["id"] not in cloud.agent.agent.state.table("tap_flows"), 15, what="the agent to forget")


def test_a_restarted_agent_restates_and_sweeps_mirrors(lab: Lab, cloud: Cloud) -> None:
    fabric, tap = cloud.names.fabric, "tap" + lab.src_port[:11]
    with lab.holder():
        target = links.index(fabric, "tap" + lab.service["port_id"][:11])
        flow = lab.flow("OUT")
        wait_for(lambda: mirrors_of(fabric, tap) == [target], 15, what="the mirror")
        cloud.agent.stop()
        cloud.agent.start()   # a full resync: the mirror is restated, not doubled
        assert mirrors_of(fabric, tap) == [target]
        cloud.agent.stop()
        lab.delete_flow(flow)   # while no agent runs
        assert mirrors_of(fabric, tap) == [target]
        cloud.agent.start()
        assert mirrors_of(fabric, tap) == []


def test_deleting_the_tap_service_port_removes_the_mirrors(lab: Lab, cloud: Cloud) -> None:
    net_id = cloud.port(lab.src_port)["network_id"]
    holder = cloud.sandbox("taas-holder2", networks=[net_id])   # its port goes with it
    cloud.wait_status(f"/netbay/v1/sandboxes/{holder['id']}", "ACTIVE")
    port = holder["ports"][0]["port_id"]
    service = _osc(cloud, "tap", "service", "create", "--name", "taas-ts2", "--port", port)
    flow = _osc(cloud, "tap", "flow", "create", "--port", lab.src_port, "--tap-service", service["id"],
                "--direction", "IN")
    fabric, tap = cloud.names.fabric, "tap" + lab.src_port[:11]
    wait_for(lambda: mirrors_of(fabric, tap) == [links.index(fabric, "tap" + port[:11])], 15, what="the mirror")
    cloud.delete_sandbox(holder["id"])
    wait_for(lambda: not mirrors_of(fabric, tap), 15, what="the mirror to go")
    for path in (f"tap_services/{service['id']}", f"tap_flows/{flow['id']}"):
        assert cloud.http.get(f"/network/v2.0/taas/{path}").status_code == 404


def _bind_and_capture_both(lab: Lab, cloud: Cloud, tmp_path: Path, port: dict, ns: str, tcp_port: int) -> None:
    """Bind ``port`` (wired into namespace ``ns``) to the agent's host, mirror it with a
    ``BOTH`` flow, and check the capture sees both halves of its ICMP and TCP to ``peer``."""
    host = cloud.ok(cloud.http.get(f"/netbay/v1/sandboxes/{lab.src['id']}"))["sandbox"]["host"]
    cloud.ok(cloud.http.put(f"/network/v2.0/ports/{port['id']}", json={"port": {"binding:host_id": host}}))
    cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
    flow = _osc(cloud, "tap", "flow", "create", "--port", port["id"], "--tap-service", "taas-ts",
                "--direction", "BOTH")
    source = Lab.__new__(Lab)   # the same capture, with this port as the source
    source.cloud, source.service, source.src_port = cloud, lab.service, port["id"]
    source.src_ip, source.peer_ip = port["fixed_ips"][0]["ip_address"], lab.peer_ip

    def traffic() -> None:
        assert probe.ping(ns, lab.peer_ip, timeout=2.0, count=2)
        assert tcp(ns, cloud.sandbox_ns(lab.peer["id"]), lab.peer_ip, tcp_port, timeout=3.0)

    source.traffic = traffic   # type: ignore[method-assign]
    try:
        seen = _seen(source.capture(tmp_path, flow), source)
        assert all(seen.values()), seen
    finally:
        lab.delete_flow(flow)


def test_a_container_port_is_mirrored(lab: Lab, cloud: Cloud, tmp_path: Path) -> None:
    """A container's port, plugged by the runtime's real attach step (``Attacher.plug``);
    the container is a stand-in: a namespace the inner end is moved into at once, as
    Docker's Join does (no dockerd needed for the fabric side this test is about)."""
    from pyroute2 import IPRoute

    from netbay.runtime.attach import Attacher, Plug

    net_id = cloud.port(lab.src_port)["network_id"]
    port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": net_id, "device_owner": "compute:netbay",
        "device_id": "c0ffee00-0000-4000-8000-0000000000aa"}}), 201)["port"]
    ns = f"{cloud.names.prefix}ct-standin"
    netns.create(ns)
    try:
        inner = Attacher(cloud.names).plug(Plug(port["id"], net_id, port["mac_address"]))
        fd = os.open(netns.path(ns), os.O_RDONLY)
        try:
            with IPRoute() as ipr:   # at once out of the host namespace, as the runtime does
                ipr.link("set", index=ipr.link_lookup(ifname=inner)[0], net_ns_fd=fd)
        finally:
            os.close(fd)
        links.set_up(ns, "lo")
        links.add_address(ns, inner, port["fixed_ips"][0]["ip_address"] + "/24")
        links.set_up(ns, inner)
        _bind_and_capture_both(lab, cloud, tmp_path, port, ns, 8081)
    finally:
        netns.delete(ns)
        cloud.http.delete(f"/network/v2.0/ports/{port['id']}")


def test_a_kuryr_pod_port_is_mirrored(lab: Lab, cloud: Cloud, tmp_path: Path) -> None:
    """A pod of a kuryr cluster is a port (``compute:kuryr``) wired by the Kubernetes
    mapping's own step (``netbay.k8s.sandbox.PodSandboxes.plug``): mirrored like any port.
    (A flannel or calico pod has no port of its own: its node's port is what can be mirrored.)"""
    from netbay.k8s.sandbox import PodSandboxes, pod_port

    net_id = cloud.port(lab.src_port)["network_id"]
    port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": net_id, "device_owner": "compute:kuryr", "name": "default/web-0",
        "device_id": "c0ffee00-0000-4000-8000-0000000000bb"}}), 201)["port"]
    subnet = cloud.ok(cloud.http.get(f"/network/v2.0/subnets/{port['fixed_ips'][0]['subnet_id']}"))["subnet"]
    pods = PodSandboxes(cloud.names)
    try:
        ns = pods.plug(pod_port(port, subnet))
        _bind_and_capture_both(lab, cloud, tmp_path, port, ns, 8082)
    finally:
        pods.unplug(port["id"])
        cloud.http.delete(f"/network/v2.0/ports/{port['id']}")
