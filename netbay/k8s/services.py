"""Services → load balancers, as kuryr-kubernetes made them: VIP on the cluster's
service subnet at the cluster IP, one listener + pool per port, members = the ready
endpoints; LoadBalancer / externalIPs → floating IPs.

A load balancer is made in one populated create (listeners, pools and members in one
request, one realization: the cluster IP answers as soon as the dataplane has it);
afterwards membership changes are one batch member update per pool (Octavia's
``PUT /pools/{id}/members``). A change of the ports themselves replaces the load
balancer (its description records the ports it was made for). Headless Services get
none. Members of a Service with a selector are its ready pods (a port plugged into
its sandbox, and Ready: :func:`netbay.k8s.objects.ready`; any selected pod with
``publishNotReadyAddresses``); of one without, its Endpoints' ``addresses`` (never
its ``notReadyAddresses``). A pod turning NotReady leaves the pools at the next pass.

Load balancers go through the load-balancer seam (``ctrl.lbs``: kinds, inner Octavia
objects) — netbay's own (provider ``nftables``) or a cloud's Octavia (its default
provider: ``ctrl.lb_provider`` is None; the cluster's label ``kuryr_octavia_provider``
names another, e.g. ``ovn``, whose pools use :func:`algorithm`'s SOURCE_IP_PORT, the one
that provider has) — and floating IPs through the network seam
(``ctrl.net``). Octavia refuses a change while the load balancer is ``PENDING_*``
(409): a refused change waits for it to settle (bounded) and is made again. A
controller with no load-balancer backend (a cloud whose catalog has no Octavia)
refuses Services that need one, by name, before anything is made
(:func:`refuse_without_lbs`).

Dual-stack (:mod:`netbay.k8s.families`): a Service gets one load balancer per IP
family it has, each with its VIP on that family's service subnet and that family's
pod addresses as members — ``<ns>/<name>`` for IPv4, ``<ns>/<name>@IPv6`` for IPv6
(an Octavia VIP is of one family). Floating IPs are IPv4 (no NAT66, as Neutron):
only the IPv4 load balancer takes one. A Service asking for families the cluster has
not is refused (the manifest source, before anything is written) or left unmapped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from netbay.client import gone_ok
from netbay.backends.loadbalancers import settled
from netbay.errors import NetbayError
from netbay.k8s.families import FamilyError, address_of, family_of, resolve
from netbay.k8s.objects import Desired, ServicePort, ServiceWant, endpoint

log = logging.getLogger(__name__)

PROVIDER = "nftables"
# Octavia providers whose only algorithm is not ROUND_ROBIN (OVN's L4 balancing hashes the 5-tuple)
ALGORITHMS = {"ovn": "SOURCE_IP_PORT"}
SETTLE = 60.0  # seconds a change waits for the load balancer to leave PENDING_* (a cloud's provider)
NO_LOAD_BALANCERS = ("needs a load balancer, and this controller has no load-balancer backend "
                     "(the cloud's catalog lists no Octavia): only headless Services can be mapped here")


class NoLoadBalancers(ValueError):
    """Services that need a load balancer, on a controller without a load-balancer backend."""


def needs_lb(svc: ServiceWant) -> bool:
    return not svc.headless and bool(svc.ports)


def refuse_without_lbs(ctrl: Any, want: Desired) -> None:
    """Name the Services a controller without load balancers cannot map, or whose IP
    families the cluster cannot give (before any change)."""
    for svc in want.services.values():
        resolve(svc, ctrl.refs.families)   # FamilyError: Kubernetes' refusal
    if ctrl.lbs is not None:
        return
    refused = sorted(f"{ns}/{name}" for (ns, name), svc in want.services.items() if needs_lb(svc))
    if refused:
        raise NoLoadBalancers(f"Service {', '.join(refused)} {NO_LOAD_BALANCERS}")


def signature(svc: ServiceWant) -> str:
    return "ports=" + ",".join(f"{p.protocol}:{p.port}" for p in svc.ports)


def lb_name(svc: ServiceWant, family: str) -> str:
    """The load balancer of ``svc``'s cluster IP of ``family``."""
    name = f"{svc.namespace}/{svc.name}"
    return name if family == "IPv4" else f"{name}@{family}"


def members(svc: ServiceWant, sp: ServicePort, want: Desired,
            ports: Mapping[tuple[str, str], dict[str, Any]], family: str = "IPv4") -> list[dict[str, Any]]:
    """The pool's members for service port ``sp`` (addresses of ``family``), sorted (address, port)."""
    out = []
    if svc.selector is None:
        for ip, named in want.endpoints.get((svc.namespace, svc.name), []):
            if family_of(ip) != family:
                continue
            port = named.get(sp.name) if sp.name in named else (next(iter(named.values())) if len(named) == 1
                                                                 else None)
            if port is not None:
                out.append({"address": ip, "protocol_port": int(port)})
    else:
        for (ns, name), pod_port in ports.items():
            pod = want.pods[(ns, name)]
            if not endpoint(svc, pod):
                continue
            target = sp.target if isinstance(sp.target, int) or str(sp.target).isdigit() \
                else pod.ports.get(str(sp.target))
            address = address_of(pod_port, family)
            if target is None or address is None:
                continue
            out.append({"address": address[0], "protocol_port": int(target), "subnet_id": address[1]})
    return sorted(out, key=lambda m: (m["address"], m["protocol_port"]))


def converge(ctrl: Any, want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]], report: Any,
             known: Any = None) -> tuple[dict[tuple[str, str], str], dict[str, dict], dict[str, dict]]:
    """Make, update and delete load balancers and floating IPs. Returns (ns, svc) →
    cluster IP, and the load balancers and floating IPs kept, by name."""
    net = ctrl.net
    if known is not None:
        have, fips = dict(known.lbs), dict(known.fips)
    else:
        have = {lb["name"]: lb for lb in ctrl.lbs.list("loadbalancer", tags=ctrl._tags("service"))} \
            if ctrl.lbs is not None else {}
        fips = {f["description"]: f for f in ctrl._list("floatingip", "service")}
    vips: dict[tuple[str, str], str] = {}
    ctrl.cluster_ips = {}   # (ns, svc) → every cluster IP, primary first (dual-stack: both families)
    kept_lbs: dict[str, dict] = {}
    kept_fips: dict[str, dict] = {}
    for key, svc in sorted(want.services.items()):
        if not needs_lb(svc):
            continue
        if ctrl.lbs is None:   # the manifest source refused it; the watch source's is set aside
            log.info("k8s: Service %s/%s %s", svc.namespace, svc.name, NO_LOAD_BALANCERS)
            continue
        try:
            families = resolve(svc, ctrl.refs.families)
        except FamilyError as exc:   # the manifest source refused it; the watch source's is left unmapped
            log.warning("k8s: %s", exc)
            continue
        name = f"{svc.namespace}/{svc.name}"
        ips = []
        for family in families:
            lb = _converge_lb(ctrl, svc, family, have.pop(lb_name(svc, family), None), want, ports, fips, report)
            ips.append(lb["vip_address"])
            kept_lbs[lb_name(svc, family)] = lb
            if family == "IPv4":
                kept_fips.update(_converge_fips(ctrl, svc, lb, fips, report))
        vips[key] = ips[0]
        ctrl.cluster_ips[key] = tuple(ips)
        if "IPv4" not in families and _external_addresses(svc):
            log.warning("k8s: Service %s has no IPv4 cluster IP: a floating IP (IPv4; no NAT66) cannot "
                        "reach it", name)
    for fip in fips.values():
        gone_ok(lambda: net.delete("floatingip", fip["id"]))
        report.deleted.append(f"floating IP {fip['floating_ip_address']}")
    for lb in have.values():
        _delete_lb(ctrl, lb, {})
        report.deleted.append(f"service {lb['name']}")
    return vips, kept_lbs, kept_fips


def _converge_lb(ctrl: Any, svc: ServiceWant, family: str, lb: dict[str, Any] | None, want: Desired,
                 ports: Mapping[tuple[str, str], dict], fips: dict[str, dict], report: Any) -> dict[str, Any]:
    """The Service's load balancer of ``family``: kept (members updated), or made anew."""
    wanted_ip = next((ip for ip in svc.cluster_ips if ip != "None" and family_of(ip) == family), None)
    if lb is not None and (lb.get("description") != signature(svc) or
                           (wanted_ip and lb.get("vip_address") != wanted_ip)):
        _delete_lb(ctrl, lb, fips)
        _gone(ctrl, lb["id"])   # its VIP (the cluster IP) is free once it is gone
        lb = None
    if lb is None:
        lb = _create(ctrl, svc, want, ports, family, wanted_ip)
        report.made.append(f"service {lb_name(svc, family)} {lb['vip_address']}")
    else:
        _update_members(ctrl, lb, svc, want, ports, family)
    return lb


def _converge_fips(ctrl: Any, svc: ServiceWant, lb: dict[str, Any], fips: dict[str, dict],
                   report: Any) -> dict[str, dict]:
    """The floating IPs of the Service's (IPv4) load balancer; the ones no longer wanted go."""
    name, net, kept = f"{svc.namespace}/{svc.name}", ctrl.net, {}
    wanted_labels = [f"{name} {address or 'pool'}" for address in _external_addresses(svc)]
    for label in [k for k in fips if k.startswith(f"{name} ") and k not in wanted_labels]:
        stale = fips.pop(label)   # before a new one: the VIP takes one floating IP
        gone_ok(lambda: net.delete("floatingip", stale["id"]))
        report.deleted.append(f"floating IP {stale['floating_ip_address']}")
    for address, label in zip(_external_addresses(svc), wanted_labels):
        fip = fips.pop(label, None)
        if fip is None:
            body = {"floating_network_id": ctrl.refs.external_network_id, "_what": "service",
                    "port_id": lb["vip_port_id"], "description": label}
            if address:
                body["floating_ip_address"] = address
            fip = ctrl._make("floatingip", body)
            report.made.append(f"floating IP {fip['floating_ip_address']} -> {name}")
        kept[label] = fip
    return kept


def ingress(svc: ServiceWant, fips: Mapping[str, dict[str, Any]]) -> list[str]:
    """The addresses that answer for ``svc`` from outside: its floating IPs (``fips``: the
    kept ones, by label), what its ``status.loadBalancer.ingress`` lists."""
    return [fip["floating_ip_address"] for label, fip in sorted(fips.items())
            if label.startswith(f"{svc.namespace}/{svc.name} ")]


def _external_addresses(svc: ServiceWant) -> list[str | None]:
    """The floating IP the Service needs, if any: its first external IP, else for type
    LoadBalancer its loadBalancerIP or one from the pool. One only: Neutron gives a
    fixed IP (the VIP) at most one floating IP per external network."""
    if svc.external_ips:
        return [svc.external_ips[0]]
    return [svc.load_balancer_ip] if svc.type == "LoadBalancer" else []


def algorithm(provider: str | None) -> str:
    """The pools' algorithm on ``provider``: ROUND_ROBIN (kuryr's default) where it has it."""
    return ALGORITHMS.get(provider or "", "ROUND_ROBIN")


def _create(ctrl: Any, svc: ServiceWant, want: Desired, ports: Mapping[tuple[str, str], dict],
            family: str = "IPv4", cluster_ip: str | None = None) -> dict[str, Any]:
    name = lb_name(svc, family)
    listeners = [{"name": f"{name}:{p.protocol}:{p.port}", "protocol": p.protocol, "protocol_port": p.port,
                  "default_pool": {"name": f"{name}:{p.protocol}:{p.port}", "protocol": p.protocol,
                                   "lb_algorithm": algorithm(ctrl.lb_provider), "members": members(svc, p, want, ports, family)}}
                 for p in svc.ports]
    body = ctrl._owned({"name": name, "description": signature(svc),
                        "vip_subnet_id": ctrl.refs.service_subnet_of(family)["id"],
                        "listeners": listeners, "_what": "service"})
    if ctrl.lb_provider:
        body["provider"] = ctrl.lb_provider
    if cluster_ip:
        body["vip_address"] = cluster_ip
    lb = ctrl.lbs.create("loadbalancer", body)
    _remember_tree(ctrl, lb)
    return lb


def _remember_tree(ctrl: Any, lb: dict[str, Any]) -> None:
    """Octavia answers a create with the tree whole (listeners and pools as objects, pools
    with their members): the next pass then knows each listener's pool and each pool's
    members without reading them back. An answer with ids only leaves them to be read."""
    for listener in lb.get("listeners") or []:
        if "protocol_port" in listener:
            ctrl.listeners[listener["id"]] = (listener["protocol"], listener["protocol_port"],
                                              listener.get("default_pool_id") or "")
    for pool in lb.get("pools") or []:
        members = pool.get("members")
        if isinstance(members, list) and all("address" in m for m in members):
            ctrl.members[pool["id"]] = sorted((m["address"], m["protocol_port"]) for m in members)


def _update_members(ctrl: Any, lb: dict[str, Any], svc: ServiceWant, want: Desired,
                    ports: Mapping[tuple[str, str], dict], family: str = "IPv4") -> None:
    lbs = ctrl.lbs
    by_port = {(p.protocol, p.port): p for p in svc.ports}
    for ref in lb.get("listeners") or []:
        known = ctrl.listeners.get(ref["id"])
        if known is None:
            listener = lbs.show("listener", ref["id"])
            known = ctrl.listeners[ref["id"]] = (listener["protocol"], listener["protocol_port"],
                                                 listener.get("default_pool_id") or "")
        protocol, port, pool = known
        sp = by_port.get((protocol, port))
        if sp is None or not pool:
            continue
        wanted = members(svc, sp, want, ports, family)
        key = [(m["address"], m["protocol_port"]) for m in wanted]
        if pool not in ctrl.members:
            ctrl.members[pool] = sorted((m["address"], m["protocol_port"])
                                        for m in lbs.list("member", parent=pool))
        if ctrl.members[pool] == key:
            continue
        ctrl.members.pop(pool, None)  # unknown until the batch succeeds
        _settled(ctrl, lb["id"], lambda pool=pool, wanted=wanted: lbs.replace_members(pool, wanted))
        ctrl.members[pool] = key


def _settled(ctrl: Any, lb_id: str, change: Any) -> Any:
    """``change`` once load balancer ``lb_id`` accepts it: refused with 409 while it is
    ``PENDING_*``, it waits for the load balancer to settle and tries again, bounded.
    No wait before the first try: netbay's own settles in milliseconds."""
    deadline = time.monotonic() + SETTLE
    while True:
        try:
            return change()
        except NetbayError as exc:
            if exc.status != 409 or time.monotonic() > deadline:
                raise
        settled(ctrl.lbs, lb_id, max(deadline - time.monotonic(), 0.0))
        time.sleep(0.02)


def _gone(ctrl: Any, lb_id: str) -> None:
    """Wait (bounded) until a deleted load balancer is gone: a cloud's provider releases its
    VIP port only then (netbay's own deletes at once: one read)."""
    deadline = time.monotonic() + SETTLE
    while True:
        try:
            ctrl.lbs.show("loadbalancer", lb_id)
        except NetbayError as exc:
            if exc.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"load balancer {lb_id} not gone after {SETTLE:.0f}s")
        time.sleep(0.1)


def _delete_lb(ctrl: Any, lb: dict[str, Any], fips: dict[str, dict[str, Any]]) -> None:
    for label in [k for k in fips if k.startswith(f"{lb['name']} ")]:
        fip_id = fips.pop(label)["id"]
        gone_ok(lambda: ctrl.net.delete("floatingip", fip_id))
    gone_ok(lambda: _settled(ctrl, lb["id"], lambda: ctrl.lbs.delete("loadbalancer", lb["id"], cascade=True)))
