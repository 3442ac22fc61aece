"""Fixtures for the OVN lab tests: a real OVN (NB/SB, northd) and two hypervisors
(ovsdb-server, ovs-vswitchd on the userspace datapath, ovn-controller), all in this
run's namespaces (see lab.py), and Keystone with Neutron ML2/OVN on it. Skipped unless
root with the Debian packages installed (openvswitch-switch, ovn-central, ovn-host).

The lab, its cloud, Octavia and the CNI daemons are started once per test process and
shared (fixtures.py, the one home of those fixtures, imported by tests/conftest.py);
here they get the short names the modules use (``conn``, ``env``, ``daemons``,
``plugin``, ``lb_conn``). What a module makes on them it removes, checked after each
module (:func:`~tests.ovn.fixtures.left_as_found`).

A guard snapshots the root namespace before the first test here and fails if it
differs after the last one (nothing of OVS — no ``ovs-system``, no ``br-int`` — may
ever appear there); the lab's own guard checks it again after the lab stopped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dataplane.dp_helpers import root_snapshot
# By its full name: the module tests/conftest.py imports, whose state the session's
# fixtures keep (pytest imports this directory's modules as ``ovn.…`` too).
from tests.ovn.fixtures import left_as_found, skip_reason

from .guards import check_root_unchanged
from .lab import OvnLab, Pair, plug_pair

SKIP = skip_reason()


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


@pytest.fixture(scope="module", autouse=True)
def module_left_as_found() -> Iterator[None]:
    """What a module made on the shared lab and cloud is gone after it."""
    with left_as_found():
        yield


@pytest.fixture(scope="module")
def ovn_pair(ovn_lab: OvnLab) -> Iterator[Pair]:
    """Two containers on a logical switch of their own, on the first two chassis; removed
    with the module."""
    pair = plug_pair(ovn_lab)
    yield pair
    for box in (pair.a, pair.b):
        ovn_lab.remove_container(box)
    ovn_lab.nbctl("ls-del", pair.switch)


@pytest.fixture(scope="session")
def conn(ovn_conn) -> object:
    """An openstacksdk connection (admin) to the lab's cloud (``ovn_conn``)."""
    return ovn_conn


@pytest.fixture(scope="session")
def env(ovn_env: dict[str, str]) -> dict[str, str]:
    """netbay's processes' environment on the lab's cloud (``ovn_env``)."""
    return ovn_env


@pytest.fixture(scope="session")
def daemons(ovn_cni_daemons: list) -> list:
    """``netbay cni-daemon`` on each of the first two chassis (``ovn_cni_daemons``)."""
    return ovn_cni_daemons


@pytest.fixture(scope="session")
def plugin(ovn_cni_plugin: Path) -> Path:
    """The ``netbay-cni`` launcher (``ovn_cni_plugin``)."""
    return ovn_cni_plugin


@pytest.fixture(scope="session")
def lb_conn(ovn_octavia) -> object:
    """A connection whose catalog has Octavia with ovn-octavia-provider (``ovn_octavia``)."""
    return ovn_octavia
