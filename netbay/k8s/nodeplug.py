"""Whether the dataplane agent of this host has plugged a netbay pod into its node,
read from the kernel.

A node cluster's controller runs beside the agent (it writes the pods' files under
``/etc/netns`` and runs the cluster resolver in a pod's namespace), so it can see a
new pod plugged the moment the agent's ``attach_pod`` is done, instead of after the
agent's status report has reached the API and a poll has read it back (two API round
trips on every new pod's path). What it looks for is what ``attach_pod`` makes last,
whatever the driver (:mod:`netbay.drivers.pods`): in the pod, ``eth0`` up with the
pod's address and its default route; in the node, a route to that address through
something else than its underlay (calico's ``/32`` to the ``cali…`` end, made after
the pod's side; flannel's bridge, whose lease route is there from the node's set-up).
The API's status stays the truth for everything else (an ``ERROR``, a pod plugged on
another host): :func:`wait` asks it too, every :data:`API_POLL` — a few pods
one by one (a row each), more in one list of the cluster's.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from netbay.client import Api, ApiError
from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import LinkError, rtnl
from netbay.runtime import inside

PODS = "/netbay/v1/pods"
IFNAME = "eth0"      # the pod's end, as every driver names it
UNDERLAY = "eth0"    # the node's own link to its peers
KERNEL_POLL = 0.002  # seconds between two looks at the kernel for pods being plugged
API_POLL = 0.02      # ... and at the API (first after that long: a read blocks the kernel's looks)
FEW = 4              # pods read one by one (more: one list of the cluster's)

Key = tuple[str, str]


def plugged(node_ns: str, pod_ns: str, address: str) -> bool:
    """``pod_ns`` is attached to ``node_ns`` with ``address`` (IPv4), as far as this
    host's kernel shows; False for anything missing (or a namespace gone)."""
    if not (netns.exists(pod_ns) and netns.exists(node_ns)):
        return False
    try:
        with inside.opened(netns.path(pod_ns)) as pod:   # a socket for this look only: the pod may go
            link = pod.link(IFNAME)
            if link is None or not link.up:
                return False
            if not any(cidr.split("/")[0] == address for cidr in pod.addresses(link.index)):
                return False
            if not any(dst == "0.0.0.0/0" and oif == link.index for dst, _gw, oif, _m in pod.routes(socket.AF_INET)):
                return False
        node = rtnl(node_ns)
        underlay = node.link(UNDERLAY)
        ip = ipaddress.ip_address(address)
        return any(dst != "0.0.0.0/0" and ip in ipaddress.ip_network(dst)
                   and (underlay is None or oif != underlay.index)
                   for dst, _gw, oif, _m in node.routes(socket.AF_INET))
    except (LinkError, OSError, ValueError):
        return False


def wait(api: Api, cluster_id: str, node_ns: Callable[[Mapping[str, Any]], str | None], names: Names,
         pods: dict[Key, dict[str, Any]], keys: list[Key], timeout: float) -> list[Key]:
    """Until the pods ``keys`` of ``pods`` (netbay pods, updated in place) are plugged —
    seen here (taken as ``ACTIVE``: the agent's report is on its way) or ``ACTIVE``/
    ``ERROR`` in the API — or ``timeout`` passes; returns those still waited for.
    ``node_ns``: a pod's node's namespace (None: not known here)."""
    asked = time.monotonic()
    deadline = asked + timeout
    todo = list(keys)
    for _ in range(10_000_000):
        for key in list(todo):
            pod = pods[key]
            where = node_ns(pod)
            if not pod.get("runtime") and where and pod.get("address") \
                    and plugged(where, names.pod(pod["id"]), pod["address"]):
                pods[key] = {**pod, "status": "ACTIVE", "status_reason": None}
                todo.remove(key)
        if todo and time.monotonic() - asked >= API_POLL:
            asked = time.monotonic()
            now = _read(api, cluster_id, [pods[key]["id"] for key in todo])
            for key in list(todo):
                current = now.get(pods[key]["id"])
                if current is not None:
                    pods[key] = current
                if current is None or current["status"] in ("ACTIVE", "ERROR"):
                    todo.remove(key)
        if not todo or time.monotonic() > deadline:
            break
        time.sleep(KERNEL_POLL)
    return todo


def _read(api: Api, cluster_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The pods ``ids`` as the API has them now (a deleted one is absent)."""
    if len(ids) > FEW:
        return {p["id"]: p for p in api.call("GET", PODS, cluster_id=cluster_id)["pods"]}
    out = {}
    for pod_id in ids:
        try:
            out[pod_id] = api.call("GET", f"{PODS}/{pod_id}")["pod"]
        except ApiError as exc:
            if exc.status != 404:
                raise
    return out


__all__ = ["API_POLL", "KERNEL_POLL", "plugged", "wait"]
