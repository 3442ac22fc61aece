"""netbay's HOT export checked by a real Heat's own template validation.

Heat 27 (PyPI, a virtualenv of its own: ``tests/peers/heat.py``) validates every
template the export makes — each COE with each network driver it supports, each
choice label's values, with and without a master load balancer and floating IPs —
with ``EngineService.validate_template``, the engine code behind ``openstack
orchestration template validate``, acting with a token of the peers' real Keystone
and asking the peers' real Neutron for its extensions. The export is what
``GET /v1/clusters/{id}/template`` returns (``netbay.coe.stackview``): the graph
``build`` composes, rendered by ``to_hot``, with its parameter values.

Honest both ways: templates broken the ways an export could break (an unknown
property, a reference to no resource, a default its constraint refuses, a resource
type Heat does not know …) must be refused by the same validation, in the same run
that accepts the export as it is.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from netbay.coe import drivers
from netbay.coe.compose import build
from netbay.coe.graph import GraphError
from netbay.coe.hot import to_hot
from netbay.coe.matrix import COES

pytestmark = pytest.mark.peers

CLUSTER = {"name": "heat-check", "uuid": "3c1b1a38-0000-4000-8000-0000000000aa", "master_count": 1,
           "node_count": 2}


def combinations() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, Magnum template) for every COE x supported driver x choice-label value x
    master LB x floating IPs; the registry says which exist, so a new driver or label
    value is checked without editing this test."""
    for coe in COES:
        for driver in drivers.supported(coe):
            spec = drivers.DRIVERS[driver]
            variants: list[dict[str, str]] = [{}]
            for label in spec.labels:
                variants += [{label.key: v} for v in label.allowed if v != label.default]
            for labels in variants:
                for lb in (True, False):
                    for fip in (True, False):
                        tag = ",".join(f"{k}={v}" for k, v in labels.items()) or "defaults"
                        yield (f"{coe}/{driver}/{tag}/lb={lb}/fip={fip}",
                               {"coe": coe, "network_driver": driver, "external_network_id": "public",
                                "master_lb_enabled": lb, "floating_ip_enabled": fip, "labels": labels})


@pytest.fixture(scope="module")
def heat(cloud) -> Iterator[tuple]:  # noqa: ANN001
    from tests.peers import heat as peer

    venv = peer.install()
    with peer.catalog(cloud):
        yield venv, peer.token(cloud), peer


def exported() -> dict[str, tuple[dict, dict]]:
    out, refused = {}, []
    for name, template in combinations():
        try:
            out[name] = to_hot(build(template, CLUSTER))
        except GraphError as exc:  # a combination netbay itself refuses is no export
            refused.append((name, str(exc)))
    assert not refused, refused
    return out


def test_every_exported_template_passes_heats_own_validation(heat) -> None:  # noqa: ANN001
    venv, auth, peer = heat
    templates = exported()
    coe_drivers = {tuple(name.split("/")[:2]) for name in templates}
    assert {("kubernetes", "flannel"), ("kubernetes", "calico"), ("kubernetes", "kuryr")} <= coe_drivers
    answers = peer.validate(venv, auth, templates)
    failed = {name: a["Error"] for name, a in answers.items() if "Error" in a}
    assert not failed, failed
    for name, (template, values) in templates.items():
        # Heat read back every parameter, with the export's value as its default where one is set.
        assert set(answers[name]["Parameters"]) == set(template["parameters"]), name
        assert answers[name]["Description"] == template["description"]


def _break(template: dict, how: str) -> dict:
    broken = copy.deepcopy(template)
    res = broken["resources"]
    port = next(n for n, r in res.items() if r["type"] == "OS::Neutron::Port")
    if how == "unknown property":
        res[port]["properties"]["no_such_property"] = 1
    elif how == "reference to no resource":
        res[port]["properties"]["network"] = {"get_resource": "no_such_network"}
    elif how == "unknown resource type":
        res[port]["type"] = "OS::Neutron::NoSuchThing"
    elif how == "depends on no resource":
        res[port]["depends_on"] = ["no_such_resource"]
    elif how == "output of no resource":
        next(iter(broken["outputs"].values()))["value"] = {"get_attr": ["no_such_resource", "first_address"]}
    elif how == "default its constraint refuses":
        broken["parameters"]["flannel_backend"]["default"] = "udp"
    elif how == "unknown parameter type":
        broken["parameters"]["flannel_backend"]["type"] = "strin"
    elif how == "unknown template version":
        broken["heat_template_version"] = "2099-01-01"
    return broken


# Ways an export could break that Heat's template validation catches. (It checks
# property names and references, not values: those are checked when a stack is made.)
BREAKS = ["unknown property", "reference to no resource", "unknown resource type", "depends on no resource",
          "output of no resource", "default its constraint refuses", "unknown parameter type",
          "unknown template version"]


def test_a_broken_template_fails_heats_validation(heat) -> None:  # noqa: ANN001
    venv, auth, peer = heat
    template, values = to_hot(build({"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
                                     "master_lb_enabled": True, "floating_ip_enabled": True, "labels": {}}, CLUSTER))
    answers = peer.validate(venv, auth, {"as exported": (template, values),
                                         **{how: (_break(template, how), values) for how in BREAKS}})
    assert "Error" not in answers["as exported"], answers["as exported"]
    passed = [how for how in BREAKS if "Error" not in answers[how]]
    assert not passed, passed
    assert "Invalid default udp" in answers["default its constraint refuses"]["Error"]
    assert "no_such_network" in answers["reference to no resource"]["Error"]
