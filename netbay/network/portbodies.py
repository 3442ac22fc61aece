"""The Port API's request bodies (create, update) and their field checks, with Neutron's
wording: absent means "not given", an explicit null is refused as Neutron refuses it."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from netbay.network.dhcp_opts import ExtraDhcpOpts
from netbay.network.types import MAC, UUID, Body, Bool, DNSName, IPAddress, Name, ProjectID, Tags, Text


def _ip_or_cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_interface(value)) if "/" in value else str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"'{value}' is neither a valid IP address, nor is it a valid IP subnet") from None


def _no_duplicate_ips(items: list[FixedIP]) -> list[FixedIP]:
    seen: set[str] = set()
    for item in items:
        if item.ip_address is not None:
            if item.ip_address in seen:
                raise ValueError(f"Duplicate IP address '{item.ip_address}'")
            seen.add(item.ip_address)
    return items


IPOrCIDR = Annotated[str, StringConstraints(max_length=64), AfterValidator(_ip_or_cidr)]


class FixedIP(Body):
    subnet_id: UUID | None = None
    ip_address: IPAddress | None = None


class AddressPair(Body):
    ip_address: IPOrCIDR
    mac_address: MAC | None = None


FixedIPs = Annotated[list[FixedIP], AfterValidator(_no_duplicate_ips)]


def _no_duplicate_ids(ids: list[str]) -> list[str]:
    """Neutron's ``type:uuid_list``: a group named twice is a 400, not silently one."""
    dups = [i for i in dict.fromkeys(ids) if ids.count(i) > 1]
    if dups:
        raise ValueError(f"Duplicate items in the list: '{', '.join(dups)}'")
    return ids


SecurityGroupIds = Annotated[list[UUID], AfterValidator(_no_duplicate_ids)]


class PortCreate(Body):
    name: Name = ""
    description: Text = ""
    network_id: UUID = None  # type: ignore[assignment]  # required: refused in create with Neutron's words
    admin_state_up: Bool = True
    mac_address: MAC = None  # type: ignore[assignment]
    fixed_ips: FixedIPs = None  # type: ignore[assignment]
    device_id: Name = ""
    device_owner: Name = ""
    binding_host_id: Name = Field("", alias="binding:host_id")
    security_groups: SecurityGroupIds | None = None
    allowed_address_pairs: list[AddressPair] | None = None
    port_security_enabled: Bool = None  # type: ignore[assignment]
    extra_dhcp_opts: ExtraDhcpOpts | None = None
    qos_policy_id: UUID | None = None
    dns_name: DNSName = ""
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class PortUpdate(Body):
    name: Name = None  # type: ignore[assignment]
    description: Text = None  # type: ignore[assignment]
    admin_state_up: Bool = None  # type: ignore[assignment]
    mac_address: MAC = None  # type: ignore[assignment]
    fixed_ips: FixedIPs = None  # type: ignore[assignment]
    device_id: Name = None  # type: ignore[assignment]
    device_owner: Name = None  # type: ignore[assignment]
    binding_host_id: Name = Field(None, alias="binding:host_id")  # type: ignore[assignment]
    security_groups: SecurityGroupIds | None = None
    allowed_address_pairs: list[AddressPair] | None = None
    port_security_enabled: Bool = None  # type: ignore[assignment]
    extra_dhcp_opts: ExtraDhcpOpts | None = None
    qos_policy_id: UUID | None = None
    dns_name: DNSName = None  # type: ignore[assignment]
