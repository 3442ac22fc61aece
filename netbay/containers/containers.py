"""Containers, their ports and network attachments: the store side of ``/v1/containers``.

Each call is one transaction: a container is written with its ports (made, or the
user's bound to it) and its attachments, or not at all — an address outside the
subnet or an unknown network refuses the whole create. Docker is not touched here
(:mod:`netbay.containers.runner` does that off the request path), so the API answers
at once with the container ``Creating``.

``nets`` entries are Zun's: ``network`` (a container network's uuid or name, or a
netbay network's id or name), ``port`` (a port the caller owns, unbound),
``v4-fixed-ip``, ``v6-fixed-ip``. No entry: Zun's default network rule.
``addresses`` is reported as Zun does: ``{network id: [{addr, version, port,
subnet_id, preserve_on_delete}]}``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from netbay.containers import networks, placement
from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, NotFound
from netbay.network.ports import create_port, delete_port
from netbay.network.security_groups import ensure_default_group
from netbay.store.models import (Container, ContainerNetwork, IPAllocation, Network, NetworkAttachment, Port,
                                 SecurityGroup, new_id)

OWNER = "compute:netbay"
STATUSES = ("Creating", "Created", "Running", "Stopped", "Restarting", "Rebuilding", "Deleting", "Error",
            "Unknown")
BODY_KEYS = {"name", "image", "hints", "command", "environment", "labels", "workdir", "hostname", "nets",
             "security_groups", "exposed_ports", "run", "interactive", "tty", "image_driver",
             "image_pull_policy", "restart_policy", "auto_remove", "cpu", "memory", "availability_zone",
             "mounts", "runtime", "disk", "auto_heal", "privileged", "healthcheck", "host", "entrypoint",
             "cpu_policy", "registry", "requested_volumes"}
NET_KEYS = {"network", "port", "v4-fixed-ip", "v6-fixed-ip", "preserve_on_delete"}


def not_found(ident: str) -> NotFound:
    return NotFound(f"Container {ident} could not be found.")


def get(session: Session, ctx: Context, ident: str, *, for_update: bool = False) -> Container:
    """By uuid or unique name, in the caller's project (another project's: 404)."""
    for column in (Container.id, Container.name):
        stmt = select(Container).where(column == ident, Container.project_id == ctx.project_id)
        if for_update:
            stmt = stmt.with_for_update()
        found = session.scalars(stmt).all()
        if len(found) > 1:
            raise Conflict(f"Multiple containers exist with same name. Please use the container uuid instead.")
        if found:
            return found[0]
    raise not_found(ident)


def attachments(session: Session, container_id: str) -> list[NetworkAttachment]:
    return list(session.scalars(select(NetworkAttachment).where(NetworkAttachment.container_id == container_id)
                                .order_by(NetworkAttachment.seq)))


def addresses(session: Session, container_id: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for att in attachments(session, container_id):
        allocs = session.scalars(select(IPAllocation).where(IPAllocation.port_id == att.port_id)
                                 .order_by(IPAllocation.seq)).all()
        out.setdefault(att.network_id, []).extend(
            {"addr": a.ip_address, "version": ipaddress.ip_address(a.ip_address).version, "port": att.port_id,
             "subnet_id": a.subnet_id, "preserve_on_delete": not att.auto_delete} for a in allocs)
    return out


def render(session: Session, c: Container) -> dict[str, Any]:
    return {
        "uuid": c.id, "name": c.name, "image": c.image, "command": c.command, "status": c.status,
        "status_reason": c.status_reason or None, "task_state": c.task_state, "cpu": None, "memory": None,
        "environment": c.environment, "workdir": c.workdir or None, "ports": _port_numbers(c.exposed_ports),
        "hostname": c.hostname or None, "labels": c.labels,
        "addresses": placement.addresses(session, c) if c.cluster_id else addresses(session, c.id),
        "cluster": c.cluster_id or None, "node": c.node or None,
        "image_pull_policy": None, "host": c.host or None, "restart_policy": {}, "status_detail": None,
        "tty": False, "stdin_open": False, "security_groups": c.security_groups, "image_driver": "docker",
        "project_id": c.project_id, "user_id": c.user_id, "container_id": c.docker_id or None,
        "auto_remove": False, "interactive": False, "auto_heal": False, "privileged": False,
        "created_at": c.created_at.isoformat() if c.created_at else None,
        "updated_at": c.updated_at.isoformat() if c.updated_at else None,
    }


def _port_numbers(exposed: dict[str, Any]) -> list[int]:
    return sorted({int(k.split("/")[0]) for k in exposed})


def listing(session: Session, ctx: Context, all_projects: bool = False,
            labels: list[str] | None = None) -> list[Container]:
    """The project's containers; every project's for an admin asking ``all_projects``;
    only those holding every ``k=v`` of ``labels``."""
    from netbay.store import labels as labellib

    if all_projects and not ctx.is_admin:
        raise Forbidden("Policy doesn't allow container:get_all_all_projects to be performed.")
    stmt = select(Container).order_by(Container.created_at, Container.id)
    if not all_projects:
        stmt = stmt.where(Container.project_id == ctx.project_id)
    found = list(session.scalars(stmt))
    return [c for c in found if labellib.matches(c.labels, labels)] if labels else found


# --- create ----------------------------------------------------------------------------------


def _command(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        import shlex

        return shlex.split(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise BadRequest("Invalid input for field 'command': it must be a string or a list of strings.")


def _exposed(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest("Invalid input for field 'exposed_ports': it must be an object.")
    out = {}
    for key in value:
        number, _, proto = str(key).partition("/")
        proto = proto or "tcp"
        if not number.isdigit() or not 1 <= int(number) <= 65535 or proto not in ("tcp", "udp"):
            raise BadRequest(f"Invalid input for field 'exposed_ports': '{key}' is not a port[/tcp|udp].")
        out[f"{int(number)}/{proto}"] = {}
    return out


def _groups(session: Session, ctx: Context, names: Any) -> list[str] | None:
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest("Invalid input for field 'security_groups': it must be a list of names or ids.")
    ids = []
    for name in dict.fromkeys(names):
        found = session.scalars(select(SecurityGroup.id).where(
            or_(SecurityGroup.id == name, SecurityGroup.name == name),
            SecurityGroup.project_id == ctx.project_id)).all()
        if not found:
            raise BadRequest(f"Security group {name} could not be found.")
        if len(found) > 1:
            raise Conflict(f"Multiple security groups exist with name {name}. Please use the uuid instead.")
        ids.append(found[0])
    return ids


def check_nets(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(n, dict) for n in value):
        raise BadRequest("Invalid input for field 'nets': it must be a list of objects.")
    for n in value:
        unknown = sorted(set(n) - NET_KEYS)
        if any(not isinstance(v, str) for k, v in n.items() if k != "preserve_on_delete" and v is not None):
            raise BadRequest("Invalid input for field 'nets': values must be strings.")
        if unknown:
            raise BadRequest(f"Invalid input for field 'nets': unknown key(s) {', '.join(unknown)}.")
        if not n.get("network") and not n.get("port"):
            raise BadRequest("Invalid input for field 'nets': each entry needs 'network' or 'port'.")
        for key in ("v4-fixed-ip", "v6-fixed-ip"):
            if n.get(key):
                try:
                    ip = ipaddress.ip_address(n[key])
                except ValueError:
                    raise BadRequest(f"Invalid input for field 'nets': '{n[key]}' is not an IP address.") from None
                if ip.version != int(key[1]):
                    raise BadRequest(f"Invalid input for field 'nets': '{n[key]}' is not an IPv{key[1]} address.")
    return value


def create(session: Session, ctx: Context, body: Any, *, run: bool, host: str) -> Container:
    if not isinstance(body, dict):
        raise BadRequest("Invalid input: the request body must be a JSON object.")
    unknown = sorted(set(body) - BODY_KEYS)
    if unknown:
        raise BadRequest(f"Additional properties are not allowed ({', '.join(map(repr, unknown))} "
                         f"{'was' if len(unknown) == 1 else 'were'} unexpected)")
    image = body.get("image")
    if not isinstance(image, str) or not image:
        raise BadRequest("'image' is a required property")
    name = body.get("name") or ""
    if not isinstance(name, str) or len(name) > 255:
        raise BadRequest("Invalid input for field 'name'.")
    if name and session.scalars(select(Container.id).where(Container.project_id == ctx.project_id,
                                                           Container.name == name)).first():
        raise Conflict(f"A container with name {name} already exists.")
    for key in ("environment", "labels"):
        value = body.get(key)
        if value is not None and (not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())):
            raise BadRequest(f"Invalid input for field '{key}': it must be an object of strings.")
    for key in ("workdir", "hostname"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise BadRequest(f"Invalid input for field '{key}': it must be a string.")
    hints = placement.hinted(body.get("hints"))
    if hints and any(body.get(k) for k in ("nets", "security_groups", "exposed_ports")):
        raise BadRequest("A container placed on a cluster node (hints cluster=) is plugged as a pod is: "
                         "it takes no 'nets', 'security_groups' or 'exposed_ports'.")
    cluster_id, node = placement.place(session, ctx, hints) if hints else ("", "")
    groups = _groups(session, ctx, body.get("security_groups"))
    c = Container(id=new_id(), project_id=ctx.project_id, user_id=ctx.user_id, name=name, image=image,
                  command=_command(body.get("command")), environment=body.get("environment") or {},
                  labels=body.get("labels") or {}, workdir=body.get("workdir") or "",
                  hostname=body.get("hostname") or "", status="Creating", status_reason="",
                  task_state="container_creating", run=run, host=host, docker_id="",
                  security_groups=groups or [], exposed_ports=_exposed(body.get("exposed_ports")),
                  cluster_id=cluster_id, node=node)
    session.add(c)
    session.flush()
    if cluster_id:
        return c
    if c.exposed_ports:
        groups = [*(groups if groups is not None else [ensure_default_group(session, c.project_id).id]),
                  _expose_group(session, c)]
        c.security_groups = groups
    entries = check_nets(body.get("nets")) or [{}]
    for seq, entry in enumerate(entries):
        attach(session, ctx, c, entry, seq, groups)
    return c


def _expose_group(session: Session, c: Container) -> str:
    """Zun's ``zun-<uuid>`` group opening the exposed ports (deleted with the container)."""
    from netbay.network.registry import SECURITY_GROUP_RULES, SECURITY_GROUPS
    from netbay.network.security_groups import SecurityGroupCreate, SecurityGroupRuleCreate

    ctx = Context(user_id=c.user_id, project_id=c.project_id, roles=("member",))
    group = SECURITY_GROUPS.create(session, ctx, SecurityGroupCreate(
        name=expose_group_name(c.id), description=f"Exposed ports of container {c.id}"))
    for key in c.exposed_ports:
        number, proto = key.split("/")
        SECURITY_GROUP_RULES.create(session, ctx, SecurityGroupRuleCreate(
            security_group_id=group.id, direction="ingress", protocol=proto,
            port_range_min=int(number), port_range_max=int(number)))
    return group.id


def expose_group_name(container_id: str) -> str:
    return f"zun-{container_id}"


def attach(session: Session, ctx: Context, c: Container, entry: dict[str, Any], seq: int,
           groups: list[str] | None) -> NetworkAttachment:
    """Give ``c`` a port on a network (made, or the user's bound) and record the attachment.
    One port per network and container (Docker joins a container to a network once)."""
    if entry.get("port"):
        port = session.get(Port, entry["port"], with_for_update=True)
        if port is None or (port.project_id != ctx.project_id and not ctx.is_admin):
            raise NotFound(f"Neutron port {entry['port']} could not be found.")
        if port.device_id:
            raise BadRequest(f"Port {port.id} is still in use.")
        network = session.get(Network, port.network_id)
        cnet = _container_network(session, ctx, entry.get("network"), network)
        subnet = networks.docker_subnet(session, cnet)
        on = session.scalars(select(IPAllocation.subnet_id).where(IPAllocation.port_id == port.id)).all()
        if subnet.id not in on:
            raise BadRequest(f"Port {port.id} not usable for the container: it has no address on "
                             f"subnet {subnet.id}.")
        from netbay.network.registry import PORTS

        port.device_id, port.device_owner = c.id, OWNER
        PORTS.touch(port)
        session.flush()
        PORTS.record(session, port, "update")
        port_id, auto_delete = port.id, False
    else:
        network = (networks.neutron_network_or_container(session, ctx, entry["network"])
                   if entry.get("network") else networks.default_network(session, ctx))
        cnet = _container_network(session, ctx, None, network)
        subnet = networks.docker_subnet(session, cnet)
        v4: dict[str, Any] = {"subnet_id": subnet.id}
        if entry.get("v4-fixed-ip"):
            v4["ip_address"] = entry["v4-fixed-ip"]
        fixed = [v4] + ([{"ip_address": entry["v6-fixed-ip"]}] if entry.get("v6-fixed-ip") else [])
        from netbay.network.registry import PORTS

        made = create_port(session, project_id=c.project_id, network=network, fixed_ips=fixed,
                           security_groups=groups, device_id=c.id, device_owner=OWNER,
                           name=f"{c.name or c.id[:8]}-eth{seq}")
        PORTS.record(session, made, "create")
        port_id, auto_delete = made.id, True
    if session.scalars(select(NetworkAttachment).where(NetworkAttachment.container_id == c.id,
                                                       NetworkAttachment.network_id == cnet.network_id)).first():
        raise Conflict(f"Container {c.id} is already connected to network {cnet.network_id}.")
    att = NetworkAttachment(container_id=c.id, port_id=port_id, container_network_id=cnet.id,
                            network_id=cnet.network_id, seq=seq, auto_delete=auto_delete)
    session.add(att)
    session.flush()
    return att


def _container_network(session: Session, ctx: Context, ident: str | None, network: Network) -> ContainerNetwork:
    if ident:
        named = networks.neutron_network_or_container(session, ctx, ident)
        if named.id != network.id:
            raise BadRequest(f"Port is not on network {ident}.")
    return networks.ensure_for(session, ctx, network)


# --- delete / detach -------------------------------------------------------------------------


def attachment_for(session: Session, ctx: Context, c: Container, network: str | None,
                   port: str | None) -> NetworkAttachment:
    """The attachment ``network_detach`` names (network or port); Zun's 400/404 else."""
    if bool(network) == bool(port):
        raise BadRequest("Either 'network' or 'port' must be given, not both.")
    for att in attachments(session, c.id):
        if port and att.port_id == port:
            return att
        if network:
            net = networks.resolve(session, ctx, network)
            if att.network_id in (network, net.network_id if net else None) or att.container_network_id == network:
                return att
            found = session.scalars(select(Network.id).where(Network.name == network)).all()
            if att.network_id in found:
                return att
    raise BadRequest(f"Container {c.id} is not connected to {'network' if network else 'port'} {network or port}.")


def release(session: Session, att: NetworkAttachment) -> None:
    """Delete the port the container made, or unbind (keep) the user's."""
    port = session.get(Port, att.port_id, with_for_update=True)
    session.delete(att)
    session.flush()
    if port is None:
        return
    if att.auto_delete:
        delete_port(session, port)
        return
    from netbay.network.registry import PORTS

    if port.device_id == att.container_id:
        port.device_id = port.device_owner = port.binding_host_id = ""
        port.status = "DOWN"
        PORTS.touch(port)
        session.flush()
        PORTS.record(session, port, "update")


def delete(session: Session, container_id: str) -> None:
    c = session.get(Container, container_id, with_for_update=True)
    if c is None:
        return
    for att in attachments(session, container_id):
        release(session, att)
    if c.exposed_ports:
        from netbay.network.registry import SECURITY_GROUPS

        group = session.scalars(select(SecurityGroup.id).where(SecurityGroup.project_id == c.project_id,
                                                               SecurityGroup.name == expose_group_name(c.id))).first()
        if group is not None:
            SECURITY_GROUPS.delete(session, Context.admin(c.project_id), group)
    session.delete(c)
    session.flush()


def set_state(session: Session, container_id: str, **values: Any) -> None:
    from netbay.store.models import utcnow

    c = session.get(Container, container_id, with_for_update=True)
    if c is not None:
        for key, value in values.items():
            setattr(c, key, value)
        c.updated_at = utcnow()
