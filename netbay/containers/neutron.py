"""Zun's Neutron side, through the network backend seam (as Zun's ``zun/network/neutron.py``).

Everything the container API asks of the network — a network by id or name, the
project's default one, the IPv4 subnet a container network uses, security groups,
the container's ports and its ``zun-<uuid>`` exposed-ports group — goes through
:class:`netbay.backends.NetworkBackend`, so the same code puts a container's port in
netbay's own service or in a cloud's Neutron. The cloud's Neutron is not in netbay's
transaction: callers make these objects first and undo them (:class:`Made`) when a
later step fails.

Ports are made as Zun's kuryr network driver makes them: ``device_id`` the container's
uuid, ``device_owner`` ``compute:kuryr`` and ``binding:host_id`` the container's host on
a cloud; netbay's own service keeps ``compute:netbay`` (its dataplane wires those).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from netbay.backends import NetworkBackend
from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NetbayError, NotFound
from netbay.runtime import binding, resolve

log = logging.getLogger(__name__)

def expose_group_name(container_id: str) -> str:
    return f"zun-{container_id}"


class ZunNeutron:
    """The network as one caller's container requests see it."""

    def __init__(self, backend: NetworkBackend, ctx: Context) -> None:
        scoped = getattr(backend, "for_context", None)
        self.backend = scoped(ctx) if scoped is not None else backend
        self.ctx = ctx
        # Whose objects are the caller's: its project, on either backend (both act for it).
        self.project_id = getattr(self.backend, "project_id", None) or ctx.project_id
        # The backend's convention (:class:`netbay.backends.Traits`): Zun's kuryr owner and
        # binding:host_id on a cloud; netbay's own owner, bound by its agent, on its own service.
        self.owner = backend.traits.container_owner
        self.binds_host = backend.traits.binds_host

    # -- reads -------------------------------------------------------------------------------

    def network(self, ident: str) -> dict[str, Any]:
        """A network the caller may use (own or shared), by id or unique name; Zun's 404 else."""
        try:
            return resolve.find(self.backend, "network", ident)
        except resolve.Unresolved as exc:
            if exc.count:
                raise Conflict("Multiple Neutron networks exist with same name. Please use the uuid instead.") \
                    from None
            raise NotFound(f"Neutron network {ident} could not be found.") from None

    def default_network(self) -> dict[str, Any]:
        """Zun's rule: the project's oldest non-shared network, else a shared one."""
        found = sorted((n for n in self.backend.list("network") if not n.get("router:external")),
                       key=lambda n: (n.get("created_at") or "", n["id"]))
        own = [n for n in found if n.get("project_id") == self.project_id and not n.get("shared")]
        shared = [n for n in found if n.get("shared")]
        if not own and not shared:
            raise BadRequest("Unable to find a network for the container: the project has no network and "
                             "no network is shared.")
        return (own or shared)[0]

    def subnets(self, network_id: str) -> list[dict[str, Any]]:
        return sorted(self.backend.list("subnet", network_id=network_id),
                      key=lambda s: (s.get("created_at") or "", s["id"]))

    def ipv4_subnet(self, network_id: str, subnet_id: str | None = None,
                    pool_id: str | None = None) -> dict[str, Any]:
        """The IPv4 subnet a container network's Docker network (and its ports) use."""
        subnets = self.subnets(network_id)
        if subnet_id:
            pinned = next((s for s in subnets if s["id"] == subnet_id), None)
            if pinned is not None:
                return pinned
        for s in subnets:
            if s["ip_version"] == 4 and (not pool_id or s.get("subnetpool_id") == pool_id):
                return s
        # Docker asks its network driver for an IPv4 pool whatever it is told (--ipv4=false too)
        raise BadRequest(f"Neutron network {network_id} has no IPv4 subnet"
                         + (f" from subnet pool {pool_id}" if pool_id else "")
                         + ": containers run through Docker, which needs an IPv4 pool beside an IPv6 one "
                           "(IPv6-only networks are not supported by the container API).")

    def ipv6_subnet(self, network_id: str) -> dict[str, Any] | None:
        """The network's first IPv6 subnet: a dual-stack network's containers get an address there too."""
        return next((s for s in self.subnets(network_id) if s["ip_version"] == 6), None)

    def docker_subnets(self, network_id: str, subnet_id: str | None = None,
                       pool_id: str | None = None) -> list[dict[str, Any]]:
        """The subnets a container network's Docker network has pools on: the IPv4 one
        (:meth:`ipv4_subnet`), then the IPv6 one if the network is dual-stack."""
        v6 = self.ipv6_subnet(network_id)
        return [self.ipv4_subnet(network_id, subnet_id, pool_id), *([v6] if v6 else [])]

    def security_groups(self, names: Iterable[str]) -> list[str]:
        """Ids of the caller's project's groups, each named by id or name; Zun's 400/409 else."""
        mine = [g for g in self.backend.list("security_group") if g.get("project_id") == self.project_id]
        ids = []
        for name in dict.fromkeys(names):
            found = [g["id"] for g in mine if name in (g["id"], g["name"])]
            if not found:
                raise BadRequest(f"Security group {name} could not be found.")
            if len(found) > 1:
                raise Conflict(f"Multiple security groups exist with name {name}. Please use the uuid instead.")
            ids.append(found[0])
        return ids

    def port(self, port_id: str) -> dict[str, Any]:
        try:
            return self.backend.show("port", port_id)
        except NotFound:
            raise NotFound(f"Neutron port {port_id} could not be found.") from None

    # -- changes (each undone by Made.undo) -----------------------------------------------------

    def make_port(self, container_id: str, host: str, network_id: str, fixed_ips: list[dict[str, Any]],
                  groups: list[str] | None, name: str) -> dict[str, Any]:
        body: dict[str, Any] = {"network_id": network_id, "fixed_ips": fixed_ips, "name": name,
                                **binding.bind({}, container_id, self.owner, self._host(host))}
        if groups is not None:
            body["security_groups"] = groups
        return self.backend.create("port", body)

    def bind_port(self, port: dict[str, Any], container_id: str, host: str) -> dict[str, Any]:
        """Bind the user's free port (its ``device_id`` empty: checked by the caller)."""
        return self.backend.update("port", port["id"], binding.bind(port, container_id, self.owner, self._host(host)))

    def _host(self, host: str) -> str | None:
        """``binding:host_id`` as this backend wants it (None: its own agent binds)."""
        return host if self.binds_host else None

    def unbind_port(self, port_id: str, container_id: str) -> None:
        """Give the user's port back (Zun's ``_unbind_port``), unless another device took it."""
        with contextlib.suppress(NotFound):
            if self.backend.show("port", port_id).get("device_id") == container_id:
                self.backend.update("port", port_id, binding.unbind(True, host=self.binds_host))

    def delete_port(self, port_id: str) -> None:
        with contextlib.suppress(NotFound):
            self.backend.delete("port", port_id)

    def expose_group(self, container_id: str, exposed: Iterable[str]) -> str:
        """Zun's ``zun-<uuid>`` group opening the exposed ports (deleted with the container)."""
        group = self.backend.create("security_group", {"name": expose_group_name(container_id),
                                                       "description": f"Exposed ports of container {container_id}"})
        try:
            for key in exposed:
                number, proto = key.split("/")
                self.backend.create("security_group_rule", {
                    "security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4",
                    "protocol": proto, "port_range_min": int(number), "port_range_max": int(number)})
        except BaseException:
            self.delete_group(group["id"])
            raise
        return group["id"]

    def delete_expose_group(self, container_id: str) -> None:
        for g in self.backend.list("security_group", name=expose_group_name(container_id)):
            if g.get("project_id") == self.project_id:
                self.delete_group(g["id"])

    def delete_group(self, group_id: str) -> None:
        with contextlib.suppress(NotFound):
            self.backend.delete("security_group", group_id)


class Made:
    """What one operation made in the backend, undone in reverse if a later step fails."""

    def __init__(self, neutron: ZunNeutron) -> None:
        self.neutron = neutron
        self._undo: list[tuple[Any, tuple[Any, ...]]] = []

    def port(self, port_id: str) -> None:
        self._undo.append((self.neutron.delete_port, (port_id,)))

    def binding(self, port_id: str, container_id: str) -> None:
        self._undo.append((self.neutron.unbind_port, (port_id, container_id)))

    def group(self, group_id: str) -> None:
        self._undo.append((self.neutron.delete_group, (group_id,)))

    def undo(self) -> None:
        """Best effort, every step tried: what cannot be undone is logged with why."""
        for step, args in reversed(self._undo):
            try:
                step(*args)
            except NetbayError as exc:
                log.warning("containers: could not undo %s%s: %s", step.__name__, args, exc)
        self._undo.clear()
