"""The ADD result in the configuration's CNI version (0.3.x/0.4.0 ``ips[].version``;
1.1 ``interfaces[].mtu``), with the container end only: the fabric end lives in
netbay's fabric namespace, not in the host's, so the runtime has nothing to do with it."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any


def render(version: str, ifname: str, mac: str, mtu: int, netns: str,
           addresses: Sequence[tuple[str, Mapping[str, Any]]], routes: Sequence[tuple[str, str]],
           dns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``addresses``: (address/prefix, its subnet); ``routes``: (destination, next hop);
    ``dns``: the result's ``dns`` (a kuryr cluster's resolver), else the subnets' nameservers."""
    legacy = version.startswith("0.")
    iface: dict[str, Any] = {"name": ifname, "mac": mac, "sandbox": netns}
    if version == "1.1.0":
        iface["mtu"] = mtu
    ips = []
    for cidr, subnet in addresses:
        ip: dict[str, Any] = {"interface": 0, "address": cidr}
        if legacy:
            ip["version"] = str(ipaddress.ip_interface(cidr).version)
        if subnet.get("gateway_ip"):
            ip["gateway"] = subnet["gateway_ip"]
        ips.append(ip)
    out: dict[str, Any] = {"cniVersion": version, "interfaces": [iface], "ips": ips,
                           "routes": [{"dst": dst, "gw": gw} for dst, gw in routes]}
    if dns is not None:
        out["dns"] = dict(dns)
        return out
    nameservers = sorted({ns for _c, s in addresses for ns in s.get("dns_nameservers") or ()})
    out["dns"] = {"nameservers": nameservers} if nameservers else {}
    return out
