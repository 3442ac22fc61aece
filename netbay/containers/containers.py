"""Containers, their ports and network attachments: the store side of ``/v1/containers``.

Ports, networks and security groups are the network backend's (netbay's own service
or a cloud's Neutron, through :mod:`netbay.containers.neutron`), which is not in
netbay's transaction. So a create checks everything it can first, then makes the
ports in the backend, then writes the container with its attachments in one
transaction; if any step fails, what the backend made is undone (a made port
deleted, a user's port unbound): a container row is only ever committed with its
ports. Docker is not touched here (:mod:`netbay.containers.runner` does that off the
request path), so the API answers at once with the container ``Creating``.

``nets`` entries are Zun's: ``network`` (a container network's uuid or name, or a
netbay network's id or name), ``port`` (a port the caller owns, unbound),
``v4-fixed-ip``, ``v6-fixed-ip``. No entry: Zun's default network rule.
``addresses`` is reported as Zun does: ``{network id: [{addr, version, port,
subnet_id, preserve_on_delete}]}``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.containers import networks, placement, resources, schema
from netbay.containers.neutron import Made, ZunNeutron
from netbay.containers.plugs import Plug, plug, record, release
from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, NotFound
from netbay.runtime import labels as netbay_labels
from netbay.store.db import Store
from netbay.store.models import Container, NetworkAttachment, new_id

STATUSES = ("Creating", "Created", "Running", "Paused", "Stopped", "Restarting", "Rebuilding", "Deleting",
            "Error", "Unknown")


def not_found(ident: str) -> NotFound:
    return NotFound(f"Container {ident} could not be found.")


def get(session: Session, ctx: Context, ident: str, *, for_update: bool = False) -> Container:
    """By uuid or unique name, in the caller's project (another project's: 404); an admin's
    in every project, as Zun's ``get_resource`` looks them up for an admin."""
    for column in (Container.id, Container.name):
        stmt = select(Container).where(column == ident)
        if not ctx.is_admin:
            stmt = stmt.where(Container.project_id == ctx.project_id)
        if for_update:
            stmt = stmt.with_for_update()
        found = session.scalars(stmt).all()
        if len(found) > 1:
            raise Conflict("Multiple containers exist with same name. Please use the container uuid instead.")
        if found:
            return found[0]
    raise not_found(ident)


def attachments(session: Session, container_id: str) -> list[NetworkAttachment]:
    return list(session.scalars(select(NetworkAttachment).where(NetworkAttachment.container_id == container_id)
                                .order_by(NetworkAttachment.seq)))


def addresses(session: Session, container_id: str) -> dict[str, list[dict[str, Any]]]:
    """Zun's ``addresses``, as the port had them when the container took it (Zun keeps them too)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for att in attachments(session, container_id):
        out.setdefault(att.network_id, []).extend(
            {"addr": f["ip_address"], "version": ipaddress.ip_address(f["ip_address"]).version,
             "port": att.port_id, "subnet_id": f["subnet_id"], "preserve_on_delete": not att.auto_delete}
            for f in att.fixed_ips or ())
    return out


def render(session: Session, c: Container) -> dict[str, Any]:
    return {
        "uuid": c.id, "name": c.name, "image": c.image, "command": c.command, "status": c.status,
        "status_reason": c.status_reason or None, "task_state": c.task_state, "cpu": c.cpu, "memory": c.memory,
        "environment": c.environment, "workdir": c.workdir or None, "ports": _port_numbers(c.exposed_ports),
        "hostname": c.hostname or None, "labels": c.labels,
        "addresses": placement.addresses(session, c) if c.cluster_id else addresses(session, c.id),
        "cluster": c.cluster_id or None, "node": c.node or None,
        "image_pull_policy": None, "host": c.host or None, "restart_policy": c.restart_policy,
        "status_detail": None,
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
    """A list (from 1.20) or, as before it, one string split as a shell would (checked by the schema)."""
    if isinstance(value, str):
        import shlex

        return shlex.split(value)
    return value or []


def _exposed(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    out: dict[str, Any] = {}
    for key in value:
        number, _, proto = str(key).partition("/")
        proto = proto or "tcp"
        if not number.isdigit() or not 1 <= int(number) <= 65535 or proto not in ("tcp", "udp"):
            raise schema.invalid("exposed_ports", key, f"'{key}' is not a port[/tcp|udp].")
        out[f"{int(number)}/{proto}"] = {}
    return out


def check_nets(value: Any) -> list[dict[str, Any]]:
    """Zun's ``nets`` entries (one of ``network``/``port``, fixed IPs of their version), 400 else."""
    schema.validate({"type": "object", "properties": {"nets": schema.NETS}}, {"nets": value})
    return value or []


def create(store: Store, neutron: ZunNeutron, body: Any, *, run: bool, host: str,
           version: tuple[int, int] = (1, 40)) -> str:
    """Check, make the ports in the backend, then write the container with them; the
    backend's objects are undone if any later step fails. The new container's uuid."""
    ctx = neutron.ctx
    with store.read() as s:
        fields = _fields(s, ctx, body, run=run, host=host, version=version)
    made = Made(neutron)
    try:
        plugs: list[Plug] = []
        if not fields["cluster_id"]:
            groups = body.get("security_groups")   # names or ids
            groups = neutron.security_groups(groups) if groups is not None else None
            if fields["exposed_ports"]:
                # Zun's: the groups asked for and the one made for the ports; none asked
                # for, only that one (not also the project's default).
                exposed = neutron.expose_group(fields["id"], fields["exposed_ports"])
                made.group(exposed)
                groups = [*(groups or []), exposed]
            fields["security_groups"] = groups or []
            for seq, entry in enumerate(check_nets(body.get("nets")) or [{}]):
                plugs.append(plug(store, neutron, made, fields, entry, seq, groups, taken=plugs))
        store.retrying(lambda s: _insert(s, ctx, fields, plugs))
    except BaseException:
        made.undo()
        raise
    return fields["id"]


def _fields(session: Session, ctx: Context, body: Any, *, run: bool, host: str,
            version: tuple[int, int]) -> dict[str, Any]:
    """The new container's columns from Zun's body, checked (nothing made yet): its schema
    at ``version``, then what netbay would not honour, netbay's own labels, ``host``."""
    schema.validate(schema.container_create(version), body)
    refused = schema.unhonoured(body)
    if refused is not None:
        raise refused
    _own_labels(body.get("labels") or {})
    if body.get("host") is not None:
        if not ctx.is_admin:
            raise Forbidden("Policy doesn't allow container:create:requested_destination to be performed.")
        if body["host"] != host:
            raise schema.invalid("host", body["host"], f"netbay runs containers on this machine only ({host}).")
    name = body.get("name") or ""
    unique_name(session, ctx, name)
    hints = placement.hinted(body.get("hints"))
    if hints and any(body.get(k) for k in ("nets", "security_groups", "exposed_ports")):
        raise BadRequest("A container placed on a cluster node (hints cluster=) is plugged as a pod is: "
                         "it takes no 'nets', 'security_groups' or 'exposed_ports'.")
    check_nets(body.get("nets"))
    exposed = _exposed(body.get("exposed_ports"))
    cluster_id, node = placement.place(session, ctx, hints) if hints else ("", "")
    container_id = new_id()
    return dict(id=container_id, **resources.from_body(body, container_id), project_id=ctx.project_id, user_id=ctx.user_id, name=name, image=body["image"],
                command=_command(body.get("command")), environment=body.get("environment") or {},
                labels=body.get("labels") or {}, workdir=body.get("workdir") or "",
                hostname=body.get("hostname") or "", status="Creating", status_reason="",
                task_state="container_creating", run=run, host=host, docker_id="", security_groups=[],
                exposed_ports=exposed, cluster_id=cluster_id, node=node)


def _own_labels(labels: dict[str, str]) -> None:
    """400 for a label netbay sets itself: the Kubernetes controller and the runner trust them."""
    for key in labels:
        if netbay_labels.reserved(key):
            prefixes = " or ".join(map(repr, netbay_labels.RESERVED))
            raise schema.invalid("labels", key, f"Labels starting with {prefixes} are netbay's own.")


def unique_name(session: Session, ctx: Context, name: str, project_id: str | None = None) -> None:
    """409 if ``name`` is taken in the project (the caller's unless another is given)."""
    if name and session.scalars(select(Container.id).where(Container.project_id == (project_id or ctx.project_id),
                                                           Container.name == name)).first():
        raise Conflict(f"A container with name {name} already exists.")


def _insert(session: Session, ctx: Context, fields: dict[str, Any], plugs: list[Plug]) -> None:
    unique_name(session, ctx, fields["name"])
    session.add(Container(**fields))
    session.flush()
    for p in plugs:
        record(session, ctx, fields["id"], p)


def attach(store: Store, neutron: ZunNeutron, ident: str, entry: dict[str, Any],
           check: Any) -> tuple[str, str]:
    """Zun's ``network_attach``: the port made or bound in the backend, then the attachment
    written with the container's ``network_attaching`` (``check(c)`` refusing a container
    in the wrong state, before and again at the write); the port undone if that fails.
    (container uuid, port id)."""
    ctx = neutron.ctx
    entry = check_nets([entry])[0]
    with store.read() as s:
        c = get(s, ctx, ident)
        check(c)
        fields = {"id": c.id, "name": c.name, "host": c.host}
        groups = c.security_groups or None
        seq = max((a.seq for a in attachments(s, c.id)), default=-1) + 1
    made = Made(neutron)
    try:
        p = plug(store, neutron, made, fields, entry, seq, groups)

        def write(s: Session) -> None:
            found = get(s, ctx, c.id, for_update=True)
            check(found)
            p.seq = max((a.seq for a in attachments(s, c.id)), default=-1) + 1
            record(s, ctx, c.id, p)
            found.task_state = "network_attaching"
        store.retrying(write)
    except BaseException:
        made.undo()
        raise
    return c.id, p.port["id"]


# --- delete / detach -------------------------------------------------------------------------


def attachment_for(session: Session, neutron: ZunNeutron, c: Container, network: str | None,
                   port: str | None) -> NetworkAttachment:
    """The attachment ``network_detach`` names (network or port); Zun's 400/404 else."""
    if bool(network) == bool(port):
        raise BadRequest("Either 'network' or 'port' must be given, not both.")
    for att in attachments(session, c.id):
        if port and att.port_id == port:
            return att
        if network:
            net = networks.resolve(session, neutron.ctx, network)
            if att.network_id in (network, net.network_id if net else None) or att.container_network_id == network:
                return att
            found = {n["id"] for n in neutron.backend.list("network", name=network)}
            if att.network_id in found:
                return att
    raise BadRequest(f"Container {c.id} is not connected to {'network' if network else 'port'} {network or port}.")


def delete(store: Store, neutron: ZunNeutron, container_id: str) -> None:
    """Release its ports and exposed-ports group in the backend, then drop the rows. A
    failure midway leaves the container (``Deleting``) for a retry: what is gone stays gone."""
    with store.read() as s:
        c = s.get(Container, container_id)
        if c is None:
            return
        held = [(a.port_id, a.auto_delete) for a in attachments(s, container_id)]
        exposed = bool(c.exposed_ports)
    for port_id, auto_delete in held:
        release(neutron, container_id, port_id, auto_delete)
    if exposed:
        neutron.delete_expose_group(container_id)

    def drop(s: Session) -> None:
        found = s.get(Container, container_id, with_for_update=True)
        if found is not None:
            s.delete(found)
            s.flush()
    store.retrying(drop)


def set_state(session: Session, container_id: str, **values: Any) -> None:
    from netbay.store.models import utcnow

    c = session.get(Container, container_id, with_for_update=True)
    if c is not None:
        for key, value in values.items():
            setattr(c, key, value)
        c.updated_at = utcnow()
