"""How a port reads in the Port API: Neutron's body of it, bindings, DNS assignment
and the network's QoS policy included. ``render_port`` takes an ORM port, a new
port's read-only view or a listed row alike (``portlisting.fetch_rows``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from netbay.network import dhcp_opts
from netbay.network.portrows import Allocation, NewPort
from netbay.network.resource import standard
from netbay.network.resource_request import resource_request
from netbay.store.models import IPAllocation, Network, Port

# binding:vif_type of a port bound to a host ("unbound" otherwise).
VIF_TYPE = "other"
# dns-integration's domain of names without one of their network's (Neutron's default ``dns_domain``).
DNS_DOMAIN = "openstacklocal."


def dns_assignment(dns_name: str, addresses: list[str]) -> list[dict[str, str]]:
    """Neutron's ``dns_assignment``: each fixed IP's hostname (the port's ``dns_name``,
    else one made of the address) and FQDN in the deployment's domain."""
    out = []
    for ip in addresses:
        hostname = dns_name.removesuffix(".").split(".")[0] if dns_name else \
            "host-" + ip.replace(".", "-").replace(":", "-")
        out.append({"hostname": hostname, "ip_address": ip, "fqdn": f"{hostname}.{DNS_DOMAIN}"})
    return out


def network_policy(session: Session, obj: Any) -> str | None:
    """``qos_network_policy_id`` (``qos-port-network-policy``): the network's policy,
    read-only on the port; listed rows and new ports carry it, others look it up."""
    if hasattr(obj, "network_qos_policy_id"):
        return obj.network_qos_policy_id
    network = session.get(Network, obj.network_id)
    return network.qos_policy_id if network is not None else None


def render_port(session: Session, obj: Port | NewPort, tags: list[str]) -> dict[str, Any]:
    host = obj.binding_host_id
    policy = network_policy(session, obj)
    return {
        **standard(obj, tags),
        "network_id": obj.network_id,
        "mac_address": obj.mac_address,
        "admin_state_up": obj.admin_state_up,
        "status": obj.status,
        "device_id": obj.device_id,
        "device_owner": obj.device_owner,
        "fixed_ips": [{"subnet_id": a.subnet_id, "ip_address": a.ip_address}
                      for a in sorted(obj.fixed_ips, key=_by_seq)],
        "security_groups": [g.security_group_id for g in obj.security_groups],
        "allowed_address_pairs": [
            {"ip_address": p["ip_address"], "mac_address": p.get("mac_address") or obj.mac_address}
            for p in obj.allowed_address_pairs or []
        ],
        "port_security_enabled": obj.port_security_enabled,
        "binding:host_id": host,
        "binding:vif_type": VIF_TYPE if host else "unbound",
        "binding:vif_details": {},
        "binding:vnic_type": "normal",
        "binding:profile": {},
        "extra_dhcp_opts": dhcp_opts.rendered(obj.extra_dhcp_opts),
        "qos_policy_id": obj.qos_policy_id,
        "qos_network_policy_id": policy,
        "resource_request": _resource_request(session, obj, obj.qos_policy_id or policy),
        "dns_name": obj.dns_name,
        "dns_assignment": dns_assignment(obj.dns_name, [a.ip_address for a in obj.fixed_ips]),
    }


def _resource_request(session: Session, obj: Any, policy_id: str | None) -> dict[str, Any] | None:
    """Listed rows carry the rules of every policy in effect (``portlisting.fetch_rows``);
    a single port reads its policy's."""
    listed = getattr(obj, "minimum_rules", None)
    rules = listed.get(policy_id, []) if listed is not None and policy_id is not None else None
    return resource_request(session, obj.id, policy_id, rules=rules)


def _by_seq(alloc: IPAllocation | Allocation) -> int:
    return alloc.seq
