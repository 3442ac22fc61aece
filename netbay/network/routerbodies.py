"""The bodies a router's API takes (create, update, ``external_gateway_info``, ``routes``),
the device owners of its ports, and Neutron's router ``BadRequest``."""

from __future__ import annotations

from pydantic import model_validator

from netbay.errors import BadRequest
from netbay.network.types import CIDR, UUID, Body, Bool, IPAddress, Name, ProjectID, Tags, Text

ROUTER_INTERFACE = "network:router_interface"
ROUTER_GATEWAY = "network:router_gateway"


def bad_router(msg: str) -> BadRequest:
    """Neutron's ``BadRequest(resource='router', msg=...)``."""
    return BadRequest(f"Bad router request: {msg}.", kind="BadRequest")


class ExternalFixedIP(Body):
    subnet_id: UUID | None = None
    ip_address: IPAddress | None = None


class GatewayInfo(Body):
    """``external_gateway_info``: ``{}`` (or null) clears the gateway."""

    network_id: UUID | None = None
    enable_snat: Bool | None = None
    external_fixed_ips: list[ExternalFixedIP] | None = None

    @model_validator(mode="after")
    def _network_required(self) -> GatewayInfo:
        if self.model_fields_set and self.network_id is None:
            raise ValueError("Validation of dictionary's keys failed. Expected keys: {'network_id'} "
                             f"Provided keys: {sorted(self.model_fields_set)}")
        seen: set[str] = set()
        for fixed in self.external_fixed_ips or []:
            if fixed.ip_address in seen:
                raise ValueError(f"Duplicate IP address '{fixed.ip_address}'")
            if fixed.ip_address:
                seen.add(fixed.ip_address)
        return self

    @property
    def clears(self) -> bool:
        return self.network_id is None


class Route(Body):
    destination: CIDR
    nexthop: IPAddress


class RouterCreate(Body):
    name: Name = ""
    description: Text = ""
    admin_state_up: Bool = True
    external_gateway_info: GatewayInfo | None = None
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class RouterUpdate(Body):
    name: Name | None = None
    description: Text | None = None
    admin_state_up: Bool | None = None
    external_gateway_info: GatewayInfo | None = None
    routes: list[Route] | None = None
