"""Nothing left behind (issue 30): the processes netbay starts for a cluster or a load
balancer — cluster resolvers, haproxy — stop when their object is deleted and when the
agent or server that ran them is stopped (SIGTERM), with no manual sweep; after a
SIGKILL the next agent adopts those still wanted and reaps the rest, and ``netbay
down`` stops what a killed server left. Real processes throughout (the resolver
answers DNS, haproxy listens); ``/run/netbay`` is left as found.

One server for the module (tag ``lo``); the tests that signal an agent run it as a
subprocess (``netbay agent``) or run ``netbay up`` itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ADMIN_PASSWORD, _wait_port, free_port
from dnslib import RCODE, DNSRecord

from netbay.dataplane import links, netns
from netbay.dataplane.fabric import KURYR_POD
from netbay.dataplane.lb.process import Haproxy, state_dir
from netbay.k8s.dns.process import Process, namespace, state_root

from .agent_fixtures import Cloud, agent_subprocess, make_cloud, sweep_prefix, wait_for
from .dp_helpers import PREFIX, netbay_up
from tests import zygote

LB = "/load-balancer/v2/lbaas"
RUN = Path(os.environ.get("NETBAY_STATE_DIR", "/run/netbay"))


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    yield from make_cloud(tmp_path_factory.mktemp("leftovers"), "lo")


@pytest.fixture(scope="module")
def subnet(cloud: Cloud) -> dict:
    return cloud.network("lo-net", "10.62.0.0/24")[1]


def ours(prefix: str) -> list[str]:
    """What the run directory holds of this prefix (haproxy's, the resolvers', locks)."""
    return sorted(p.name for p in RUN.iterdir() if p.name.startswith(prefix)) if RUN.is_dir() else []


def resolver_port(cloud: Cloud, subnet: dict, name: str) -> dict:
    return cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": subnet["network_id"], "name": name, "device_owner": KURYR_POD}}), 201)["port"]


def start_resolver(prefix: str, port_id: str) -> Process:
    """A resolver as the controller starts it (detached, its own namespace), answering on
    the namespace's loopback: it needs no cluster to be a real one."""
    ns = namespace(prefix, port_id)
    netns.create(ns)
    links.set_up(ns, "lo")
    process = Process(state_root(prefix), port_id, ns)
    process.start("127.0.0.1")
    with netns.entered(ns):
        reply = DNSRecord.parse(DNSRecord.question("nothing.cluster.local", "A").send("127.0.0.1", 53, timeout=2))
    assert reply.header.rcode == RCODE.NXDOMAIN
    return process


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def haproxy_lb(cloud: Cloud, subnet: dict, name: str) -> str:
    lb = cloud.ok(cloud.http.post(f"{LB}/loadbalancers", json={"loadbalancer": {
        "name": name, "vip_subnet_id": subnet["id"], "provider": "haproxy",
        "listeners": [{"protocol": "TCP", "protocol_port": 80,
                       "default_pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}]}}), 201)
    return lb["loadbalancer"]["id"]


def master(prefix: str, lb_id: str) -> int | None:
    return Haproxy(state_dir(prefix)).master(lb_id)


def test_a_resolver_goes_with_its_port(cloud: Cloud, subnet: dict) -> None:
    prefix = cloud.names.prefix
    port = resolver_port(cloud, subnet, "dns-a")
    process = start_resolver(prefix, port["id"])
    pid = process.pid()
    try:
        cloud.ok(cloud.http.delete(f"/network/v2.0/ports/{port['id']}"), 204)
        assert wait_for(lambda: gone(pid) and not netns.exists(process.ns) and not process.dir.exists(), 15, 0.05,
                        what="the agent to reap the resolver of the deleted port")
        assert f"{prefix}k8s-dns" not in ours(prefix)
    finally:
        process.remove()


def test_sigterm_stops_the_agents_processes_and_after_sigkill_the_next_adopts_or_reaps(
        cloud: Cloud, subnet: dict, tmp_path: Path) -> None:
    prefix, http = cloud.names.prefix, cloud.http
    before = ours(prefix)
    cloud.agent.stop()   # the in-process agent: this test's agent is a `netbay agent` process
    proc = agent_subprocess(cloud.server, prefix, tmp_path / "agent.log")
    made: list[Process] = []
    lb_id = None
    try:
        lb_id = haproxy_lb(cloud, subnet, "lo-lb")
        assert wait_for(lambda: master(prefix, lb_id), 30, 0.05, what="haproxy started by the agent")
        first = master(prefix, lb_id)
        p1 = resolver_port(cloud, subnet, "dns-1")
        made.append(start_resolver(prefix, p1["id"]))
        pid1 = made[0].pid()

        # SIGTERM: the agent's haproxy and the host's resolvers of its prefix stop, files too.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "agent.log").read_text()
        assert gone(first) and gone(pid1)
        assert not state_dir(prefix).exists() and not state_root(prefix).exists(), ours(prefix)

        # A new agent starts haproxy again; two resolvers; then SIGKILL: they run on.
        proc = agent_subprocess(cloud.server, prefix, tmp_path / "agent.log")
        assert wait_for(lambda: master(prefix, lb_id), 30, 0.05, what="haproxy started again")
        second = master(prefix, lb_id)
        p2, p3 = resolver_port(cloud, subnet, "dns-2"), resolver_port(cloud, subnet, "dns-3")
        made += [start_resolver(prefix, p2["id"]), start_resolver(prefix, p3["id"])]
        pid2, pid3 = made[1].pid(), made[2].pid()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert not gone(second) and not gone(pid2) and not gone(pid3)

        # While no agent runs, a resolver's port goes. The next agent reaps that one and
        # adopts the rest: the same processes, untouched.
        cloud.ok(http.delete(f"/network/v2.0/ports/{p2['id']}"), 204)
        proc = agent_subprocess(cloud.server, prefix, tmp_path / "agent.log")
        assert wait_for(lambda: gone(pid2) and not netns.exists(made[1].ns), 30, 0.05,
                        what="the orphaned resolver reaped by the next agent")
        assert not gone(pid3) and made[2].pid() == pid3
        assert master(prefix, lb_id) == second

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "agent.log").read_text()
        assert gone(second) and gone(pid3)
        assert ours(prefix) == before, ours(prefix)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for process in made:
            process.remove()
        if lb_id is not None:
            http.delete(f"{LB}/loadbalancers/{lb_id}", params={"cascade": "true"})
        cloud.agent.start()


def _netbay(*args: str, env: dict) -> subprocess.CompletedProcess:
    return zygote.run([sys.executable, "-m", "netbay.cli.main", *args], env=env, capture_output=True,
                      text=True, timeout=120)


def test_netbay_up_stops_its_processes_at_sigterm_and_down_stops_what_a_killed_one_left(tmp_path: Path) -> None:
    prefix = f"{PREFIX}lu-"
    env = {**os.environ, "NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD, "NETBAY_RUN_DIR": str(tmp_path / "run")}
    env.pop("NETBAY_AGENT_PREFIX", None)
    before = ours(prefix)
    server = None
    made: list[Process] = []

    def up() -> subprocess.Popen:
        port = free_port()
        proc = netbay_up(tmp_path / "data", port, prefix, env, tmp_path / "up.log")
        _wait_port(port, 60, proc)
        wait_for(lambda: netns.exists(f"{prefix}fabric"), 30, what="the agent's first resync")
        return proc

    try:
        server = up()
        made.append(start_resolver(prefix, "r-term"))   # on this host with the agent's prefix
        pid = made[-1].pid()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) in (0, -signal.SIGTERM), (tmp_path / "up.log").read_text()
        assert gone(pid) and not state_root(prefix).exists()

        server = up()
        made.append(start_resolver(prefix, "r-kill"))
        pid = made[-1].pid()
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        assert not gone(pid)
        down = _netbay("down", "--data-dir", str(tmp_path / "data"), env=env)
        said = " ".join((down.stdout + down.stderr).split())
        assert down.returncode == 0 and "stopped 1 processes it left" in said, said
        assert gone(pid) and netns.list(prefix) == []
        assert ours(prefix) == before, ours(prefix)
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(timeout=10)
        for process in made:
            process.remove()
        sweep_prefix(prefix)
