"""netbay's HOT export checked by a real Heat's own template validation.

Heat 27 from PyPI (a virtualenv of its own: ``tests/peers/heat.py``) serves its API
on 127.0.0.1, registered in the peers' real Keystone, with its engine beside it; the
peers' real Neutron answers Heat's extension checks. Every template the export makes
— each COE with each network driver it supports, each choice label's values, with and
without a master load balancer and floating IPs — goes to Heat's
``POST /v1/{project}/validate``, and the Kubernetes ones also as the files ``netbay
cluster template-export`` writes: one per driver through ``openstack orchestration
template validate -t FILE -e ENV`` (python-heatclient's command), the others as the
files' text to the same API (a CLI process is seconds of CPU). The export is what
``GET /v1/clusters/{id}/template`` returns (``netbay.coe.stackview``): the graph
``build`` composes, rendered by ``to_hot`` / ``to_yaml``, with its parameter values.

Honest both ways: templates broken the ways an export could break (an unknown
property, a reference to no resource, a default its constraint refuses, a resource
type Heat does not know …) must be refused by the same validation, in the same run
that accepts the export as it is.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from netbay.drivers import registry
from netbay.coe.compose import build
from netbay.coe.graph import GraphError
from netbay.coe.hot import to_hot, to_yaml
from netbay.coe.matrix import COES

pytestmark = pytest.mark.peers

# Variants no enum lists: a dual-stack kuryr cluster's IPv6 ranges (issue 28), which add nodes.
EXTRA_VARIANTS: dict[str, list[dict[str, str]]] = {
    "kuryr": [{"kuryr_pod_subnet_pool_ipv6": "fd00:10::/56", "kuryr_service_cidr_ipv6": "fd00:96::/112"}],
}

CLUSTER = {"name": "heat-check", "uuid": "3c1b1a38-0000-4000-8000-0000000000aa", "master_count": 1,
           "node_count": 2}


def combinations() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, Magnum template) for every COE x supported driver x choice-label value x
    master LB x floating IPs; the registry says which exist, so a new driver or label
    value is checked without editing this test."""
    for coe in COES:
        for driver in registry.supported(coe):
            spec = registry.DRIVERS[driver]
            variants: list[dict[str, str]] = [{}]
            for label in spec.labels:
                variants += [{label.key: v} for v in label.allowed if v != label.default]
            variants += EXTRA_VARIANTS.get(driver, [])
            for labels in variants:
                for lb in (True, False):
                    for fip in (True, False):
                        tag = ",".join(f"{k}={v}" for k, v in labels.items()) or "defaults"
                        yield (f"{coe}/{driver}/{tag}/lb={lb}/fip={fip}",
                               {"coe": coe, "network_driver": driver, "external_network_id": "public",
                                "master_lb_enabled": lb, "floating_ip_enabled": fip, "labels": labels})


@pytest.fixture(scope="module")
def heat(cloud, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    from tests.peers import heat as peer

    with peer.heat_api(cloud, tmp_path_factory.mktemp("heat")) as api:
        yield api, peer.token(cloud), peer


def exported() -> dict[str, tuple[dict, dict]]:
    out, refused = {}, []
    for name, template in combinations():
        try:
            out[name] = to_hot(build(template, CLUSTER))
        except GraphError as exc:  # a combination netbay itself refuses is no export
            refused.append((name, str(exc)))
    assert not refused, refused
    return out


def test_every_exported_template_passes_heats_own_validation(heat) -> None:
    api, auth, peer = heat
    templates = exported()
    coe_drivers = {tuple(name.split("/")[:2]) for name in templates}
    assert {("kubernetes", "flannel"), ("kubernetes", "calico"), ("kubernetes", "kuryr")} <= coe_drivers
    failed = {}
    for name, (template, values) in templates.items():
        status, answer = peer.validate(api, auth, template, values)
        if status != 200:
            failed[name] = (status, answer)
            continue
        # Heat read back every parameter, with this cluster's value where the export gives one.
        assert set(answer["Parameters"]) == set(template["parameters"]), name
        params = answer["Parameters"]   # a value equal to its default is shown as the default
        assert {k: params[k].get("Value", params[k].get("Default")) for k in values} == values, name
        assert answer["Description"] == template["description"]
    assert not failed, failed


def _export_files(driver: str, lb: bool, fip: bool) -> tuple[str, str]:
    """The template and environment files ``netbay cluster template-export`` writes for a
    Kubernetes cluster on ``driver``."""
    return to_yaml(build({"coe": "kubernetes", "network_driver": driver, "external_network_id": "public",
                          "master_lb_enabled": lb, "floating_ip_enabled": fip, "labels": {}}, CLUSTER))


@pytest.mark.parametrize("driver", ["flannel", "calico", "kuryr"])
def test_the_openstack_cli_validates_the_exported_files(heat, driver: str, tmp_path) -> None:
    """``openstack orchestration template validate`` on the files ``template-export`` writes:
    one CLI process per driver (with a master load balancer and floating IPs); the driver's
    three other files go to the same validation as the files' text (Heat parses them)."""
    api, auth, peer = heat
    for lb in (True, False):
        for fip in (True, False):
            text, env = _export_files(driver, lb, fip)
            if lb and fip:
                (tmp_path / "t.yaml").write_text(text)
                (tmp_path / "env.yaml").write_text(env)
                r = api.cli("orchestration", "template", "validate", "-t", str(tmp_path / "t.yaml"),
                            "-e", str(tmp_path / "env.yaml"), "-f", "json")
                assert r.returncode == 0, (driver, lb, fip, r.stderr[-2000:])
                answer = json.loads(r.stdout)
            else:
                status, answer = peer.validate_files(api, auth, text, env)
                assert status == 200, (driver, lb, fip, answer)
            assert answer["Description"].endswith(f"network driver {driver}"), (driver, lb, fip)


def test_the_openstack_cli_refuses_a_broken_exported_file(heat, tmp_path) -> None:
    """The same command fails, naming the cause, on an exported file with a resource type
    Heat does not know (once: the refusal is the CLI's, not a driver's)."""
    api, _auth, _peer = heat
    text, env = _export_files("flannel", True, True)
    (tmp_path / "t.yaml").write_text(text.replace("OS::Neutron::Port", "OS::Neutron::NoSuchPort", 1))
    (tmp_path / "env.yaml").write_text(env)
    r = api.cli("orchestration", "template", "validate", "-t", str(tmp_path / "t.yaml"), "-e", str(tmp_path / "env.yaml"))
    assert r.returncode != 0 and "OS::Neutron::NoSuchPort" in r.stderr, r


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


def test_a_broken_template_fails_heats_validation(heat) -> None:
    api, auth, peer = heat
    template, values = to_hot(build({"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
                                     "master_lb_enabled": True, "floating_ip_enabled": True, "labels": {}}, CLUSTER))
    assert peer.validate(api, auth, template, values)[0] == 200
    answers = {how: peer.validate(api, auth, _break(template, how), values) for how in BREAKS}
    passed = [how for how, (status, _) in answers.items() if status != 400]
    assert not passed, {how: answers[how] for how in passed}
    assert "Invalid default udp" in json.dumps(answers["default its constraint refuses"][1])
    assert "no_such_network" in json.dumps(answers["reference to no resource"][1])
