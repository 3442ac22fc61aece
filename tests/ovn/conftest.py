"""Fixtures for the OVN lab tests: a real OVN (NB/SB, northd) and two hypervisors
(ovsdb-server, ovs-vswitchd on the userspace datapath, ovn-controller), all in this
run's namespaces; see lab.py. Skipped unless root with the Debian packages installed
(openvswitch-switch, ovn-central, ovn-host).

A guard snapshots the root namespace before the first test here and fails if it
differs after the last one (nothing of OVS — no ``ovs-system``, no ``br-int`` — may
ever appear there).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dataplane.dp_helpers import root_snapshot

from .guards import check_root_unchanged, stop_lab
from .lab import OvnLab, Pair, missing_binaries, plug_pair
from .neutron_ovn import ovn_neutron


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "OVN lab tests need root (network namespaces, OVS daemons)"
    missing = missing_binaries()
    if missing:
        return ("OVN lab tests need the Debian packages openvswitch-switch, ovn-central and "
                f"ovn-host (scripts/setup.sh installs them); missing: {', '.join(missing)}")
    if not os.path.exists("/dev/net/tun"):
        return "OVN lab tests need /dev/net/tun (the userspace datapath's internal ports)"
    return None


SKIP = _skip_reason()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    if SKIP is None:
        return
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.skip(reason=SKIP))


@pytest.fixture(scope="package", autouse=True)
def root_untouched() -> Iterator[dict[str, set[str]]]:
    if SKIP is not None:
        yield {}
        return
    before = root_snapshot()
    yield before
    check_root_unchanged(before)


@pytest.fixture(scope="module")
def ovn_lab() -> Iterator[OvnLab]:
    lab = OvnLab(hypervisors=2)
    try:
        yield lab.start()
    finally:
        stop_lab(lab)


@pytest.fixture(scope="module")
def ovn_pair(ovn_lab: OvnLab) -> Pair:
    return plug_pair(ovn_lab)


@pytest.fixture(scope="module")
def ovn_cloud(ovn_lab: OvnLab, postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Keystone and a Neutron API server with ML2/OVN on ``ovn_lab`` (a PostgreSQL
    database of its own in the run's throwaway cluster), for the module; see
    neutron_ovn.py."""
    work: Path = tmp_path_factory.mktemp("ovn-neutron")
    with ovn_neutron(ovn_lab, work, postgres.url(postgres.create_database())) as cloud:
        yield cloud


@pytest.fixture(scope="module")
def conn(ovn_cloud) -> Iterator:
    """An openstacksdk connection (admin) to ``ovn_cloud``, for the module."""
    c = ovn_cloud.connection()
    yield c
    c.close()


@pytest.fixture(scope="module")
def env(ovn_cloud, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of netbay's processes on the lab's cloud: a clouds.yaml naming it
    ``ovn`` (no other OS_* variable); skipped without os-vif (netbay's ``cloud`` extra)."""
    pytest.importorskip("os_vif", reason="os-vif is netbay's optional `cloud` extra")
    path = tmp_path_factory.mktemp("ovn-clouds") / "clouds.yaml"
    path.write_text(json.dumps({"clouds": {"ovn": {"auth": ovn_cloud.auth(), "region_name": "RegionOne",
                                                   "identity_api_version": 3}}}))
    base = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    return {**base, "OS_CLIENT_CONFIG_FILE": str(path), "OS_CLOUD": "ovn", "NETBAY_LOG_LEVEL": "INFO"}


@pytest.fixture(scope="module")
def lb_conn(ovn_cloud, ovn_lab: OvnLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """An openstacksdk connection whose catalog has Octavia (provider ``ovn`` on the lab:
    ovn-octavia-provider writing the lab's NB; tests/peers/octavia_peer.py), for the module."""
    from tests.peers.octavia_peer import OvnProvider, octavia

    provider = OvnProvider(ovn_lab.nb_remote, ovn_lab.sb_remote)
    with octavia(ovn_cloud, tmp_path_factory.mktemp("octavia-ovn"), provider):
        c = ovn_cloud.connection()
        yield c
        c.close()
