"""Fixtures for the OVN lab tests: a real OVN (NB/SB, northd) and two hypervisors
(ovsdb-server, ovs-vswitchd on the userspace datapath, ovn-controller), all in this
run's namespaces; see lab.py. Skipped unless root with the Debian packages installed
(openvswitch-switch, ovn-central, ovn-host).

A guard snapshots the root namespace before the first test here and fails if it
differs after the last one (nothing of OVS — no ``ovs-system``, no ``br-int`` — may
ever appear there).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.dataplane.dp_helpers import diff_snapshots, root_snapshot

from .lab import Container, OvnLab, missing_binaries


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


def check_root_unchanged(before: dict[str, set[str]]) -> None:
    """Fail if the root namespace differs from ``before`` (other software's changes
    on a shared host are only reported)."""
    bad, foreign = diff_snapshots(before, root_snapshot())
    if foreign:
        warnings.warn("root namespace changed by other software during the run:\n  "
                      + "\n  ".join(foreign), stacklevel=1)
    assert not bad, "root namespace changed:\n  " + "\n  ".join(bad)


@pytest.fixture(scope="package", autouse=True)
def root_untouched() -> Iterator[dict[str, set[str]]]:
    if SKIP is not None:
        yield {}
        return
    before = root_snapshot()
    yield before
    check_root_unchanged(before)


def stop_lab(lab: OvnLab) -> None:
    """Stop ``lab``; fail if any daemon of it outlived that or a namespace is left."""
    from netbay.dataplane import netns

    problems = lab.stop()
    problems += [f"namespace left: {n}" for n in lab.namespaces if netns.exists(n)]
    if lab.dir.exists():
        problems.append(f"temp dir left: {lab.dir}")
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def ovn_lab() -> Iterator[OvnLab]:
    lab = OvnLab(hypervisors=2)
    try:
        yield lab.start()
    finally:
        stop_lab(lab)


@dataclass
class Pair:
    """Two containers on one logical switch, each on its own chassis."""
    switch: str
    a: Container
    b: Container


def plug_pair(lab: OvnLab, switch: str = "ls0") -> Pair:
    lab.nbctl("ls-add", switch)
    boxes = []
    for i, hv in enumerate(lab.hvs[:2], start=1):
        port, mac, ip = f"{switch}-p{i}", f"02:00:0a:09:01:{i:02x}", f"10.9.1.{i}"
        lab.nbctl("lsp-add", switch, port)
        lab.nbctl("lsp-set-addresses", port, f"{mac} {ip}")
        boxes.append(lab.add_container(hv, port, mac, f"{ip}/24"))
    lab.sync()
    return Pair(switch, *boxes)


@pytest.fixture(scope="module")
def ovn_pair(ovn_lab: OvnLab) -> Pair:
    return plug_pair(ovn_lab)
