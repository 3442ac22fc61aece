"""The cluster resolver's life: a port of the service network, a namespace, a process.

The port (``compute:kuryr``, tagged ``netbay-k8s=dns``, the pod default group) takes
the 10th address of the service range, as Kubernetes' ``kube-dns`` Service does
(``10.254.0.10`` for ``10.254.0.0/16``; any free one if a cluster IP holds it), so
every pod reaches it through the router as it reaches cluster IPs. It is plugged
like a pod into ``<prefix>kd-<port id>`` (not ``k-``: the pods' sweep leaves it);
the process (:mod:`.server`) runs detached in that namespace, so a controller that
dies leaves it answering, and the next pass adopts it by its pid file in
``<state dir>/<prefix>k8s-dns/<port id>/`` (checked in ``/proc``: that command, that
namespace). The cluster's delete takes the port; :func:`sweep_orphans` the rest.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from netbay.backends.apiclient import gone_ok
from netbay.errors import Conflict
from netbay.dataplane import netns
from netbay.dataplane.fabric import KURYR_POD
from netbay.dataplane.garp import announce
from netbay.dataplane.rtnl import release
from netbay.k8s.sandbox import PodSandboxes, pod_port

ADDRESS_INDEX = 10
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
MODULE = "netbay.k8s.dns.server"


def state_root(prefix: str) -> Path:
    return Path(os.environ.get("NETBAY_STATE_DIR", "/run/netbay")) / f"{prefix}k8s-dns"


class ResolverBoxes(PodSandboxes):
    """Pod-style wiring (the controller's fabric) into ``<prefix>kd-<port id>``."""

    def __init__(self, pods: PodSandboxes) -> None:
        self.names, self.fabric = pods.names, pods.fabric

    def ns(self, port_id: str) -> str:
        return f"{self.names.prefix}kd-{port_id}"

    def existing(self) -> set[str]:
        head = f"{self.names.prefix}kd-"
        return {n[len(head):] for n in netns.list(head)}


class Process:
    """The server process of one resolver port (files in its state directory)."""

    def __init__(self, root: Path, port_id: str, ns: str) -> None:
        self.dir, self.ns = root / port_id, ns
        self.records, self.pidfile = self.dir / "records.json", self.dir / "resolver.pid"
        self._child: subprocess.Popen | None = None

    def pid(self) -> int | None:
        """The running server's pid (its /proc entry shows this command line)."""
        try:
            pid = int(self.pidfile.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            return None
        return pid if MODULE.encode() in cmdline and str(self.records).encode() in cmdline else None

    def serving(self) -> int | None:
        """The pid if it runs in the namespace as it is now (a re-made one has a new inode)."""
        pid = self.pid()
        try:
            return pid if pid and os.stat(f"/proc/{pid}/ns/net").st_ino == netns.inode(self.ns) else None
        except OSError:
            return None

    def start(self, address: str) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pidfile.unlink(missing_ok=True)
        if not self.records.exists():
            write_atomic(self.records, json.dumps({"domain": "cluster.local", "A": {}, "SRV": {}}))
        with open(self.dir / "resolver.log", "ab") as log:
            self._child = subprocess.Popen(
                [sys.executable, "-m", MODULE, "--netns", self.ns, "--address", address,
                 "--records", str(self.records), "--pidfile", str(self.pidfile)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while (pid := self.serving()) is None:
            if self._child.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.dir / "resolver.log").read_text(errors="replace")[-500:]
                raise RuntimeError(f"the cluster resolver did not start in {self.ns}: {tail.strip()}")
            time.sleep(0.01)
        return pid

    def stop(self) -> None:
        pid = self.pid() or (self._child.pid if self._child and self._child.poll() is None else None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            while _alive(pid, self._child) and time.monotonic() < deadline:
                time.sleep(0.01)
            if _alive(pid, self._child):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self._child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._child.wait(timeout=STOP_TIMEOUT)
            self._child = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        with contextlib.suppress(OSError):   # the prefix's directory, once its last resolver went
            self.dir.parent.rmdir()


def _alive(pid: int, child: subprocess.Popen | None) -> bool:
    if child is not None and child.pid == pid:
        return child.poll() is None
    return Path(f"/proc/{pid}").exists()


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ClusterResolver:
    """Keeps one cluster's resolver: ``ensure`` (every pass), ``publish``, ``remove``."""

    def __init__(self, ctrl: Any) -> None:  # netbay.k8s.controller.Controller (no import: no cycle)
        self.net, self.refs = ctrl.net, ctrl.refs
        self.boxes = ResolverBoxes(ctrl.sandboxes)
        self.root = state_root(ctrl.names.prefix)
        self.port: dict[str, Any] | None = None
        self.process: Process | None = None
        self._written: str | None = None
        self._absent = False     # the last removal found nothing to remove

    @property
    def address(self) -> str | None:
        return self.port["fixed_ips"][0]["ip_address"] if self.port else None

    def _tags(self) -> list[str]:
        return [self.refs.tag, "netbay-k8s=dns"]

    def _find(self) -> dict[str, Any] | None:
        found = self.net.list("port", tags=",".join(self._tags()))
        for extra in found[1:]:    # two controllers' race: keep one
            Process(self.root, extra["id"], self.boxes.ns(extra["id"])).remove()
            gone_ok(lambda: self.net.delete("port", extra["id"]))
            self.boxes.unplug(extra["id"])
        return found[0] if found else None

    def ensure(self, full: bool = True) -> str:
        """The resolver answers (made, re-plugged or restarted as needed); its address."""
        self._absent = False
        if full or self.port is None:
            self.port = self._find() or self._create()
            self._written = None
        port = self.port
        ns = self.boxes.ns(port["id"])
        if self.process is None or self.process.ns != ns:
            self.process = Process(self.root, port["id"], ns)
        if not full and self.process.serving() is not None:
            return self.address
        subnet = self.refs.service_subnet
        fresh = False
        try:
            if not self.boxes.plugged(port["id"]):
                self.process.stop()   # its sockets were in the namespace that is gone
                net = self.net.show("network", port["network_id"])
                self.boxes.plug(pod_port(port, subnet, int(net.get("mtu") or 1500)))
                fresh = True
        finally:
            release(ns)
        if not port.get("device_id"):
            self.port = port = self.net.update("port", port["id"], {
                "device_id": f"netbay-k8s-dns-{self.refs.cluster_id}"})
        if fresh:   # the address is the same in every cluster: the router may know an old MAC
            with contextlib.suppress(OSError):
                announce(ns, "eth0", port["mac_address"], self.address)
        if self.process.serving() is None:
            self.process.stop()      # one left in a namespace that is gone
            self.process.start(self.address)
        return self.address

    def _create(self) -> dict[str, Any]:
        subnet = self.refs.service_subnet
        body: dict[str, Any] = {
            "name": "dns", "network_id": subnet["network_id"], "device_owner": KURYR_POD,
            "security_groups": [self.refs.pod_sg_id], "tags": self._tags(),
            "fixed_ips": [{"subnet_id": subnet["id"],
                           "ip_address": str(ipaddress.ip_network(subnet["cidr"])[ADDRESS_INDEX])}]}
        if self.refs.project_id:
            body["project_id"] = self.refs.project_id
        try:
            return self.net.create("port", body)
        except Conflict:
            body["fixed_ips"] = [{"subnet_id": subnet["id"]}]   # a cluster IP holds the 10th
            return self.net.create("port", body)

    def publish(self, records: dict[str, Any]) -> None:
        """Write the records the server answers from (only when they changed)."""
        if self.process is None:
            return
        text = json.dumps(records, sort_keys=True, separators=(",", ":"))
        if self._written is None:
            with contextlib.suppress(OSError):
                self._written = self.process.records.read_text()
        if text != self._written:
            self.process.dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.process.records, text)
            self._written = text

    def remove(self, full: bool = True) -> None:
        """Stop the server and delete its port, namespace and files (none: no-op; a
        fast pass trusts the last pass that found none)."""
        if self.port is None and self._absent and not full:
            return
        port = self.port if self.port is not None else self._find()
        self._absent = True
        if port is None:
            return
        (self.process or Process(self.root, port["id"], self.boxes.ns(port["id"]))).remove()
        gone_ok(lambda: self.net.delete("port", port["id"]))
        self.boxes.unplug(port["id"])
        self.port, self.process, self._written = None, None, None


def sweep_orphans(net: Any, pods: PodSandboxes) -> list[str]:   # net: a NetworkBackend
    """Resolvers on this host whose port is gone (their cluster was deleted): their
    process, namespace and files. Returns the port ids."""
    boxes = ResolverBoxes(pods)
    stray = boxes.existing() | ({p.name for p in state_root(pods.names.prefix).iterdir()}
                                if state_root(pods.names.prefix).is_dir() else set())
    if not stray:
        return []
    live = {p["id"] for p in net.list("port", device_owner=KURYR_POD)}
    gone = sorted(stray - live)
    for port_id in gone:
        Process(state_root(pods.names.prefix), port_id, boxes.ns(port_id)).remove()
        boxes.unplug(port_id)
    return gone
