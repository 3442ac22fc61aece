"""Sandboxes: a network namespace ports plug into, as a first-class object.

A sandbox is what a container's network is without the container: the dataplane
agent makes a namespace for it and wires each of its ports in as ``eth<seq>``.
A sandbox either makes its ports (one per network asked for; deleted with it) or
is given existing ports (bound to it, unbound again when it goes). Binding a port
that already has a device is refused (409) and nothing is left half-made: every
call runs in the caller's one transaction.
"""

from __future__ import annotations

import socket
from typing import Annotated, Any

from pydantic import AfterValidator
from sqlalchemy.orm import Session, lazyload

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, NotFound, policy_refused
from netbay.network.networks import NETWORKS
from netbay.network.ports import PORTS, create_port, delete_port
from netbay.network.resource import Filter, Resource, standard, to_int
from netbay.network.types import UUID, Body, Labels, Name, ProjectID, Text
from netbay.store import labels as labellib
from netbay.store.models import Network, Port, Sandbox, SandboxPort, new_id

SANDBOX_OWNER = "netbay:sandbox"
STATUSES = {"BUILD", "ACTIVE", "DOWN", "ERROR"}




def _unique(ids: list[str]) -> list[str]:
    if len(set(ids)) != len(ids):
        raise ValueError("Duplicate items in the list")
    return ids


class SandboxCreate(Body):
    name: Name = ""
    description: Text = ""
    ports: Annotated[list[UUID], AfterValidator(_unique)] | None = None
    networks: list[UUID] | None = None
    host: Name | None = None
    labels: Labels | None = None
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


def interface(seq: int) -> str:
    """The interface name of a sandbox's ``seq``-th port."""
    return f"eth{seq}"


def port_in_use(port: Port) -> Conflict:
    return Conflict(f"Unable to complete operation on port {port.id} for network {port.network_id}. "
                    f"Port already has an attached device {port.device_id}.", kind="PortInUse")


def sandbox_not_found(sandbox_id: str) -> NotFound:
    return NotFound(f"Sandbox {sandbox_id} could not be found.", kind="SandboxNotFound")


class Sandboxes(Resource):
    member = "sandbox"
    collection = "sandboxes"
    model = Sandbox
    has_tags = False
    create_body = SandboxCreate
    update_body = None
    filters = {
        "name": Filter(Sandbox.name),
        "description": Filter(Sandbox.description),
        "project_id": Filter(Sandbox.project_id),
        "tenant_id": Filter(Sandbox.project_id),
        "status": Filter(Sandbox.status),
        "host": Filter(Sandbox.host),
        "revision_number": Filter(Sandbox.revision_number, to_int),
        "created_at": Filter(Sandbox.created_at),
        "updated_at": Filter(Sandbox.updated_at),
    }

    def extra_filter(self, name: str, values: list[str]) -> Any:
        return labellib.clause(Sandbox.labels, values) if name == "labels" else None

    def missing(self, obj_id: str) -> NotFound:
        return sandbox_not_found(obj_id)

    def render(self, session: Session, obj: Sandbox, tags: list[str]) -> dict[str, Any]:
        body = standard(obj, tags)
        body.pop("tags")
        return {
            **body,
            "status": obj.status,
            "host": obj.host,
            "labels": dict(obj.labels or {}),
            "ports": [{"port_id": sp.port_id, "network_id": sp.network_id,
                       "interface": interface(sp.seq), "auto_delete": sp.auto_delete}
                      for sp in obj.ports],
        }

    # -- writing ---------------------------------------------------------------------

    def create(self, session: Session, ctx: Context, body: SandboxCreate) -> Sandbox:
        given = body.given()
        project_id = self.owner_for_create(ctx, given)
        host = given.get("host")
        if host is not None and not ctx.is_admin:
            raise Forbidden("Policy doesn't allow create_sandbox:host to be performed.")
        host = host or socket.gethostname()
        sandbox = Sandbox(id=new_id(), project_id=project_id, name=given.get("name", ""),
                          description=given.get("description", ""), host=host, status="BUILD", ports=[],
                          labels=labellib.strings(given.get("labels")))
        session.add(sandbox)
        session.flush()
        seq = 0
        for port_id in given.get("ports") or []:
            port = PORTS.get(session, ctx, port_id, for_update=True)
            if not ctx.is_admin and port.project_id != ctx.project_id:
                raise Forbidden("Policy doesn't allow update_port to be performed.")
            if port.device_id:
                raise port_in_use(port)
            port.device_id, port.device_owner, port.binding_host_id = sandbox.id, SANDBOX_OWNER, host
            PORTS.touch(port)
            session.flush()
            PORTS.record(session, port, "update")
            sandbox.ports.append(SandboxPort(port_id=port.id, sandbox_id=sandbox.id, network_id=port.network_id,
                                             seq=seq, auto_delete=False))
            seq += 1
        for network_id in given.get("networks") or []:
            network = self._network(session, ctx, project_id, network_id)
            port = create_port(session, project_id=project_id, network=network, device_id=sandbox.id,
                               device_owner=SANDBOX_OWNER, binding_host_id=host,
                               name=f"{sandbox.name or sandbox.id[:8]}-{interface(seq)}")
            PORTS.record(session, port, "create")
            sandbox.ports.append(SandboxPort(port_id=port.id, sandbox_id=sandbox.id, network_id=network.id,
                                             seq=seq, auto_delete=True))
            seq += 1
        session.flush()
        self.record(session, sandbox, "create")
        return sandbox

    @staticmethod
    def _network(session: Session, ctx: Context, project_id: str, network_id: str) -> Network:
        from netbay.errors import not_found
        network = session.scalars(NETWORKS.scoped(ctx).where(Network.id == network_id)
                                  .options(lazyload(Network.subnets))).one_or_none()
        if network is None:
            raise not_found("network", network_id)
        if not ctx.is_admin and not network.shared and network.project_id != project_id:
            raise policy_refused("create_port")  # the port's own refusal (Neutron's words)
        return network

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        """Delete the ports the sandbox made, unbind the ones it was given."""
        sandbox = self.get_owned(session, ctx, obj_id)
        plugged = [(sp.port_id, sp.auto_delete) for sp in sandbox.ports]
        sandbox.ports.clear()  # before the ports: their rows would cascade under the ORM's feet
        session.flush()
        for port_id, auto_delete in plugged:
            port = session.get(Port, port_id, with_for_update=True)
            if port is None:
                continue
            if auto_delete:
                delete_port(session, port)
            elif port.device_id == sandbox.id:
                port.device_id = port.device_owner = port.binding_host_id = ""
                port.status = "DOWN"
                PORTS.touch(port)
                session.flush()
                PORTS.record(session, port, "update")
        self.record(session, sandbox, "delete", None)
        session.delete(sandbox)
        session.flush()

    def get_owned(self, session: Session, ctx: Context, obj_id: str, action: str = "") -> Sandbox:
        obj = self.get(session, ctx, obj_id, for_update=True)
        if not ctx.is_admin and obj.project_id != ctx.project_id:
            raise Forbidden("Policy doesn't allow delete_sandbox to be performed.")
        return obj


SANDBOXES = Sandboxes()


def set_status(session: Session, sandbox_id: str, status: str) -> bool:
    """The dataplane's report on a sandbox; True if it changed."""
    if status not in STATUSES:
        raise BadRequest(f"Invalid input for status. Reason: '{status}' is not in {sorted(STATUSES)}.")
    sandbox = session.get(Sandbox, sandbox_id, with_for_update=True)
    if sandbox is None or sandbox.status == status:
        return False
    sandbox.status = status
    SANDBOXES.touch(sandbox)
    SANDBOXES.record(session, sandbox, "update")
    return True


__all__ = ["SANDBOXES", "SANDBOX_OWNER", "SandboxCreate", "Sandboxes", "interface", "set_status"]
