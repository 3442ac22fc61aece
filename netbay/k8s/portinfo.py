"""The pod annotation carrying its port, as kuryr's API watcher wrote one.

kuryr-kubernetes annotated each pod with its VIF (``openstack.org/kuryr-vif``, an
os-vif object) so the kubelet's CNI driver could plug it without asking Neutron.
netbay writes the same facts under its own name — port id, MAC, addresses,
network, subnet (CIDR, gateway) — as plain JSON, not os-vif primitives (so no tool
mistakes it for kuryr's format), shaped like kuryr's KuryrPort ``status.vifs``:
``{"eth0": {"default": true, "vif": {...}}}``. The text is canonical (sorted keys),
so an unchanged port gives the identical string and no second PATCH.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

ANNOTATION = "netbay.io/vif"


def vif(port: Mapping[str, Any], subnet: Mapping[str, Any] | None) -> dict[str, Any]:
    subnet = subnet or {}
    return {
        "id": port["id"],
        "address": port.get("mac_address"),
        "network_id": port["network_id"],
        "ips": [{"ip_address": ip["ip_address"], "subnet_id": ip["subnet_id"]} for ip in port.get("fixed_ips") or []],
        "subnet": {"id": subnet.get("id"), "cidr": subnet.get("cidr"), "gateway": subnet.get("gateway_ip")},
        "vif_name": "eth0",
        "plugin": "netbay",
    }


def vif_annotation(port: Mapping[str, Any], subnet: Mapping[str, Any] | None) -> str:
    """The annotation's value for a pod whose port is ``port`` (on ``subnet``)."""
    return json.dumps({"eth0": {"default": True, "vif": vif(port, subnet)}}, sort_keys=True, separators=(",", ":"))


def parse(value: str) -> dict[str, Any]:
    """The pod's VIF from the annotation's value."""
    return json.loads(value)["eth0"]["vif"]
