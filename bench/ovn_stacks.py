"""The two stacks bench/ovn_vs_embedded.py puts side by side, and their children.

* :func:`cloud_on_ovn` — the tests' OVN lab (tests/ovn/lab.py) and Keystone + Neutron
  with ML2/OVN on it (tests/ovn/neutron_ovn.py, on a throwaway PostgreSQL), through the
  lab's public API only; a clouds.yaml naming it ``ovn`` for netbay's processes.
* :func:`embedded_env` — the credentials of a ``netbay up`` (bench/harness.py) for them.
* :class:`Pods` — pod namespaces ADDed and DELed through a CNI daemon as a runtime
  calls it (fork + exec of the launcher), each call timed.
* :class:`Children` — every child process, daemon and dockerd, stopped by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
from docker_run import stop

from netbay import unixsock
from netbay.dataplane import netns
from netbay.plugins.libnetwork.server import journal_dir
from netbay.runtime import dockerd
from tests.dataplane.cni_fixtures import Daemon, invoke, netbay_conf
from tests.ovn.guards import stop_lab
from tests.ovn.lab import OvnLab
from tests.ovn.neutron_ovn import ovn_neutron


def stop_plugin(proc: subprocess.Popen, name: str) -> None:
    """Stop a ``netbay libnetwork`` by PID and remove what a killed one would leave."""
    stop(proc)
    sock = Path(f"/run/docker/plugins/{name}.sock")
    sock.unlink(missing_ok=True)
    unixsock.lock_path(sock).unlink(missing_ok=True)
    shutil.rmtree(journal_dir(name), ignore_errors=True)


class Pods:
    """Pod namespaces ADDed through one CNI daemon; :meth:`delete_all` DELs and removes them."""

    def __init__(self, plugin: Path, daemon: Daemon, network: str, prefix: str) -> None:
        self.plugin, self.daemon, self.network, self.prefix = plugin, daemon, network, prefix
        self.live: dict[str, str] = {}   # container id -> namespace

    def conf(self) -> dict:
        return netbay_conf("benchnet", self.network, self.daemon.sock)

    def call(self, verb: str, cid: str) -> tuple[float, Any]:
        """(seconds from fork to exit, the result) of one call, as a runtime makes it."""
        t0 = time.perf_counter()
        r = invoke(self.plugin, verb, self.conf(), container=cid, netns=netns.path(self.live[cid]),
                   args=f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid}")
        took = time.perf_counter() - t0
        if r.rc != 0:
            raise SystemExit(f"CNI {verb} {cid}: {r.out} {r.err}\n{self.daemon.log.read_text()[-2000:]}")
        return took, r.json

    def add(self, cid: str) -> tuple[float, str]:
        """(seconds of the ADD, the pod's IPv4 address) for a fresh namespace."""
        self.live[cid] = f"{self.prefix}{cid}"
        netns.create(self.live[cid])
        took, result = self.call("ADD", cid)
        return took, result["ips"][0]["address"].split("/")[0]

    def delete(self, cid: str) -> float:
        took, _ = self.call("DEL", cid)
        netns.delete(self.live.pop(cid))
        return took

    def delete_all(self) -> None:
        for cid in list(self.live):
            with contextlib.suppress(BaseException):
                self.delete(cid)
            if cid in self.live and netns.exists(self.live[cid]):
                netns.delete(self.live.pop(cid))


@contextlib.contextmanager
def cloud_on_ovn(work: Path, out: dict) -> Iterator[tuple[OvnLab, Any, dict[str, str]]]:
    """The lab, Neutron ML2/OVN on it and a clouds.yaml for netbay's processes; all stopped by PID."""
    lab = OvnLab(hypervisors=2)
    try:
        with harness.postgres(fsync=False) as pg:
            t0 = time.monotonic()
            lab.start()
            out["lab_start_s"] = round(time.monotonic() - t0, 2)
            t0 = time.monotonic()
            with ovn_neutron(lab, work / "neutron", pg.create_database()) as cloud:
                out["neutron_start_s"] = round(time.monotonic() - t0, 2)
                clouds = work / "clouds.yaml"
                clouds.write_text(json.dumps({"clouds": {"ovn": {"auth": cloud.auth(), "region_name": "RegionOne",
                                                                  "identity_api_version": 3}}}))
                env = {**{k: v for k, v in os.environ.items() if not k.startswith("OS_")},
                       "OS_CLIENT_CONFIG_FILE": str(clouds), "OS_CLOUD": "ovn", "NETBAY_LOG_LEVEL": "WARNING"}
                conn = cloud.connection()
                try:
                    yield lab, conn, env
                finally:
                    conn.close()
    finally:
        for name in netns.list(lab.prefix):   # the plugins' and the bench's, beside the lab's own
            if name not in lab.namespaces:
                netns.delete(name)
        stop_lab(lab)


def embedded_env(srv: harness.Server) -> dict[str, str]:
    return {**os.environ, "OS_AUTH_URL": f"{srv.url}/identity/v3", "OS_USERNAME": "admin",
            "OS_PASSWORD": harness.ADMIN_PASSWORD, "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default",
            "OS_PROJECT_DOMAIN_NAME": "Default", "NETBAY_LOG_LEVEL": "WARNING"}


class Children:
    """The bench's child processes and daemons, stopped by PID in reverse order."""

    def __init__(self) -> None:
        self.procs: list[tuple[subprocess.Popen, str | None]] = []   # (process, plugin name or None)
        self.daemons: list[Daemon] = []
        self.docker: list[dockerd.Dockerd] = []
        self.pods: list[Pods] = []

    def close(self) -> None:
        """Idempotent: each is stopped once (the pods DELed while the daemons and clouds are up)."""
        for each in self.pods:
            each.delete_all()
        while self.docker:
            dockerd.stop(self.docker.pop())
        while self.daemons:
            self.daemons.pop().stop()
        while self.procs:
            proc, name = self.procs.pop()
            if name:
                stop_plugin(proc, name)
            else:
                stop(proc)
