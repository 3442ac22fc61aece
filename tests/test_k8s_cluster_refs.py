"""The Kubernetes mapping reads a kuryr cluster's settings as kuryr's typed config
(``KuryrConfig``, from the driver's own label declaration), never raw labels: defaults
filled in, a refused value refused (issue 24 item 2)."""

from __future__ import annotations

from typing import Any

import pytest

from netbay.k8s.cluster import NotKuryr, find


class FakeApi:
    def __init__(self, labels: dict[str, Any]) -> None:
        self.labels = labels

    def call(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        if path.endswith("/sandboxes"):
            return {"sandboxes": []}
        if "/clustertemplates/" in path:
            return {"uuid": "t1", "dns_nameserver": "192.0.2.53, 198.51.100.53"}
        return {"uuid": "c1", "project_id": "p", "labels": self.labels, "cluster_template_id": "t1"}


class FakeNet:
    def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        if member == "port":
            return [{"device_id": "node-1", "fixed_ips": []}]
        return [{"id": f"{member}-id", "cidr": "10.96.0.0/16", "external_gateway_info": {"network_id": "ext"}}]


@pytest.mark.parametrize("labels, subnet_driver, runtime", [
    ({}, "namespace", "sandbox"),
    ({"kuryr_subnet_driver": "node", "kuryr_pod_runtime": "docker"}, "node", "docker"),
])
def test_the_mapping_reads_kuryrs_typed_config(labels, subnet_driver, runtime) -> None:
    refs = find(FakeApi(labels), FakeNet(), "c1")  # type: ignore[arg-type]
    assert (refs.subnet_driver, refs.pod_runtime) == (subnet_driver, runtime)
    assert refs.pool_id == "subnetpool-id" and refs.nodes == ("node-1",)
    assert refs.dns_upstream == ("192.0.2.53", "198.51.100.53")  # the template's comma list, in order


def test_a_label_kuryr_refuses_is_named() -> None:
    with pytest.raises(NotKuryr, match="kuryr_pod_runtime"):
        find(FakeApi({"kuryr_pod_runtime": "vm"}), FakeNet(), "c1")  # type: ignore[arg-type]
