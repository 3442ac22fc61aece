"""Fixtures for Docker on netbay: the plugin as a child process and helpers to look
at what Docker and netbay made (used by test_dp_docker.py; meant for the container
API's tests too). dockerd itself: :mod:`netbay.runtime.dockerd`.

The module fixtures ``daemon`` (a private dockerd) and ``plugin`` (named ``PLUGIN``, on the
module's shared ``cloud``) are what test_dp_docker.py, test_dp_docker_v6.py and
test_dp_hardening_docker.py import; the container API's modules use their own
(:mod:`.zun_fixtures`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.types import IPAMConfig, IPAMPool

from netbay import unixsock
from netbay.dataplane import netns, veth
from netbay.dataplane.names import Names
from netbay.plugins.libnetwork.server import journal_dir

from conftest import ADMIN_PASSWORD, Server  # tests/conftest.py

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .dp_helpers import RUN_ID, serving
from tests import zygote

PLUGIN = f"nbt{RUN_ID}dk"
MADE = "netbay.docker.made"
GRACE = 3.0   # the plugin's --orphan-grace: short, so tests of its collection wait seconds


def plugin_env(server: Server) -> dict[str, str]:
    return {**os.environ, "OS_AUTH_URL": server.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
            "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
            "NETBAY_LOG_LEVEL": "INFO"}


class Plugin:
    """``netbay libnetwork`` as a child process, stopped (or killed) by PID."""

    def __init__(self, name: str, url: str, prefix: str, env: dict[str, str], log: Path,
                 extra: tuple[str, ...] = ()) -> None:
        self.name, self.url, self.prefix, self.env, self.log = name, url, prefix, env, log
        self.extra = extra
        self.sock = Path(f"/run/docker/plugins/{name}.sock")
        self.proc: subprocess.Popen | None = None

    def start(self) -> Plugin:
        self.proc = zygote.popen(
            [sys.executable, "-m", "netbay.cli.main", "libnetwork", "--name", self.name, "--url", self.url,
             "--prefix", self.prefix, *self.extra], env=self.env, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)  # noqa: SIM115 - the child process writes it while it runs
        # 60 s: on the OVN lab's cloud a restarted plugin first finishes the plugs a kill cut
        # short, through the real Neutron, before it listens; 30 s ran out at a load of 11
        wait_for(lambda: self._listening(), 60, 0.05, f"plugin socket {self.sock}")
        return self

    def _listening(self) -> bool:
        assert self.proc is not None
        return serving(self.sock, self.proc, self.log)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def log_with_stacks(self, tail: int = 12000) -> str:
        """The log's last ``tail`` characters, after the running plugin wrote every thread's
        stack into it (SIGUSR1, :mod:`netbay.cli.daemon`): what a failed wait shows."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
        return self.log.read_text()[-tail:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.sock.is_socket():
            self.sock.unlink()
        unixsock.lock_path(self.sock).unlink(missing_ok=True)   # a killed plugin's (its lock is free)
        calls = journal_dir(self.name)   # a killed plugin's journal (a clean stop removes its own)
        shutil.rmtree(calls, ignore_errors=True)
        with contextlib.suppress(OSError):
            calls.parent.rmdir()         # only if no other plugin's is left there


def docker_network(d: dk.Dockerd, name: str, cidr: str | None = None, *, options: dict | None = None,
                   ipam_options: dict | None = None) -> Any:
    pools = [IPAMPool(subnet=cidr)] if cidr else []
    return d.client.networks.create(name, driver=PLUGIN, options=options or {},
                                    ipam=IPAMConfig(driver=PLUGIN, pool_configs=pools, options=ipam_options or {}))


def netbay_network(cloud: Cloud, docker_net: Any) -> dict:
    found = cloud.ok(cloud.http.get("/network/v2.0/networks",
                                    params={"tags": f"netbay.docker.net:{docker_net.id}"}))["networks"]
    assert len(found) == 1, found
    return found[0]


def run(d: dk.Dockerd, net: str, name: str, command: str = "sleep 600", **kw: Any) -> Any:
    return d.client.containers.run(dk.IMAGE, ["sh", "-c", command], name=name, network=net, detach=True, **kw)


def endpoint_port(cloud: Cloud, container: Any, net: str, timeout: float = 30.0) -> dict:
    """The port of ``container``'s endpoint on ``net``. CreateEndpoint answers Docker before
    the port's binding (device and endpoint tag) lands, so it is waited for (bounded)."""
    container.reload()
    eid = container.attrs["NetworkSettings"]["Networks"][net]["EndpointID"]

    def found() -> list[dict]:
        return (cloud.ok(cloud.http.get("/network/v2.0/ports", params={"device_id": eid}))["ports"]
                or cloud.ok(cloud.http.get("/network/v2.0/ports", params={"tags": f"netbay.docker.ep:{eid}"}))["ports"])
    try:
        ports = wait_for(found, timeout, 0.05, f"the port of endpoint {eid[:12]}")
    except AssertionError:
        ports = found()
    assert len(ports) == 1, (eid, ports)
    return ports[0]


def sh(container: Any, command: str) -> tuple[int, str]:
    code, out = container.exec_run(["sh", "-c", command])
    return code, out.decode(errors="replace")


def iface(container: Any, name: str = "eth0") -> tuple[str, list[str]]:
    """(MAC, IPv4 addresses with prefix) of ``name`` inside the container."""
    # Asked up to three times: a whole run at load 9 once got exit 0 and no link line (cause
    # not found); what came back is the failure's message.
    for _ in range(3):
        code, out = sh(container, f"ip -o link show {name}; ip -o -4 addr show {name}")
        if code == 0 and "link/ether" in out:
            break
        time.sleep(0.5)
    assert code == 0 and "link/ether" in out, (code, out)
    mac = out.split("link/ether", 1)[1].split()[0]
    addrs = [w[i + 1] for w in [ln.split() for ln in out.splitlines()] for i, x in enumerate(w) if x == "inet"]
    return mac, addrs


def made_ports(cloud: Cloud) -> list[dict]:
    """Ports the plugin made (and must delete)."""
    return cloud.ok(cloud.http.get("/network/v2.0/ports", params={"tags": MADE}))["ports"]


def host_container_ends(ports: Collection[str] | None = None) -> list[str]:
    """Container ends (``nbc…``) in the host namespace; only ``ports``' when given. Other
    workers' Docker tests share the host namespace, so a test asserting that none of its
    own is left names its ports (:func:`ports_made_since`)."""
    ends = sorted(veth.host_ends("nbc"))   # any netbay's (Attacher.host_ends: one fabric's)
    if ports is None:
        return ends
    mine = {Names.container_end(p) for p in ports}
    return [e for e in ends if e in mine]


def feed_head(cloud: Cloud) -> int:
    """The cloud's change feed's head revision (for :func:`ports_made_since`)."""
    return cloud.ok(cloud.http.get("/netbay/v1/changes", params={"since": 2**31 - 1}))["revision"]


def ports_made_since(cloud: Cloud, revision: int) -> set[str]:
    """Every port created on ``cloud`` after ``revision``, deleted ones too (the change feed)."""
    made: set[str] = set()
    for _ in range(1000):
        page = cloud.ok(cloud.http.get("/netbay/v1/changes", params={"since": revision}))
        made |= {c["id"] for c in page["changes"] if c["resource"] == "port" and c["action"] == "create"}
        if not page["changes"]:
            return made
        revision = page["revision"]
    raise AssertionError("the change feed did not end within 1000 pages")


def tcp_read(ns: str, host: str, port: int, timeout: float = 5.0) -> bytes:
    """Connect from inside ``ns`` and read until the peer closes (bounded)."""
    with netns.entered(ns):
        s = socket.create_connection((host, port), timeout=timeout)
    with s:
        data = b""
        for _ in range(100):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


# --- the module fixtures ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon() -> Iterator[dk.Dockerd]:
    yield from dk.running()


@pytest.fixture(scope="module")
def plugin(cloud: Cloud, daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    p = Plugin(PLUGIN, cloud.server.url, cloud.names.prefix, plugin_env(cloud.server),
               tmp_path_factory.mktemp("plugin") / "plugin.log",
               ("--docker-host", daemon.host, "--orphan-grace", str(GRACE)))
    p.start()
    try:
        yield p
    finally:
        p.stop()
