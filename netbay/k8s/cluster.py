"""A kuryr cluster's own resources, found by the tags its builder put on them.

The cluster itself and its nodes' sandboxes are netbay's own (its container-infra and
sandbox APIs, ``api``); its networks, router and groups are wherever the cluster
builder made them — the network backend (``net``), embedded or a cloud's Neutron.
On a cloud the nodes are no sandboxes but claims on Neutron ports (the builder's
``compute:netbay`` stand-in for Nova): then those claims name the nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netbay.backends import NetworkBackend
from netbay.client import SANDBOXES, Api
from netbay.coe.handlers.servers import CLOUD_NODE_OWNER
from netbay.coe.fragments.kuryr import POD_SG, POOL, POOL6, ROUTERS, SERVICE_SUBNET, SERVICE_SUBNET6
from netbay.drivers.kuryr import SPEC as KURYR, KuryrConfig
from netbay.drivers.labelspec import LabelError
from netbay.k8s.podport import cluster_tag


class NotKuryr(LookupError):
    pass


@dataclass(frozen=True)
class ClusterRefs:
    cluster_id: str
    project_id: str
    subnet_driver: str               # "namespace" | "node"
    pool_id: str
    router_id: str
    external_network_id: str
    service_subnet: dict[str, Any]
    pod_sg_id: str
    nodes: tuple[str, ...]           # node (sandbox) names, minions first
    node_boxes: tuple[tuple[str, str, str], ...] = ()   # (name, sandbox id, address)
    pod_runtime: str = "sandbox"     # label kuryr_pod_runtime: "sandbox" | "docker"
    dns_upstream: tuple[str, ...] = ()   # where the cluster resolver forwards names outside its domain
    # dual-stack (labels kuryr_*_ipv6): the IPv6 pod pool and service subnet; None: IPv4 only
    pool6_id: str | None = None
    service_subnet6: dict[str, Any] | None = None
    lb_provider: str = ""            # label kuryr_octavia_provider ("": the controller's default)

    @property
    def families(self) -> tuple[str, ...]:
        """The cluster's IP families, as Kubernetes names them (IPv4 first)."""
        return ("IPv4", "IPv6") if self.service_subnet6 else ("IPv4",)

    def service_subnet_of(self, family: str) -> dict[str, Any]:
        """The service subnet cluster IPs of ``family`` ("IPv4" | "IPv6") come from."""
        subnet = self.service_subnet6 if family == "IPv6" else self.service_subnet
        if subnet is None:
            raise ValueError(f"cluster {self.cluster_id} has no {family} service range")
        return subnet

    @property
    def tag(self) -> str:
        return cluster_tag(self.cluster_id)


def find(api: Api, net: NetworkBackend, cluster_id: str) -> ClusterRefs:
    cluster = api.call("GET", f"/container-infra/v1/clusters/{cluster_id}")
    try:   # the labels as the API checked them, typed by the driver's declaration (defaults too)
        config: KuryrConfig = KURYR.parse(cluster.get("labels"))
    except LabelError as exc:
        raise NotKuryr(f"Cluster {cluster_id}: {exc}") from None

    def one(member: str, *names: str) -> dict[str, Any]:
        found = [obj for name in names for obj in net.list(
            member, tags=f"netbay-cluster={cluster['uuid']},netbay-resource={name}")]
        if not found:
            raise NotKuryr(f"Cluster {cluster_id} has no {names[0]}: its network driver is "
                           f"{cluster.get('network_driver') or 'the default'}, not kuryr.")
        return found[0]
    pool, router, subnet = one("subnetpool", POOL), one("router", *ROUTERS), one("subnet", SERVICE_SUBNET)
    pool6 = subnet6 = None
    if config.service_cidr_ipv6:   # dual-stack: its builder made the IPv6 pool and service subnet
        pool6, subnet6 = one("subnetpool", POOL6), one("subnet", SERVICE_SUBNET6)
    pod_sg = one("security_group", POD_SG)
    prefix = f"netbay-cluster={cluster['uuid']} "
    boxes = [b for b in api.call("GET", SANDBOXES)["sandboxes"]
             if str(b.get("description") or "").startswith(prefix)]
    boxes.sort(key=lambda b: ("master" in b["name"], b["name"]))
    names = [b["name"] for b in boxes] or _cloud_nodes(net, cluster["uuid"])
    addresses = {p["device_id"]: p["fixed_ips"][0]["ip_address"] for p in net.list(
        "port", device_owner="netbay:sandbox") if p["fixed_ips"]} if boxes else {}
    return ClusterRefs(cluster["uuid"], cluster.get("project_id") or "", config.subnet_driver, pool["id"], router["id"],
                       (router.get("external_gateway_info") or {}).get("network_id") or "", subnet, pod_sg["id"],
                       tuple(names), tuple((b["name"], b["id"], addresses.get(b["id"], "")) for b in boxes),
                       config.pod_runtime, dns_upstream(api, net, cluster), pool6["id"] if pool6 else None,
                       subnet6, config.octavia_provider)


def dns_upstream(api: Api, net: NetworkBackend, cluster: dict[str, Any]) -> tuple[str, ...]:
    """The cluster template's ``dns_nameserver`` (Magnum's field, a comma list), else the
    nameservers of the cluster's private subnet — what its nodes' resolv.conf would hold,
    which CoreDNS forwards to (``forward . /etc/resolv.conf``)."""
    template = api.call("GET", f"/container-infra/v1/clustertemplates/{cluster['cluster_template_id']}")
    given = [s.strip() for s in str(template.get("dns_nameserver") or "").split(",") if s.strip()]
    if given:
        return tuple(given)
    subnets = net.list("subnet", tags=f"netbay-cluster={cluster['uuid']},netbay-resource=fixed_subnet")
    return tuple(ns for sub in subnets[:1] for ns in sub.get("dns_nameservers") or ())


def _cloud_nodes(net: NetworkBackend, cluster_id: str) -> list[str]:
    """The node ids of a cluster whose nodes are port claims (no sandboxes), sorted."""
    return sorted({p["device_id"] for p in net.list("port", tags=f"netbay-cluster={cluster_id}",
                                                    device_owner=CLOUD_NODE_OWNER) if p.get("device_id")})
