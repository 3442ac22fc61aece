"""What a handler sees of the stack it works for (:class:`netbay.coe.executor.Stack`
is one): the backends to call, the names and tags that mark what it makes, Heat's
name-or-id lookups, and the rule that a load balancer's tree takes one change at a
time. Apart from the executor's rows and scheduling, so a handler (and the sweep)
depends on no more than it uses.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from netbay.backends import NetworkBackend
from netbay.client import Api, Refused
from netbay.backends.http import HttpBackend
from netbay.backends.loadbalancers import LoadBalancerBackend, open_lb_backend, settled
from netbay.backends.servers import ServerBackend


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
        return True
    except ValueError:
        return False


class StackContext:
    """The backends of one cluster's stack and how its resources are named and found."""

    def __init__(self, api: Api | None, *, cluster_id: str, name: str, project_id: str | None,
                 net: NetworkBackend | None, lb: LoadBalancerBackend | None, lb_timeout: float,
                 servers: ServerBackend | None = None, server_timeout: float = 300.0) -> None:
        if net is None and api is None:
            raise ValueError("a stack needs netbay's API or a network backend")
        self.api = api    # netbay's own API: sandboxes standing in for Nova (embedded)
        self.net: NetworkBackend = net if net is not None else HttpBackend(api)
        # Sandboxes are netbay's own only beside its own network service.
        self.has_own_services = api is not None and self.net.traits.own_services
        # Load balancers: netbay's own beside its own network service; a cloud's Octavia if given one.
        if lb is None and self.has_own_services:
            lb = open_lb_backend("embedded", api=api)
        self.lb: LoadBalancerBackend | None = lb
        # Servers: a cloud's Nova where its catalog lists one (None: sandboxes or port claims).
        self.servers = servers
        self.server_timeout = server_timeout
        self.cluster_id = cluster_id
        self.name = name
        self.project_id = project_id
        self.lb_timeout = lb_timeout
        self._lb_locks: dict[str, threading.Lock] = {}
        self._lb_locks_lock = threading.Lock()

    # -- naming ------------------------------------------------------------------------------------

    def physical_name(self, name: str) -> str:
        return f"{self.name}-{name}"[:255]

    def tags(self, name: str) -> list[str]:
        return [f"netbay-cluster={self.cluster_id}", f"netbay-resource={name}"[:255]]

    def description(self, name: str) -> str:
        return f"netbay-cluster={self.cluster_id} netbay-resource={name}"[:255]

    def owned(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.project_id:
            body["project_id"] = self.project_id
        return body

    # -- lookups -----------------------------------------------------------------------------------

    def network_id(self, ref: Any) -> str:
        return self._lookup("network", ref)

    def subnet_id(self, ref: Any) -> str:
        return self._lookup("subnet", ref)

    def _lookup(self, kind: str, ref: Any) -> str:
        """Heat's name-or-id: an id is taken as given, a name must match exactly one."""
        if ref is None or ref == "":
            raise ValueError(f"no {kind} given")
        if _is_uuid(ref):
            return str(ref)
        found = self.net.list(kind, name=str(ref))
        if len(found) != 1:
            what = "Unable to find" if not found else "Multiple matches for"
            raise LookupError(f"{what} {kind} with name or id '{ref}'")
        return found[0]["id"]

    # -- load balancers ----------------------------------------------------------------------------

    def lb_lock(self, lb_id: str) -> threading.Lock:
        with self._lb_locks_lock:
            return self._lb_locks.setdefault(lb_id, threading.Lock())

    def wait_lb(self, lb_id: str) -> dict[str, Any]:
        """Wait (bounded) until the load balancer leaves ``PENDING_*``, as Heat's Octavia
        resources do: Octavia refuses any change to a load balancer's tree meanwhile."""
        lb = settled(self.lb, lb_id, self.lb_timeout)
        if lb["provisioning_status"] == "ERROR":
            raise RuntimeError(f"load balancer {lb_id} went to ERROR")
        return lb

    def lb_change(self, lb_id: str, change: Callable[[], Any]) -> Any:
        """One change in a load balancer's tree: settled before, settled after; a 409 from a
        concurrent change is retried (bounded)."""
        with self.lb_lock(lb_id):
            for attempt in range(5):
                self.wait_lb(lb_id)
                try:
                    result = change()
                    break
                except Refused as exc:
                    if exc.status != 409 or attempt == 4:
                        raise
            self.wait_lb(lb_id)
            return result
