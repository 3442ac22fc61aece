"""Neutron's Heat types, made through the ``NetworkBackend`` seam (``st.net``):
the same calls whether netbay's own service or a cloud's Neutron answers.
Every object carries ``netbay-cluster=`` / ``netbay-resource=`` tags, which
``find`` (adopt after a restart) and the delete sweep look up."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from netbay.coe.handlers.base import Handler, gone_ok, or_none

if TYPE_CHECKING:
    from netbay.coe.handlers.context import StackContext
    from netbay.coe.stackrecord import Row


class NeutronHandler(Handler):
    """One Neutron member: created named and tagged, found by its tags."""

    member = ""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        obj = make_tagged(st, self.member, {"name": st.physical_name(name), **self.body(st, props)}, name)
        return obj["id"], obj

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        return or_none(lambda: st.net.show(self.member, str(row.physical_id)))

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        found = st.net.list(self.member, tags=",".join(st.tags(name)))
        return (found[0]["id"], found[0]) if found else None

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        gone_ok(lambda: st.net.delete(self.member, pid))


def make_tagged(st: StackContext, member: str, body: dict[str, Any], name: str) -> dict[str, Any]:
    """Create with the resource's tags (every backend returns it tagged, or nothing)."""
    return st.net.create(member, st.owned({**body, "tags": st.tags(name)}))


class NetHandler(NeutronHandler):
    member = "network"


class SubnetHandler(NeutronHandler):
    member = "subnet"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {"network_id": st.network_id(props["network"]), "cidr": props["cidr"],
                "ip_version": int(props.get("ip_version") or 4),
                "dns_nameservers": [d for d in props.get("dns_nameservers") or [] if d]}


class SubnetPoolHandler(NeutronHandler):
    member = "subnetpool"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {"prefixes": list(props["prefixes"]), "default_prefixlen": int(props["default_prefixlen"])}


class RouterHandler(NeutronHandler):
    member = "router"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        gateway = props.get("external_gateway_info") or {}
        return {"external_gateway_info": {"network_id": st.network_id(gateway["network"])}} if gateway else {}

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        for port in st.net.list("port", device_id=pid, device_owner="network:router_interface"):
            gone_ok(lambda: st.net.remove_router_interface(pid, port_id=port["id"]))
        gone_ok(lambda: st.net.delete("router", pid))


def router_interface(st: StackContext, router: str, subnet: str) -> dict[str, Any] | None:
    """The router's interface on ``subnet``, if it has one."""
    for port in st.net.list("port", device_id=router, device_owner="network:router_interface"):
        if any(ip["subnet_id"] == subnet for ip in port["fixed_ips"]):
            return {"router_id": router, "subnet_id": subnet, "port_id": port["id"]}
    return None


class RouterInterfaceHandler(Handler):
    """Physical id ``<router>:<subnet>``, as Heat's."""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        router, subnet = props["router"], st.subnet_id(props["subnet"])
        attrs = router_interface(st, router, subnet)
        if attrs is not None:  # made by a run that stopped before writing it down
            return f"{router}:{subnet}", attrs
        out = st.net.add_router_interface(router, subnet_id=subnet)
        return f"{router}:{subnet}", {"router_id": router, "subnet_id": subnet, "port_id": out["port_id"]}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        router, subnet = str(row.physical_id).split(":")
        return router_interface(st, router, subnet)

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        return None  # an interface carries no tag: ``create`` adopts one the router has

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        router, subnet = pid.split(":")
        gone_ok(lambda: st.net.remove_router_interface(router, subnet_id=subnet))


def _rule_key(rule: Mapping[str, Any]) -> tuple[Any, ...]:
    return (rule.get("direction") or "ingress", rule.get("ethertype") or "IPv4", rule.get("protocol"),
            rule.get("port_range_min"), rule.get("port_range_max"), rule.get("remote_ip_prefix"),
            rule.get("remote_group_id"))


class SecurityGroupHandler(NeutronHandler):
    """The group, then its inline rules; ``finish`` adds only the rules missing, so a
    group made before a crash (or half-way through its rules) is completed, not
    duplicated."""

    member = "security_group"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {"description": "netbay cluster security group"}

    def finish(self, st: StackContext, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        have = {_rule_key(r) for r in attrs.get("security_group_rules") or []}
        added = False
        for rule in props.get("rules") or []:
            body = {"security_group_id": pid, "direction": rule.get("direction", "ingress"),
                    "ethertype": rule.get("ethertype", "IPv4"),
                    **{k: rule[k] for k in ("protocol", "port_range_min", "port_range_max", "remote_ip_prefix",
                                            "remote_group_id") if rule.get(k) is not None}}
            if _rule_key(body) not in have:
                have.add(_rule_key(body))
                st.net.create("security_group_rule", body)
                added = True
        return st.net.show("security_group", pid) if added else attrs


class PortHandler(NeutronHandler):
    member = "port"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"network_id": st.network_id(props["network"])}
        if props.get("fixed_ips"):
            body["fixed_ips"] = [{**({"subnet_id": st.subnet_id(ip["subnet"])} if ip.get("subnet") else {}),
                                  **({"ip_address": ip["ip_address"]} if ip.get("ip_address") else {})}
                                 for ip in props["fixed_ips"]]
        if props.get("security_groups") is not None:
            body["security_groups"] = list(props["security_groups"])
        return body


class FloatingIPHandler(NeutronHandler):
    """No name in Neutron's floating IP: the description says whose it is."""

    member = "floatingip"

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = {"floating_network_id": st.network_id(props["floating_network"]),
                "description": st.description(name)}
        if props.get("port_id"):
            body["port_id"] = props["port_id"]
        obj = make_tagged(st, "floatingip", body, name)
        return obj["id"], obj
