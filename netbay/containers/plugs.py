"""A container's ports: made or bound in the network backend, then recorded.

:func:`plug` makes (or binds the user's) port in the backend — outside netbay's
transaction, noted in a :class:`netbay.containers.neutron.Made` so that a failure
later undoes it — and :func:`record` writes the attachment in the caller's
transaction, with the addresses the port had (Zun shows those). :func:`release`
and :func:`forget` are the two halves backwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.containers import networks
from netbay.containers.neutron import Made, ZunNeutron
from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.store.db import Store
from netbay.store.models import NetworkAttachment


@dataclass
class Plug:
    """A port a container takes, made or bound in the backend, not yet recorded."""

    network_id: str
    port: dict[str, Any]
    auto_delete: bool
    seq: int


def plug(store: Store, neutron: ZunNeutron, made: Made, c: dict[str, Any], entry: dict[str, Any], seq: int,
         groups: list[str] | None, taken: Sequence[Plug] = ()) -> Plug:
    """Give container ``c`` (its columns) a port on a network — made, or the user's bound —
    in the backend, noted in ``made``. One port per network and container (Docker joins a
    container to a network once): ``taken`` are the plugs it has already."""
    ctx = neutron.ctx
    with store.read() as s:
        if entry.get("port"):
            port = neutron.port(entry["port"])
            if port.get("project_id") not in (neutron.project_id, None) and not ctx.is_admin:
                raise NotFound(f"Neutron port {entry['port']} could not be found.")
            if port.get("device_id"):
                raise BadRequest(f"Port {port['id']} is still in use.")
            network_id = port["network_id"]
            if entry.get("network"):
                named = networks.neutron_network_or_container(s, neutron, entry["network"])
                if named["id"] != network_id:
                    raise BadRequest(f"Port is not on network {entry['network']}.")
        else:
            network = (networks.neutron_network_or_container(s, neutron, entry["network"])
                       if entry.get("network") else neutron.default_network())
            network_id = network["id"]
        cnet = networks.find_for(s, ctx, network_id)
    subnet, *v6 = neutron.docker_subnets(network_id, cnet.subnet_id if cnet else None,
                                         cnet.subnetpool_id if cnet else None)
    if entry.get("port"):
        if subnet["id"] not in {f["subnet_id"] for f in port["fixed_ips"]}:
            raise BadRequest(f"Port {port['id']} not usable for the container: it has no address on "
                             f"subnet {subnet['id']}.")
        made.binding(port["id"], c["id"])
        return _unique(Plug(network_id, neutron.bind_port(port, c["id"], c["host"]), False, seq), c, taken)
    v4: dict[str, Any] = {"subnet_id": subnet["id"]}
    if entry.get("v4-fixed-ip"):
        v4["ip_address"] = entry["v4-fixed-ip"]
    fixed = [v4]
    if entry.get("v6-fixed-ip"):
        fixed.append({"ip_address": entry["v6-fixed-ip"]})
    elif v6:   # a dual-stack network: an address of each family, as Neutron gives when none is asked
        fixed.append({"subnet_id": v6[0]["id"]})
    suffix = f"-eth{seq}"   # a port's name has 255 characters at most, as a container's
    port = neutron.make_port(c["id"], c["host"], network_id, fixed, groups,
                             (c["name"] or c["id"][:8])[:255 - len(suffix)] + suffix)
    made.port(port["id"])
    return _unique(Plug(network_id, port, True, seq), c, taken)


def _unique(p: Plug, c: dict[str, Any], taken: Sequence[Plug]) -> Plug:
    """Checked once the port is made (its own refusals come first, as Neutron's would)."""
    if any(t.network_id == p.network_id for t in taken):
        raise Conflict(f"Container {c['id']} is already connected to network {p.network_id}.")
    return p


def record(session: Session, ctx: Context, container_id: str, p: Plug) -> NetworkAttachment:
    """The attachment of a plugged port (and the project's container network on it, made
    on first use)."""
    if session.scalars(select(NetworkAttachment).where(NetworkAttachment.container_id == container_id,
                                                       NetworkAttachment.network_id == p.network_id)).first():
        raise Conflict(f"Container {container_id} is already connected to network {p.network_id}.")
    cnet = networks.ensure_for(session, ctx, p.network_id)
    att = NetworkAttachment(container_id=container_id, port_id=p.port["id"], container_network_id=cnet.id,
                            network_id=p.network_id, seq=p.seq, auto_delete=p.auto_delete,
                            fixed_ips=[{"ip_address": f["ip_address"], "subnet_id": f["subnet_id"]}
                                       for f in p.port.get("fixed_ips") or ()])
    session.add(att)
    session.flush()
    return att


def release(neutron: ZunNeutron, container_id: str, port_id: str, auto_delete: bool) -> None:
    """In the backend: delete the port the container made, or unbind (keep) the user's."""
    if auto_delete:
        neutron.delete_port(port_id)
    else:
        neutron.unbind_port(port_id, container_id)


def forget(session: Session, container_id: str, port_id: str) -> None:
    """Drop the attachment row (its port released in the backend already)."""
    found = session.get(NetworkAttachment, (container_id, port_id), with_for_update=True)
    if found is not None:
        session.delete(found)
        session.flush()
