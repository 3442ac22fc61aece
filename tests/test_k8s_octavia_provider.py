"""The Octavia provider a kuryr cluster's Services ask for: the label
``kuryr_octavia_provider`` names it, and on ``ovn`` (whose only algorithm is
SOURCE_IP_PORT) the pools ask for that algorithm instead of kuryr's ROUND_ROBIN, which
ovn-octavia-provider refuses. The packets on a real OVN: tests/ovn/test_k8s_ovn.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from netbay.drivers.kuryr import SPEC as KURYR
from netbay.k8s import services
from netbay.k8s.cluster import find
from netbay.k8s.objects import desired
from tests.test_k8s_cluster_refs import FakeApi, FakeNet

SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
           "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}


def test_the_label_names_the_provider_and_is_empty_by_default() -> None:
    assert find(FakeApi({}), FakeNet(), "c1").lb_provider == ""  # type: ignore[arg-type]
    refs = find(FakeApi({"kuryr_octavia_provider": "ovn"}), FakeNet(), "c1")  # type: ignore[arg-type]
    assert refs.lb_provider == "ovn"
    assert KURYR.parse({"kuryr_octavia_provider": " ovn "}).octavia_provider == "ovn"


class Recording:
    """A load-balancer backend that records the one create it is asked for."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def create(self, member: str, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        return {"id": "lb1", "vip_address": "10.96.0.10", "name": body["name"], "listeners": [], "pools": []}


@pytest.mark.parametrize("provider, sent, algorithm", [
    ("ovn", "ovn", "SOURCE_IP_PORT"),
    ("amphora", "amphora", "ROUND_ROBIN"),
    (None, None, "ROUND_ROBIN"),            # the cloud's default provider: nothing named
])
def test_the_pools_ask_for_the_providers_algorithm(provider: str | None, sent: str | None, algorithm: str) -> None:
    lbs = Recording()
    ctrl = SimpleNamespace(lbs=lbs, lb_provider=provider, _owned=lambda body: {k: v for k, v in body.items()
                                                                               if k != "_what"},
                           refs=SimpleNamespace(service_subnet_of=lambda family: {"id": "svc-subnet"}),
                           listeners={}, members={})
    want = desired([SERVICE])
    svc = want.services[("shop", "web")]
    services._create(ctrl, svc, want, {})
    (body,) = lbs.bodies
    assert body.get("provider") == sent
    assert [listener["default_pool"]["lb_algorithm"] for listener in body["listeners"]] == [algorithm]
