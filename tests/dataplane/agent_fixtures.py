"""A real netbay server plus a dataplane agent with this run's namespace prefix.

Used by test_dp_agent.py and test_dp_sandbox.py. The server is ``netbay up
--no-agent`` (tests/conftest.py's start_server) on SQLite; the agent runs
in-process on a thread (or as a subprocess where a test kills it) with a prefix
under the run's ``nbt<hex>-`` so the package's final sweep catches anything left.
Every wait is bounded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from netbay.dataplane import netns
from netbay.dataplane.rtnl import rtnl
from netbay.agent import Agent, Api, Credentials
from netbay.dataplane.names import Names
from conftest import ADMIN_PASSWORD, Server, start_server, stop_server  # tests/conftest.py

from .dp_helpers import PREFIX, ip_version
from tests import zygote


def wait_for(cond: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01, what: str = "") -> Any:
    """Poll ``cond`` until truthy (bounded); returns its value or raises AssertionError."""
    deadline = time.monotonic() + timeout
    value = None
    for _ in range(int(timeout / max(interval, 0.0005)) + 2):
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or cond}")


def sweep_prefix(prefix: str) -> list[str]:
    """Delete every namespace (mounted or not) whose name starts with ``prefix``."""
    found = []
    if os.path.isdir(netns.NETNS_RUN_DIR):
        for name in sorted(os.listdir(netns.NETNS_RUN_DIR)):
            if name.startswith(prefix):
                found.append(name)
                netns.delete(name)
    return found


@dataclass
class InProcessAgent:
    server: Server
    names: Names
    agent: Agent | None = None
    thread: threading.Thread | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)

    def start(self, timeout: float = 20.0) -> Agent:
        creds = Credentials(self.server.auth_url, "admin", ADMIN_PASSWORD, "admin")
        self.stop_event = threading.Event()
        self.agent = Agent(Api(self.server.url, creds.token), self.names, wait=2.0)
        self.thread = threading.Thread(target=self.agent.run, args=(self.stop_event,), daemon=True)
        self.thread.start()
        assert self.agent.ready.wait(timeout), "agent did not finish its first resync"
        return self.agent

    def resync_now(self, timeout: float = 20.0) -> None:
        """A full resync (the realizers' and the sweep's), by the agent's own loop: at its
        next step (within the long poll's ``wait``), as after a realizer's failure."""
        agent = self.agent
        assert agent is not None
        done = agent.stats["resyncs"]
        agent._resync_due = time.monotonic()
        wait_for(lambda: agent.stats["resyncs"] > done, timeout, 0.05, "the agent's resync")

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=15)
            assert not self.thread.is_alive(), "agent thread did not stop"
        if self.agent is not None:
            self.agent.api.close()


@dataclass
class Cloud:
    """The server, an admin HTTP client for it and the agent's names."""
    server: Server
    http: httpx.Client
    names: Names
    agent: InProcessAgent

    # -- requests ----------------------------------------------------------------------
    def ok(self, r: httpx.Response, status: int = 200) -> Any:
        assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.status_code} {r.text}"
        return r.json() if r.content else None

    def network(self, name: str, cidr: str, *, mtu: int | None = None, **subnet: Any) -> tuple[dict, dict]:
        body: dict[str, Any] = {"name": name}
        if mtu:
            body["mtu"] = mtu
        net = self.ok(self.http.post("/network/v2.0/networks", json={"network": body}), 201)["network"]
        sub = self.ok(self.http.post("/network/v2.0/subnets", json={"subnet": {
            "network_id": net["id"], "cidr": cidr, "ip_version": 4, **subnet}}), 201)["subnet"]
        return net, sub

    def subnet6(self, network_id: str, cidr: str, **subnet: Any) -> dict:
        """An IPv6 subnet on ``network_id`` (with :meth:`network`'s IPv4 one: dual-stack)."""
        return self.ok(self.http.post("/network/v2.0/subnets", json={"subnet": {
            "network_id": network_id, "cidr": cidr, "ip_version": 6, **subnet}}), 201)["subnet"]

    def network6(self, name: str, cidr: str, **subnet: Any) -> tuple[dict, dict]:
        """A network with one IPv6 subnet and no IPv4 one."""
        net = self.ok(self.http.post("/network/v2.0/networks", json={"network": {"name": name}}), 201)["network"]
        return net, self.subnet6(net["id"], cidr, **subnet)

    def sandbox(self, name: str, *, networks: list[str] | None = None, ports: list[str] | None = None) -> dict:
        body: dict[str, Any] = {"name": name}
        if networks is not None:
            body["networks"] = networks
        if ports is not None:
            body["ports"] = ports
        return self.ok(self.http.post("/netbay/v1/sandboxes", json={"sandbox": body}), 201)["sandbox"]

    def port(self, port_id: str) -> dict:
        return self.ok(self.http.get(f"/network/v2.0/ports/{port_id}"))["port"]

    def ip_of(self, port_id: str, version: int | None = None) -> str:
        """The port's first fixed IP (of IP ``version`` if given)."""
        return next(f["ip_address"] for f in self.port(port_id)["fixed_ips"]
                    if version is None or ip_version(f["ip_address"]) == version)

    def delete_sandbox(self, sandbox_id: str) -> None:
        self.ok(self.http.delete(f"/netbay/v1/sandboxes/{sandbox_id}"), 204)

    def wait_status(self, path: str, status: str, timeout: float = 15.0) -> dict:
        """``path`` like ``/network/v2.0/ports/<id>``; returns the member once it has ``status``."""
        def check() -> dict | None:
            body = self.ok(self.http.get(path))
            member = next(iter(body.values()))
            return member if member.get("status") == status else None
        return wait_for(check, timeout, 0.02, f"{path} to be {status}")

    # -- the kernel --------------------------------------------------------------------
    def sandbox_ns(self, sandbox_id: str) -> str:
        return self.names.sandbox(sandbox_id)

    def taps(self) -> list[str]:
        """Port veths in the fabric (raw rtnetlink: cheap enough to poll every millisecond)."""
        if not netns.exists(self.names.fabric):
            return []
        return sorted(lk.ifname for lk in rtnl(self.names.fabric).links()
                      if lk.kind == "veth" and lk.ifname.startswith("tap"))

    def namespaces(self) -> list[str]:
        if not os.path.isdir(netns.NETNS_RUN_DIR):
            return []
        return sorted(n for n in os.listdir(netns.NETNS_RUN_DIR) if n.startswith(self.names.prefix))


def make_cloud(tmp: Path, tag: str) -> Iterator[Cloud]:
    """Start server + agent; yield; stop both (the agent's processes too, as a stopped
    ``netbay agent`` does) and sweep the prefix (also on failure)."""
    prefix = f"{PREFIX}{tag}-"
    names = Names(prefix)
    server = start_server(f"sqlite:///{tmp / 'netbay.db'}", tmp)
    runner = InProcessAgent(server, names)
    try:
        http = httpx.Client(base_url=server.url, headers={"X-Auth-Token": server.token()}, timeout=30)
        server._clients.append(http)
        runner.start()
        yield Cloud(server, http, names, runner)
    finally:
        try:
            runner.stop()
            if runner.agent is not None:   # its haproxy and resolver processes, their files in /run/netbay
                runner.agent.release()
        finally:
            stop_server(server)
            sweep_prefix(prefix)


def agent_subprocess(server: Server, prefix: str, log: Path) -> subprocess.Popen:
    """``netbay agent`` as a child process (killed by the caller, by PID)."""
    env = {**os.environ, "OS_AUTH_URL": server.auth_url, "OS_USERNAME": "admin",
           "OS_PASSWORD": ADMIN_PASSWORD, "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default",
           "OS_PROJECT_DOMAIN_NAME": "Default", "NETBAY_LOG_LEVEL": "WARNING"}
    return zygote.popen([sys.executable, "-m", "netbay.cli.main", "agent", "--url", server.url,
                         "--prefix", prefix, "--wait", "5"],
                        env=env, stdout=open(log, "a"), stderr=subprocess.STDOUT)
