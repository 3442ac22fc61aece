"""Errors the services raise; each API family renders them in its own format.

``kind`` is the name Neutron uses in ``NeutronError.type`` (``NetworkNotFound``,
``IpAddressGenerationFailure`` …), so the network API can answer exactly as
Neutron does without the services knowing about HTTP bodies.
"""

from __future__ import annotations


class NetbayError(Exception):
    status = 500
    kind = "NetbayError"

    def __init__(self, message: str, *, kind: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        if kind:
            self.kind = kind


class BadRequest(NetbayError):
    status = 400
    kind = "HTTPBadRequest"


class Unauthorized(NetbayError):
    status = 401
    kind = "HTTPUnauthorized"


class Forbidden(NetbayError):
    status = 403
    kind = "HTTPForbidden"


class PolicyNotAuthorized(Forbidden):
    """Neutron's name for a policy refusal (the ``type`` of its error body)."""

    kind = "PolicyNotAuthorized"


class NotImplementedByNeutron(NetbayError):
    """A call Neutron routes but its plugin does not implement (a metering label's
    update): 501, its body keyed ``NotImplementedError``, not ``NeutronError``."""

    status = 501
    kind = "NotImplementedError"


class NotFound(NetbayError):
    status = 404
    kind = "HTTPNotFound"


class Conflict(NetbayError):
    status = 409
    kind = "Conflict"


class PreconditionFailed(NetbayError):
    status = 412
    kind = "HTTPPreconditionFailed"


def not_found(resource: str, resource_id: str | None) -> NotFound:
    """``NetworkNotFound: Network X could not be found.`` as Neutron words it."""
    kind, template = _NOT_FOUND.get(
        resource, (resource.title().replace("_", "") + "NotFound", resource + " {} could not be found.")
    )
    return NotFound(template.format(resource_id), kind=kind)


def policy_refused(action: str, attribute: str = "", subs: tuple[str, ...] = ()) -> PolicyNotAuthorized:
    """Neutron's policy refusal, worded as oslo.policy prints the rule it checked:
    ``rule:A``; with an attribute ``(rule:A and rule:A:x)``; with the attribute's
    given sub-attributes ``(rule:A and (rule:A:x and (rule:A:x:s and …)))``."""
    rule = f"rule:{action}"
    if attribute:
        inner = f"rule:{action}:{attribute}"
        if subs:
            inner = f"({inner} and ({' and '.join(f'rule:{action}:{attribute}:{s}' for s in subs)}))"
        rule = f"({rule} and {inner})"
    return PolicyNotAuthorized(f"{rule} is disallowed by policy")


def invalid_operation(reason: str) -> BadRequest:
    """neutron-lib's ``InvalidInput`` (a converter's or a plugin's refusal), in its words."""
    return BadRequest(f"Invalid input for operation: {reason}.", kind="InvalidInput")


def invalid_input(attribute: str, reason: str) -> BadRequest:
    return BadRequest(f"Invalid input for {attribute}. Reason: {reason}.")


def from_status(status: int, message: str, kind: str | None = None) -> NetbayError:
    """A peer's refusal (netbay's own API, a cloud's Neutron) as the error of its status;
    a status without a class of its own keeps its number."""
    cls = _BY_STATUS.get(status, NetbayError)
    err = cls(message, kind=kind)
    if cls is NetbayError:
        err.status = status
    return err


_NOT_FOUND = {
    "network": ("NetworkNotFound", "Network {} could not be found."),
    "subnet": ("SubnetNotFound", "Subnet {} could not be found."),
    "subnetpool": ("SubnetPoolNotFound", "Subnet pool {} could not be found."),
    "port": ("PortNotFound", "Port {} could not be found."),
    "router": ("RouterNotFound", "Router {} could not be found"),
    "floatingip": ("FloatingIPNotFound", "Floating IP {} could not be found"),
    "security_group": ("SecurityGroupNotFound", "Security group {} does not exist"),
    "security_group_rule": ("SecurityGroupRuleNotFound", "Security group rule {} does not exist"),
    "address_scope": ("AddressScopeNotFound", "Address scope {} could not be found."),
}

_BY_STATUS: dict[int, type[NetbayError]] = {
    cls.status: cls for cls in (BadRequest, Unauthorized, Forbidden, NotFound, Conflict, PreconditionFailed)
}
