"""Floating IP port forwardings (Neutron's ``floating-ip-port-forwarding``): a protocol
and port of a floating IP DNATed to a fixed IP and port of an internal port.

A sub-resource of ``/floatingips/{id}``. A floating IP forwards ports or is associated
with one port, never both; its first forwarding picks the router (as an association
does) and its last one lets it go. Each change re-records the floating IP, whose
``port_forwardings`` carry them to the dataplane (DNAT maps in the router's table).
A forwarding may span a port range (``floating-ip-port-forwarding-port-ranges``,
:mod:`netbay.network.pfranges`); the dataplane gets one DNAT element per port.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from sqlalchemy import and_, false, or_, select
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.network import pfranges, ports
from netbay.network.floatingips import FLOATINGIPS, _router_for
from netbay.network.pfranges import PortRange, RangeField
from netbay.network.ports import PORTS
from netbay.network.resource import Filter, Resource, select_fields, to_int
from netbay.network.types import UUID, Body, IPAddress, Text, Unconvertible
from netbay.store.models import FloatingIP, PortForwarding

# neutron-lib's ``IPTABLES_PROTOCOL_MAP`` names, which its API takes; the dataplane
# forwards those with ports (l3/spec.py), as Neutron's L3 agent can.
PROTOCOLS = ("dccp", "icmp", "ipv6-icmp", "sctp", "tcp", "udp")


def _protocol(value: Any) -> Any:
    """neutron-lib's ``convert_to_protocol`` (a name it knows, or 0..255), then
    ``type:values`` over the names."""
    if value in PROTOCOLS:
        return value
    if not isinstance(value, str):
        raise Unconvertible(f"Input value {value} must be string type")
    lowered = value.lower()
    try:
        number = None if lowered in PROTOCOLS else int(value)
    except (TypeError, ValueError):
        number = -1
    if number is not None and not 0 <= number <= 255:
        raise Unconvertible(f"IP protocol '{value}' is not supported. Only protocol names and their integer "
                            "representation (0 to 255) are supported")
    raise ValueError(f"{value} is not in valid_values")


def _port_number(value: Any) -> Any:
    """neutron-lib's ``convert_to_int`` then ``validate_range`` (1, 65535), in its words."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"'{value}' is not an integer") from None
    if number < 1:
        raise ValueError(f"'{number}' is too small - must be at least '1'")
    if number > 65535:
        raise ValueError(f"'{number}' is too large - must be no larger than '65535'")
    return number


PortNumber = Annotated[int, BeforeValidator(_port_number)]
Protocol = Annotated[str, BeforeValidator(_protocol)]


class PortForwardingCreate(Body):
    external_port: PortNumber | None = None
    internal_port: PortNumber | None = None
    external_port_range: RangeField | None = None
    internal_port_range: RangeField | None = None
    internal_ip_address: IPAddress | None = None
    protocol: Protocol | None = None
    internal_port_id: UUID | None = None
    description: Text = ""
    project_id: Text | None = Field(default=None)


class PortForwardingUpdate(Body):
    external_port: PortNumber | None = None
    internal_port: PortNumber | None = None
    external_port_range: RangeField | None = None
    internal_port_range: RangeField | None = None
    internal_ip_address: IPAddress | None = None
    protocol: Protocol | None = None
    internal_port_id: UUID | None = None
    description: Text | None = None


def bad_pf(msg: str) -> BadRequest:
    """Neutron's ``BadRequest(resource='port_forwarding', msg=...)``."""
    return BadRequest(f"Bad port_forwarding request: {msg}.", kind="BadRequest")


def _asked_range(given: dict[str, Any], side: str) -> PortRange | None:
    """The ``side`` (external/internal) ports asked: a single port wins over a range
    given beside it, as in Neutron (its single port is written last)."""
    single = given.get(f"{side}_port")
    if single is not None:
        return single, single
    asked: PortRange | None = given.get(f"{side}_port_range")
    return asked


def _set_ranges(pf: PortForwarding, external: PortRange, internal: PortRange) -> None:
    if not pfranges.relation_ok(internal, external):
        raise bad_pf("Invalid ranges of internal and/or external ports. The relation between internal and "
                     "external ports must be N-N or 1-N")
    pf.external_port, pf.external_port_end = external
    pf.internal_port, pf.internal_port_end = internal


def ranges_of(pf: PortForwarding) -> tuple[PortRange, PortRange]:
    """(external, internal) ranges of a stored forwarding."""
    return (pf.external_port, pf.external_port_end), (pf.internal_port, pf.internal_port_end)


class PortForwardings(Resource):
    member = "port_forwarding"
    collection = "port_forwardings"
    model = PortForwarding
    has_tags = False
    create_body = PortForwardingCreate
    update_body = PortForwardingUpdate
    readonly = {"id"}
    filters = {
        "floatingip_id": Filter(PortForwarding.floatingip_id),
        "external_port": Filter(PortForwarding.external_port, to_int),
        "protocol": Filter(PortForwarding.protocol),
        "internal_port_id": Filter(PortForwarding.internal_port_id),
    }

    def extra_filter(self, name: str, values: list[str]) -> ColumnElement[bool] | None:
        if name != "external_port_range":
            return None
        try:
            asked = [pfranges.parse_range(v) for v in values]
        except ValueError as exc:
            raise BadRequest(f"Invalid input for external_port_range. Reason: {exc}.") from None
        return or_(false(), *(and_(PortForwarding.external_port == a, PortForwarding.external_port_end == b)
                              for a, b in asked))

    def render(self, session: Session, obj: PortForwarding, tags: list[str]) -> dict[str, Any]:
        """Neutron's view: both ranges always; a side's single port when it is one port."""
        external, internal = ranges_of(obj)
        return {
            "id": obj.id,
            "external_port": external[0] if external[0] == external[1] else None,
            "internal_port": internal[0] if internal[0] == internal[1] else None,
            "external_port_range": pfranges.text(external),
            "internal_port_range": pfranges.text(internal),
            "internal_ip_address": obj.internal_ip_address,
            "protocol": obj.protocol,
            "internal_port_id": obj.internal_port_id,
            "description": obj.description,
        }

    # -- reading ----------------------------------------------------------------------

    def floatingip(self, session: Session, ctx: Context, fip_id: str, *, for_update: bool = False) -> FloatingIP:
        return FLOATINGIPS.get(session, ctx, fip_id, for_update=for_update)

    def of(self, session: Session, ctx: Context, fip_id: str, pf_id: str, *, for_update: bool = False
           ) -> PortForwarding:
        self.floatingip(session, ctx, fip_id)
        stmt = select(PortForwarding).where(PortForwarding.id == pf_id, PortForwarding.floatingip_id == fip_id)
        pf = session.scalars(stmt.with_for_update() if for_update else stmt).one_or_none()
        if pf is None:
            raise NotFound(f"Port Forwarding {pf_id} could not be found.", kind="PortForwardingNotFound")
        return pf

    def show_one(self, session: Session, ctx: Context, fip_id: str, pf_id: str, fields: list[str]
                 ) -> dict[str, Any]:
        return select_fields(self.render(session, self.of(session, ctx, fip_id, pf_id), []), fields)

    # -- writing ----------------------------------------------------------------------

    def create_one(self, session: Session, ctx: Context, fip_id: str, body: PortForwardingCreate
                   ) -> dict[str, Any]:
        given = body.given()
        external, internal = _asked_range(given, "external"), _asked_range(given, "internal")
        for required, value in (("external_port", external), ("internal_port", internal),
                                *((k, given.get(k)) for k in ("internal_ip_address", "protocol", "internal_port_id"))):
            if value is None:
                raise BadRequest(f"Failed to parse request. Required attribute '{required}' not specified")
        assert external is not None and internal is not None
        fip = FLOATINGIPS.get_owned(session, ctx, fip_id)
        pf = PortForwarding(project_id=fip.project_id, floatingip_id=fip.id,
                            description=body.description or "",
                            **{k: given[k] for k in ("internal_ip_address", "protocol", "internal_port_id")})
        _set_ranges(pf, external, internal)
        self._check_collisions(session, pf)
        self._check_no_binding_fip(session, pf)
        if fip.fixed_port_id:
            raise Conflict(
                f"Cannot associate floating IP {fip.floating_ip_address} ({fip.id}) with port "
                f"{pf.internal_port_id} using fixed IP {pf.internal_ip_address}, as that fixed IP already "
                f"has a floating IP on external network {fip.floating_network_id}.",
                kind="FloatingIPPortAlreadyAssociated")
        self._place(session, ctx, fip, pf)
        session.add(pf)
        self._changed(session, fip)
        return self.render(session, pf, [])

    def update_one(self, session: Session, ctx: Context, fip_id: str, pf_id: str, body: PortForwardingUpdate
                   ) -> dict[str, Any]:
        given = {k: v for k, v in body.given().items() if v is not None or k == "description"}
        fip = FLOATINGIPS.get_owned(session, ctx, fip_id)
        pf = self.of(session, ctx, fip_id, pf_id, for_update=True)
        external, internal = ranges_of(pf)
        _set_ranges(pf, _asked_range(given, "external") or external, _asked_range(given, "internal") or internal)
        for key, value in given.items():
            if not key.endswith(("_port", "_port_range")):
                setattr(pf, key, value if key != "description" else (value or ""))
        if "internal_port_id" in given or "internal_ip_address" in given:
            self._check_no_binding_fip(session, pf)
            self._place(session, ctx, fip, pf)
        self._check_collisions(session, pf)
        self._changed(session, fip)
        return self.render(session, pf, [])

    def delete_one(self, session: Session, ctx: Context, fip_id: str, pf_id: str) -> None:
        fip = FLOATINGIPS.get_owned(session, ctx, fip_id)
        pf = self.of(session, ctx, fip_id, pf_id, for_update=True)
        session.delete(pf)
        session.flush()
        if not session.scalars(select(PortForwarding.id).where(PortForwarding.floatingip_id == fip.id)).first():
            fip.router_id = None
        self._changed(session, fip)

    # -- rules --------------------------------------------------------------------------

    def _place(self, session: Session, ctx: Context, fip: FloatingIP, pf: PortForwarding) -> None:
        """The internal address must be an IPv4 fixed IP of the port, behind the router
        the floating IP already uses (or the one that joins it to the outside)."""
        port = PORTS.get(session, ctx, pf.internal_port_id, for_update=True)
        v4 = [ip for ip in port.fixed_ips if ipaddress.ip_address(ip.ip_address).version == 4]
        if not v4:
            raise bad_pf(f"Requested internal port {port.id} must allocate an IPv4 address at least")
        match = next((ip for ip in v4 if ip.ip_address == pf.internal_ip_address), None)
        if match is None:
            fixed = [{"subnet_id": ip.subnet_id, "ip_address": ip.ip_address} for ip in v4]
            raise bad_pf(f"Requested internal IP address {pf.internal_ip_address} is not suitable for internal "
                         f"neutron port {port.id}, as its fixed_ips are {fixed}")
        try:
            router_id = _router_for(session, port, match.subnet_id, fip.floating_network_id)
        except NotFound:
            raise bad_pf(f"External network {fip.floating_network_id} is not reachable from subnet "
                         f"{match.subnet_id}. Cannot set Port forwarding for port {port.id} with Floating IP "
                         f"{fip.id}") from None
        if fip.router_id and fip.router_id != router_id:
            raise bad_pf(f"The Floating IP {fip.id} had been set on router {fip.router_id}, the internal "
                         f"Neutron port {port.id} can not reach it")
        fip.router_id = router_id

    @staticmethod
    def _check_collisions(session: Session, pf: PortForwarding) -> None:
        """Neutron's ``_check_port_collisions``: no two forwardings of a floating IP and
        protocol whose external ranges overlap; none of an internal address and protocol
        whose internal ranges overlap."""
        others = select(PortForwarding).where(PortForwarding.protocol == pf.protocol)
        if pf.id:
            others = others.where(PortForwarding.id != pf.id)
        external, internal = ranges_of(pf)
        for other in session.scalars(others.where(PortForwarding.floatingip_id == pf.floatingip_id)):
            if pfranges.overlap(ranges_of(other)[0], external):
                raise bad_pf("There is a port collision with the external_port_range. The following ranges "
                             f"collide: {pfranges.text(ranges_of(other)[0])} and {pfranges.text(external)}")
        for other in session.scalars(others.where(PortForwarding.internal_port_id == pf.internal_port_id,
                                                  PortForwarding.internal_ip_address == pf.internal_ip_address)):
            if pfranges.overlap(ranges_of(other)[1], internal):
                raise bad_pf("There is a port collision with the internal_port_range. The following ranges "
                             f"collide: {pfranges.text(ranges_of(other)[1])} and {pfranges.text(internal)}")

    @staticmethod
    def _check_no_binding_fip(session: Session, pf: PortForwarding) -> None:
        bound = session.scalars(select(FloatingIP).where(FloatingIP.fixed_port_id == pf.internal_port_id)).first()
        if bound is not None:
            raise Conflict(f"Cannot create port forwarding to floating IP {bound.floating_ip_address} ({bound.id}) "
                           f"with port {pf.internal_port_id} using fixed IP {pf.internal_ip_address}, as that port "
                           "already has a binding floating IP.", kind="PortHasBindingFloatingIP")

    @staticmethod
    def _changed(session: Session, fip: FloatingIP) -> None:
        """The floating IP re-recorded: its ``port_forwardings`` reach the agent."""
        session.flush()
        FLOATINGIPS.record(session, fip, "update")


PORT_FORWARDINGS = PortForwardings()


def _forget_port(session: Session, port_id: str) -> None:
    """An internal port going away takes its forwardings along (as Neutron does)."""
    for pf in list(session.scalars(select(PortForwarding).where(PortForwarding.internal_port_id == port_id))):
        fip = session.get_one(FloatingIP, pf.floatingip_id)
        session.delete(pf)
        session.flush()
        if not session.scalars(select(PortForwarding.id).where(PortForwarding.floatingip_id == fip.id)).first():
            fip.router_id = None
        FLOATINGIPS.record(session, fip, "update")


ports.on_delete.insert(0, _forget_port)

__all__ = ["PORT_FORWARDINGS", "PortForwardings"]
