"""A security group rule's attributes from a request, converted and checked in Neutron's
order and with its wording (ethertype, protocol by name or number, ports or ICMP type
and code, remote prefix), and what makes two rules the same."""

from __future__ import annotations

import ipaddress
from typing import Any

from netbay.errors import BadRequest
from netbay.store.models import SecurityGroupRule

ETHERTYPES = ("IPv4", "IPv6")
DIRECTIONS = ("ingress", "egress")

# neutron_lib.constants.IP_PROTOCOL_MAP: the names a rule's protocol may take.
IP_PROTOCOL_MAP = {
    "ah": 51, "dccp": 33, "egp": 8, "esp": 50, "gre": 47, "icmp": 1, "igmp": 2, "ipip": 4,
    "ipv6-encap": 41, "ipv6-frag": 44, "ipv6-icmp": 58, "icmpv6": 58, "ipv6-nonxt": 59,
    "ipv6-opts": 60, "ipv6-route": 43, "ospf": 89, "pgm": 113, "rsvp": 46, "sctp": 132,
    "tcp": 6, "udp": 17, "udplite": 136, "vrrp": 112,
}
# Protocols with ports (port_range_* are ports) and with ICMP type/code instead.
PORT_PROTOCOLS = {33: "DCCP", 132: "SCTP", 6: "TCP", 17: "UDP", 136: "UDPLITE"}
ICMP_PROTOCOLS = {1, 58}
# Protocols that only exist over IPv6: refused with ethertype IPv4.
IPV6_ONLY = {"ipv6-encap", "ipv6-frag", "ipv6-icmp", "icmpv6", "ipv6-nonxt", "ipv6-opts", "ipv6-route",
             "41", "44", "58", "59", "60", "43"}
ANY_PROTOCOL = ("any", "0")


def vars_of(rule: SecurityGroupRule) -> dict[str, Any]:
    return {k: getattr(rule, k) for k in ("direction", "ethertype", "protocol", "port_range_min",
                                          "port_range_max", "remote_ip_prefix", "remote_group_id",
                                          "remote_address_group_id")}


def checked_rule(given: dict[str, Any]) -> dict[str, Any]:
    """The rule's columns from a request, converted and checked in Neutron's order."""
    direction = given["direction"]
    if direction not in DIRECTIONS:
        raise BadRequest(f"Invalid input for direction. Reason: {direction} is not in valid_values.")
    ethertype = _ethertype(given.get("ethertype", "IPv4"))
    protocol = _protocol(given.get("protocol"), ethertype)
    low = _port_value(given.get("port_range_min"))
    high = _port_value(given.get("port_range_max"))
    prefix = _prefix(given.get("remote_ip_prefix"))
    _check_ports(protocol, low, high)
    if prefix is not None and ethertype != f"IPv{ipaddress.ip_interface(prefix).version}":
        raise BadRequest(f"Conflicting value ethertype {ethertype} for CIDR {prefix}",
                         kind="SecurityGroupRuleParameterConflict")
    if protocol in IPV6_ONLY and ethertype == "IPv4":
        raise BadRequest(f"Invalid ethertype {ethertype} for protocol {protocol}.",
                         kind="SecurityGroupEthertypeConflictWithProtocol")
    remote_group = given.get("remote_group_id")
    address_group = given.get("remote_address_group_id")
    if address_group and (prefix is not None or remote_group):
        raise BadRequest("Invalid input for operation: Only one of remote_ip_prefix or remote_group_id or "
                         "remote_address_group_id may be provided.", kind="SecurityGroupMultipleRemoteEntites")
    if prefix is not None and remote_group:
        raise BadRequest("Only remote_ip_prefix or remote_group_id may be provided.",
                         kind="SecurityGroupRemoteGroupAndRemoteIpPrefix")
    return {"direction": direction, "ethertype": ethertype, "protocol": protocol,
            "port_range_min": low, "port_range_max": high, "remote_ip_prefix": prefix,
            "remote_group_id": remote_group or None, "remote_address_group_id": address_group or None}


def _ethertype(value: Any) -> str:
    if isinstance(value, str):
        for ethertype in ETHERTYPES:
            if value.lower() == ethertype.lower():
                return ethertype
    raise BadRequest(f"Security group rule for ethertype '{value}' not supported. "
                     f"Allowed values are {list(ETHERTYPES)}.", kind="SecurityGroupRuleInvalidEtherType")


def _protocol(value: Any, ethertype: str) -> str | None:
    """A protocol name (lower case) or number as a string; None for any protocol."""
    if value is None or (isinstance(value, str) and value.lower() in ANY_PROTOCOL):
        return None
    protocol: str | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        protocol = str(value) if 0 <= value <= 255 else None
    elif isinstance(value, str):
        if value.isdigit() and len(value) <= 3:
            protocol = str(int(value)) if int(value) <= 255 else None
        elif value.lower() in IP_PROTOCOL_MAP:
            protocol = value.lower()
    if protocol is None:
        names = [None, *IP_PROTOCOL_MAP]
        raise BadRequest(f"Security group rule protocol {value} not supported. Only protocol values "
                         f"{names} and integer representations [0 to 255] are supported.",
                         kind="SecurityGroupRuleInvalidProtocol")
    if protocol == "0":
        return None
    if ethertype == "IPv6":  # legacy ICMP spellings become IPv6 ICMP, as Neutron does
        if protocol in {"icmp", "icmpv6"}:
            return "ipv6-icmp"
        if protocol == "1":
            return "58"
    return protocol


def _protocol_number(protocol: str | None) -> int | None:
    if protocol is None:
        return None
    return IP_PROTOCOL_MAP[protocol] if protocol in IP_PROTOCOL_MAP else int(protocol)


def _port_value(value: Any) -> int | None:
    if value is None:
        return None
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 6:
        number = int(value)
    if number is None or not 0 <= number <= 65535:
        raise BadRequest(f"Invalid value for port {value}.", kind="SecurityGroupInvalidPortValue")
    return number


def _check_ports(protocol: str | None, low: int | None, high: int | None) -> None:
    if low is None and high is None:
        return
    if protocol is None:
        raise BadRequest("Must also specify protocol if port range is given.",
                         kind="SecurityGroupProtocolRequiredWithPorts")
    number = _protocol_number(protocol)
    if number in PORT_PROTOCOLS:
        if low == 0 or high == 0:
            raise BadRequest("Invalid value for port 0.", kind="SecurityGroupInvalidPortValue")
        if low is None or high is None or low > high:
            raise BadRequest("For TCP/UDP protocols, port_range_min must be <= port_range_max",
                             kind="SecurityGroupInvalidPortRange")
    elif number in ICMP_PROTOCOLS:
        for attr, field, value in (("port_range_min", "type", low), ("port_range_max", "code", high)):
            if value is not None and not 0 <= value <= 255:
                raise BadRequest(f"Invalid value for ICMP {field} ({attr}) {value}. It must be 0 to 255.",
                                 kind="SecurityGroupInvalidIcmpValue")
        if low is None:
            raise BadRequest(f"ICMP code (port-range-max) {high} is provided but ICMP type "
                             "(port-range-min) is missing.", kind="SecurityGroupMissingIcmpType")
    else:
        valid = ", ".join(sorted(PORT_PROTOCOLS.values()))
        raise BadRequest(f"Invalid protocol {number} for port range, only supported for {valid} protocols.",
                         kind="SecurityGroupInvalidProtocolForPort")


def _prefix(value: Any) -> str | None:
    """The prefix as Neutron stores it (``convert_ip_prefix_to_cidr``: netaddr's
    ``str(IPNetwork(value))``): host bits kept, the mask added to an address alone
    (``10.0.0.5`` -> ``10.0.0.5/32``), a netmask as a length."""
    if value is None or value == "":
        return None
    try:
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(value)
        return str(ipaddress.ip_interface(value.strip()))
    except ValueError:
        raise BadRequest(f"Invalid CIDR {value} given as IP prefix.", kind="InvalidCIDR") from None


def prefix_filter(value: str) -> str:
    """A ``remote_ip_prefix`` filter value as Neutron converts it before it compares
    (``10.0.0.5`` finds ``10.0.0.5/32``); a value that is no prefix finds nothing."""
    try:
        return _prefix(value) or value
    except BadRequest:
        return value


def rule_key(rule: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two rules the same (Neutron's ``_rule_to_key``): ``tcp`` equals ``6``,
    ``0.0.0.0/0`` equals no prefix, and prefixes compare as written: ``10.0.0.5/24`` is
    not ``10.0.0.0/24``."""
    prefix = rule["remote_ip_prefix"]
    if prefix in {"0.0.0.0/0", "::/0"}:
        prefix = None
    return (rule["direction"], rule["ethertype"], _protocol_number(rule["protocol"]),
            rule["port_range_min"], rule["port_range_max"], rule["remote_group_id"], prefix,
            rule.get("remote_address_group_id"))
