"""A kuryr cluster's own resources, found by the tags its builder put on them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netbay.coe.executor import NET, SANDBOXES, Api
from netbay.coe.fragments.kuryr import POD_SG, POOL, ROUTERS, SERVICE_SUBNET


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

    @property
    def tag(self) -> str:
        return f"netbay-cluster={self.cluster_id}"


def find(api: Api, cluster_id: str) -> ClusterRefs:
    cluster = api.call("GET", f"/container-infra/v1/clusters/{cluster_id}")
    labels = cluster.get("labels") or {}

    def one(collection: str, *names: str) -> dict[str, Any]:
        key = collection.replace("-", "_")
        found = [obj for name in names for obj in api.call(
            "GET", f"{NET}/{collection}", tags=f"netbay-cluster={cluster['uuid']},netbay-resource={name}")[key]]
        if not found:
            raise NotKuryr(f"Cluster {cluster_id} has no {names[0]}: its network driver is "
                           f"{cluster.get('network_driver') or 'the default'}, not kuryr.")
        return found[0]
    pool, router, subnet = one("subnetpools", POOL), one("routers", *ROUTERS), one("subnets", SERVICE_SUBNET)
    pod_sg = one("security-groups", POD_SG)
    prefix = f"netbay-cluster={cluster['uuid']} "
    boxes = [b for b in api.call("GET", SANDBOXES)["sandboxes"]
             if str(b.get("description") or "").startswith(prefix)]
    boxes.sort(key=lambda b: ("master" in b["name"], b["name"]))
    names = [b["name"] for b in boxes]
    addresses = {p["device_id"]: p["fixed_ips"][0]["ip_address"] for p in api.call(
        "GET", f"{NET}/ports", device_owner="netbay:sandbox")["ports"] if p["fixed_ips"]}
    return ClusterRefs(cluster["uuid"], cluster.get("project_id") or "", labels.get("kuryr_subnet_driver")
                       or "namespace", pool["id"], router["id"],
                       (router.get("external_gateway_info") or {}).get("network_id") or "", subnet, pod_sg["id"],
                       tuple(names), tuple((b["name"], b["id"], addresses.get(b["id"], "")) for b in boxes),
                       labels.get("kuryr_pod_runtime") or "sandbox")
