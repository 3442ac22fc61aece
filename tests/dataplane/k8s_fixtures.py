"""What the Kubernetes mapping's dataplane tests share (test_dp_k8s*.py).

A module sets ``CLOUD_TAG`` and ``CLOUD_K8S = True`` (the shared module-scoped ``cloud``
of conftest.py, started by :func:`k8s_cloud`), defines its ``cluster`` (its kuryr
labels), and imports ``ctrl``: the mapping controller
in-process on the server's store, whose objects are all deleted after each test.
``k8s_cloud`` also removes, after a failure, what a controller could leave behind
it: the cluster resolvers' processes and the pods' ``/etc/netns`` files.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import ADMIN_PASSWORD  # tests/conftest.py
from netbay.client import LB, NET, Api
from netbay.dataplane import netns
from netbay.k8s.controller import Controller
from netbay.k8s.dns.process import stop_all
from netbay.k8s.objects import Key, key_of, parse
from netbay.store.db import Store

from .agent_fixtures import Cloud, make_cloud, wait_for
from tests import zygote


def k8s_cloud(tmp: Path, tag: str) -> Iterator[Cloud]:
    """Server + agent (:func:`make_cloud`), and the mapping's host leftovers swept after."""
    prefix = None
    try:
        for c in make_cloud(tmp, tag):
            prefix = c.names.prefix
            yield c
    finally:
        if prefix:   # also after a failure: resolver processes and the pods' /etc/netns files
            stop_all(prefix)
            for d in Path("/etc/netns").glob(f"{prefix}*"):
                shutil.rmtree(d, ignore_errors=True)


@contextmanager
def controller(cloud: Cloud, cluster: str, *, delete: bool = True) -> Iterator[Controller]:
    """A controller of ``cluster`` (its own API session and store); ``delete``: every
    object of the cluster is deleted (and what was made for them removed) after."""
    api = Api(cloud.server.url, cloud.server.token)
    store = Store(cloud.server.database_url)
    c = Controller(api, store, cluster, cloud.names)
    try:
        yield c
    finally:
        try:
            if delete:
                c.delete_all()
        finally:
            c.close()
            api.close()
            store.dispose()


@pytest.fixture
def ctrl(cloud: Cloud, cluster: str) -> Iterator[Controller]:
    with controller(cloud, cluster) as c:
        yield c


def policy_quota(cloud: Cloud) -> None:
    """Room for a cluster's policies: the admin project's security-group quota (Neutron's
    default, 10, is a few policies' groups and the engine's spares)."""
    projects = cloud.ok(cloud.http.get("/identity/v3/auth/projects"))["projects"]
    admin = next(p["id"] for p in projects if p["name"] == "admin")
    cloud.ok(cloud.http.put(f"/network/v2.0/quotas/{admin}", json={"quota": {
        "security_group": 100, "security_group_rule": 1000}}))


def cli_env(cloud: Cloud) -> dict[str, str]:
    """The environment ``netbay k8s …`` runs with against the test server."""
    return {**os.environ, "OS_AUTH_URL": cloud.server.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
            "OS_PROJECT_NAME": "admin", "NETBAY_DATABASE_URL": cloud.server.database_url,
            "NETBAY_DATA_DIR": str(cloud.server.data_dir)}


def keys_of(text: str) -> list[Key]:
    return [key_of(b) for b in parse(text)]


def port_of(ctrl: Controller, ns: str, name: str) -> dict:
    ports = ctrl.api.call("GET", f"{NET}/ports", name=f"{ns}/{name}")["ports"]
    assert len(ports) == 1, ports
    return ports[0]


def pod_ns(ctrl: Controller, ns: str, name: str) -> str:
    """The pod's network namespace (a sandbox's, or a Docker pod's under the same name)."""
    return ctrl.sandboxes.ns(port_of(ctrl, ns, name)["id"])


def pod_ip(ctrl: Controller, ns: str, name: str) -> str:
    return port_of(ctrl, ns, name)["fixed_ips"][0]["ip_address"]


def pod_ips(ctrl: Controller, ns: str, names: list[str]) -> list[str]:
    return sorted(pod_ip(ctrl, ns, n) for n in names)


def lb(ctrl: Controller, name: str) -> dict:
    found = ctrl.api.call("GET", f"{LB}/loadbalancers", name=name)["loadbalancers"]
    assert len(found) == 1, found
    return found[0]


def lb_tree(ctrl: Controller, found: dict) -> dict[str, list[tuple[str, int]]]:
    """A load balancer as its listeners, each with its pool's members:
    ``{"TCP:80": [(address, port)]}`` (a listener without a pool: no members)."""
    out = {}
    for ref in found.get("listeners") or []:
        listener = ctrl.api.call("GET", f"{LB}/listeners/{ref['id']}")["listener"]
        pool = listener.get("default_pool_id")
        members = ctrl.api.call("GET", f"{LB}/pools/{pool}/members")["members"] if pool else []
        out[f"{listener['protocol']}:{listener['protocol_port']}"] = sorted(
            (m["address"], m["protocol_port"]) for m in members)
    return out


def in_pod(ns: str, *cmd: str, timeout: float = 15) -> subprocess.CompletedProcess:
    """A process in the pod as ``ip netns exec`` starts it (the pod's /etc files bound)."""
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=timeout,
                          check=False)


def getent(ns: str, name: str) -> list[str]:
    done = in_pod(ns, "getent", "ahostsv4", name)
    return sorted({line.split()[0] for line in done.stdout.splitlines() if line.strip()})


def netbay_exec(cloud: Cloud, ctrl: Controller, pod: str, *cmd: str, cluster: str | None = None
                ) -> subprocess.CompletedProcess:
    """``netbay k8s exec``: the pod's namespace, resolv.conf and Service variables
    (``cluster``: its name or uuid; default the uuid; the prefix from NETBAY_AGENT_PREFIX)."""
    return zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "exec", "--cluster",
                       cluster or ctrl.refs.cluster_id, "--url", cloud.server.url, pod, "--", *cmd],
                      env={**cli_env(cloud), "NETBAY_AGENT_PREFIX": cloud.names.prefix}, capture_output=True,
                      text=True, timeout=30, check=False)


def k8s_cli(cloud: Cloud, cluster: str, *args: str) -> list[str]:
    """``netbay k8s ARGS…`` against the test server, for ``cluster`` (run with :func:`cli_env`)."""
    return [sys.executable, "-m", "netbay.cli.main", "k8s", *args, "--cluster", cluster, "--url", cloud.server.url,
            "--prefix", cloud.names.prefix]


def killed_apply(cloud: Cloud, cluster: str, manifest: Path, until: Callable[[], Any],
                 env: dict[str, str] | None = None) -> None:
    """``netbay k8s apply -f manifest`` SIGKILLed once ``until()`` holds: a controller
    crashed mid-way (``env``: more of its environment)."""
    proc = subprocess.Popen(k8s_cli(cloud, cluster, "apply", "-f", str(manifest)), env={**cli_env(cloud), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(until, 120, 0.02, "the apply to get going")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)


def http_get(ns: str, host: str, port: int, timeout: float = 2.0) -> bytes | None:
    """The body of ``GET /`` from inside ``ns`` (None: no answer)."""
    try:
        with netns.entered(ns):
            s = socket.create_connection((host, port), timeout=timeout)
        with s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = b""
            for _ in range(100):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    return data.split(b"\r\n\r\n", 1)[-1].strip()


def node_pods(ctrl: Any) -> dict[str, dict]:
    """A flannel/calico cluster's netbay pods by their Kubernetes ``namespace/name``
    (the cluster resolver's pod, which has none, left out)."""
    found = ctrl.api.call("GET", "/netbay/v1/pods", cluster_id=ctrl.refs.cluster_id)["pods"]
    return {p["labels"]["netbay-k8s"]: p for p in found if "netbay-k8s" in p["labels"]}
