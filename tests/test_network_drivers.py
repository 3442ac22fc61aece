"""The network driver registry: ``GET /v1/network-drivers``, the generated doc, the
operator's allowed/default drivers, and ``netbay network-driver``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from clihelp import cli_here, invoke
from coehelp import ci_client, magnum_error
from conftest import start_server, stop_server

from netbay.drivers import registry
from netbay.coe.coes import CoeConfig
from netbay.coe.docs import render

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ci_admin(server):
    return ci_client(server, server.token())


# --- the API's matrices -----------------------------------------------------------------------------


def test_network_drivers_document_is_the_registry(ci_admin):
    r = ci_admin.get("/network-drivers")
    assert r.status_code == 200
    doc = r.json()
    assert [d["name"] for d in doc["network_drivers"]] == list(registry.DRIVERS)
    by_name = {d["name"]: d for d in doc["network_drivers"]}
    assert by_name["flannel"]["coes"] == ["kubernetes", "swarm", "swarm-mode"]
    assert by_name["flannel"]["default_for"] == ["kubernetes"]
    assert by_name["docker"]["default_for"] == ["swarm", "swarm-mode", "mesos"]
    assert by_name["calico"]["coes"] == ["kubernetes"]
    labels = {label["key"]: label for label in by_name["flannel"]["labels"]}
    assert labels["flannel_backend"]["default"] == "vxlan"
    assert labels["flannel_backend"]["allowed"] == ["vxlan", "host-gw"]
    assert "udp" in labels["flannel_backend"]["refused"]
    assert labels["flannel_network_cidr"]["default"] == "10.100.0.0/16"
    assert labels["flannel_network_subnetlen"]["default"] == "24"
    calico = {label["key"]: label for label in by_name["calico"]["labels"]}
    assert calico["calico_ipv4pool"]["default"] == "192.168.0.0/16"
    assert calico["calico_ipv4pool_ipip"]["allowed"] == ["Off", "Never", "CrossSubnet", "Always"]
    assert calico["calico_ipv4pool_vxlan"]["allowed"] == ["Never", "CrossSubnet", "Always"]
    coes = {row["coe"]: row for row in doc["coes"]}
    assert coes["kubernetes"] == {"coe": "kubernetes", "default_network_driver": "flannel",
                                  "supported_network_drivers": ["flannel", "calico", "kuryr"],
                                  "allowed_network_drivers": ["flannel", "calico", "kuryr"]}
    assert coes["swarm-mode"]["supported_network_drivers"] == ["docker", "flannel"]
    assert coes["mesos"]["supported_network_drivers"] == ["docker"]
    assert [label["key"] for label in doc["common_labels"]] == ["fixed_subnet_cidr"]


def test_show_one_driver(ci_admin):
    assert ci_admin.get("/network-drivers/calico").json()["network_driver"]["name"] == "calico"
    magnum_error(ci_admin.get("/network-drivers/weave"), 404, "Network driver weave could not be found.")


def test_network_drivers_need_a_token(server):
    import httpx

    magnum_error(httpx.get(f"{server.url}/container-infra/v1/network-drivers"), 401)


# --- the generated doc --------------------------------------------------------------------------------


def test_committed_doc_is_the_generated_one():
    committed = (ROOT / "docs" / "network-drivers.md").read_text()
    assert committed == render(), "regenerate: python -m netbay.coe.docs > docs/network-drivers.md"


def test_doc_module_and_cli_print_the_same():
    by_module = subprocess.run([sys.executable, "-m", "netbay.coe.docs"], capture_output=True, text=True,
                               timeout=60, cwd=ROOT)
    by_cli = invoke("network-driver", "docs")
    assert by_module.returncode == 0 and by_cli.returncode == 0, by_module.stderr + by_cli.stderr
    assert by_module.stdout == by_cli.stdout == render()


def test_every_declared_label_default_passes_its_own_check():
    for driver in registry.DRIVERS.values():
        for spec in driver.labels:
            assert spec.check(spec.default) == spec.default
        for rule in driver.checks:
            assert rule(driver.effective({})) is None
    for spec in registry.COMMON_LABELS:
        assert spec.check(spec.default) == spec.default


# --- configuration -------------------------------------------------------------------------------------


def test_config_defaults_match_magnum():
    config = CoeConfig.from_env({})
    assert {coe: config.default_driver(coe) for coe in ("kubernetes", "swarm", "swarm-mode", "mesos")} == {
        "kubernetes": "flannel", "swarm": "docker", "swarm-mode": "docker", "mesos": "docker"}
    assert config.allowed_drivers("kubernetes") == ["flannel", "calico", "kuryr"]


def test_config_refuses_unknown_drivers():
    with pytest.raises(ValueError, match="NETBAY_KUBERNETES_"):
        CoeConfig.from_env({"NETBAY_KUBERNETES_ALLOWED_NETWORK_DRIVERS": "flannel,weave"})
    with pytest.raises(ValueError, match="cilium"):
        CoeConfig.from_env({"NETBAY_MESOS_DEFAULT_NETWORK_DRIVER": "cilium"})


def test_operator_allowed_lists_and_defaults(tmp_path):
    """A server whose operator allows only flannel for kubernetes and defaults swarm to flannel."""
    env = {"NETBAY_KUBERNETES_ALLOWED_NETWORK_DRIVERS": "flannel", "NETBAY_SWARM_DEFAULT_NETWORK_DRIVER": "flannel"}
    with mock.patch.dict(os.environ, env):
        srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path)
    try:
        client = ci_client(srv, srv.token())
        magnum_error(client.post("/clustertemplates", json={"coe": "kubernetes", "network_driver": "calico"}), 400,
                     "Network driver type calico is not allowed, expecting a flannel/unspecified network driver.")
        # Supported is checked before allowed, with Magnum's list of supported drivers.
        magnum_error(client.post("/clustertemplates", json={"coe": "kubernetes", "network_driver": "docker"}), 400,
                     "Network driver type docker is not supported, expecting a flannel/calico/kuryr/unspecified "
                     "network driver.")
        for coe in ("swarm", "swarm-mode"):
            r = client.post("/clustertemplates", json={"coe": coe})
            assert r.status_code == 201 and r.json()["network_driver"] == "flannel"
        row = {c["coe"]: c for c in client.get("/network-drivers").json()["coes"]}["kubernetes"]
        assert row["allowed_network_drivers"] == ["flannel"]
    finally:
        stop_server(srv)


# --- CLI ---------------------------------------------------------------------------------------------------


def test_cli_network_driver_list_and_show(server):
    r = cli_here(server, "network-driver", "list")
    assert r.returncode == 0, r.stderr
    for word in ("kubernetes", "flannel", "calico", "docker", "fixed_subnet_cidr"):
        assert word in r.stdout
    r = cli_here(server, "network-driver", "show", "flannel")
    assert r.returncode == 0, r.stderr
    assert "flannel_backend" in r.stdout and "host-gw" in r.stdout and "udp (refused)" in r.stdout
    r = cli_here(server, "network-driver", "show", "weave")
    assert r.returncode == 1 and "Network driver weave could not be found" in r.stderr
