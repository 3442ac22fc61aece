"""A server a person runs by hand: one agent per namespace prefix, `netbay down` removes
exactly its instance's namespaces, the agent's long polls stay out of the INFO log, and
the masters' stand-ins for kube-apiserver and etcd answer where health monitors look."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ADMIN_PASSWORD, _wait_port, free_port

from netbay.coe.fragments import standins as standin_ports
from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.standin import PORTS, MasterStandIns

from .agent_fixtures import sweep_prefix, wait_for
from .dp_helpers import PREFIX, netbay_up
from tests import zygote


def _netbay(*args: str, env: dict) -> subprocess.CompletedProcess:
    return zygote.run([sys.executable, "-m", "netbay.cli.main", *args], env=env, capture_output=True,
                      text=True, timeout=120)


def test_one_agent_per_prefix_and_down_removes_exactly_its_namespaces(tmp_path: Path) -> None:
    prefix, other = f"{PREFIX}in-", f"{PREFIX}io-"
    env = {**os.environ, "NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD, "NETBAY_LOG_LEVEL": "INFO",
           "NETBAY_RUN_DIR": str(tmp_path / "run")}
    env.pop("NETBAY_AGENT_PREFIX", None)
    port = free_port()
    first = netbay_up(tmp_path / "a", port, prefix, env, tmp_path / "a.log")
    bystander = other + "keep"
    second = None
    try:
        _wait_port(port, 60, first)
        fabric = Names(prefix).fabric
        wait_for(lambda: netns.exists(fabric), 30, what="the first agent's fabric")
        wait_for(lambda: len(netns.list(prefix)) >= 2, 30, what="the outside world wired")
        before = {ns: netns.inode(ns) for ns in netns.list(prefix)}
        netns.create(bystander)  # another instance's namespace: `down` must leave it
        openrc = (tmp_path / "a" / "openrc").read_text()
        assert f"export NETBAY_AGENT_PREFIX='{prefix}'" in openrc

        # A second server on the same prefix (own data dir and port) refuses, naming the holder.
        second = zygote.run(
            [sys.executable, "-m", "netbay.cli.main", "up", "--port", str(free_port()), "--data-dir",
             str(tmp_path / "b"), "--agent", "--agent-prefix", prefix],
            env=env, capture_output=True, text=True, timeout=60)
        said = " ".join((second.stdout + second.stderr).split())
        assert second.returncode != 0, said
        assert f"held by netbay PID {first.pid}" in said and prefix in said, said
        assert "is starting" not in said
        assert not (tmp_path / "b").exists(), "the refused server made its data dir"
        # So does a standalone agent.
        agent = _netbay("agent", "--url", f"http://127.0.0.1:{port}", "--prefix", prefix,
                        "--data-dir", str(tmp_path / "a"), env=env)
        assert agent.returncode != 0 and f"PID {first.pid}" in " ".join(agent.stderr.split()), agent.stderr
        assert {ns: netns.inode(ns) for ns in netns.list(prefix)} == before, "the first one's namespaces changed"
        assert first.poll() is None

        log = (tmp_path / "a.log").read_text()
        assert "/netbay/v1/changes" not in log, "the agent's long polls are logged at INFO"

        down = _netbay("down", "--data-dir", str(tmp_path / "a"), env=env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"stopped netbay PID {first.pid}" in " ".join((down.stdout + down.stderr).split())
        assert first.wait(timeout=5) in (0, -signal.SIGTERM)
        assert netns.list(prefix) == [], down.stdout + down.stderr
        assert netns.exists(bystander)
        again = _netbay("down", "--data-dir", str(tmp_path / "a"), env=env)
        assert again.returncode == 0 and "no netbay is running" in " ".join((again.stdout + again.stderr).split())
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
        sweep_prefix(prefix)
        sweep_prefix(other)


def test_master_standins_answer_on_the_api_and_etcd_ports(tmp_path: Path) -> None:
    ns = f"{PREFIX}sm-master"
    standins = MasterStandIns()
    try:
        netns.create(ns)
        links.set_up(ns, "lo")
        standins.ensure(ns)
        standins.ensure(ns)  # idempotent
        with netns.entered(ns):
            for port in PORTS:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    got = s.recv(300)
                    assert got.startswith(b"HTTP/1.1 200 OK") and b"stand-in for " + PORTS[port].encode() in got
        # A swarm cluster's master with a custom apiserver_port: those ports and no other.
        swarm = standin_ports("swarm", 2400)
        assert swarm == {2376: "swarm manager Docker API", 2379: "etcd", 2400: "swarm manager Docker API"}
        assert standin_ports("mesos") == {5050: "mesos-master", 8080: "Marathon"}
        standins.ensure(ns, swarm)
        assert standins.ports(ns) == {2376, 2379, 2400}
        with netns.entered(ns):
            for port in swarm:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    assert s.recv(300).startswith(b"HTTP/1.1 200 OK")
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", 6443), timeout=2).close()   # closed: not swarm's
        # Nothing in the root namespace listens for them.
        assert ns in standins.listening()
        netns.delete(ns)  # the delete hook closes the sockets (they would pin the namespace)
        assert ns not in standins.listening()
    finally:
        standins.stop()
        netns.delete(ns)
