"""The OVN lab and its cloud, started once per test process (one pytest-xdist worker) and
shared by every module that asks — tests/ovn and the ``ovn`` half of tests/both
(issue 30: the lab's start, 1–4 minutes of Keystone, Neutron and Octavia on this
machine, was paid once per module).

The one home of these fixtures: ``tests/conftest.py`` imports them, so that tests/ovn
and tests/both see the same session fixtures (a fixture defined in two conftest files
would be two fixtures, two labs). Each is lazy — started by the first test that asks
for it — and named ``ovn_*`` (tests/ovn/conftest.py gives tests/ovn the short names):

- ``ovn_lab``: OVN central and two hypervisors (lab.py), stopped by PID at the end of
  the session, or when its start fails; then the root namespace is checked against its
  state before the lab started.
- ``ovn_cloud``: Keystone and Neutron with ML2/OVN on the lab (neutron_ovn.py).
- ``ovn_conn`` / ``ovn_env``: an admin openstacksdk connection to it; netbay's processes'
  environment (a clouds.yaml naming it ``ovn``).
- ``ovn_octavia``: Octavia with ovn-octavia-provider on the lab, and a connection whose
  catalog has it.
- ``ovn_cni_daemons``: ``netbay cni-daemon --backend openstack`` on each of the first two
  chassis; ``ovn_cni_plugin``: the ``netbay-cni`` launcher.

What a module makes on the shared lab and cloud it removes: :func:`left_as_found`
checks that after each module (networks, ports, routers, floating IPs and security
groups in Neutron; ports in each chassis's br-int; the lab's namespaces).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.dataplane.cni_fixtures import Daemon

    from .lab import OvnLab

HYPERVISORS = 2


def skip_reason() -> str | None:
    """Why the OVN lab cannot run on this host, or None."""
    from .lab import missing_binaries

    if os.geteuid() != 0:
        return "OVN lab tests need root (network namespaces, OVS daemons)"
    missing = missing_binaries()
    if missing:
        return ("OVN lab tests need the Debian packages openvswitch-switch, ovn-central and "
                f"ovn-host (scripts/setup.sh installs them); missing: {', '.join(missing)}")
    if not os.path.exists("/dev/net/tun"):
        return "OVN lab tests need /dev/net/tun (the userspace datapath's internal ports)"
    return None


# What this process has started, and the lab's state just after its start (for
# left_as_found: a module that started the lab or the cloud found them so).
_running: dict[str, Any] = {}
_baseline: dict[str, set[str]] = {}


@pytest.fixture(scope="session")
def ovn_lab() -> Iterator[OvnLab]:
    """The lab of this test process; after it stopped, no daemon, namespace or temp dir of
    it is left and the root namespace is as it was before it started."""
    from tests.dataplane.dp_helpers import root_snapshot

    from .guards import check_root_unchanged, stop_lab
    from .lab import OvnLab

    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    before = root_snapshot()
    lab = OvnLab(hypervisors=HYPERVISORS)
    try:
        lab.start()
        _baseline.update(_lab_state(lab))
        _running["lab"] = lab
        yield lab
    finally:
        _running.pop("lab", None)
        _baseline.clear()
        stop_lab(lab)
        check_root_unchanged(before)


@pytest.fixture(scope="session")
def ovn_cloud(ovn_lab: OvnLab, postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Keystone and a Neutron API server with ML2/OVN on ``ovn_lab`` (a PostgreSQL database
    of its own in the run's throwaway cluster); see neutron_ovn.py."""
    from .neutron_ovn import ovn_neutron

    work: Path = tmp_path_factory.mktemp("ovn-neutron")
    with ovn_neutron(ovn_lab, work, postgres.url(postgres.create_database())) as cloud, \
            contextlib.closing(cloud.connection()) as conn:
        _running["conn"] = conn
        try:
            yield cloud
        finally:
            _running.pop("conn", None)


@pytest.fixture(scope="session")
def ovn_conn(ovn_cloud) -> Iterator:
    """An openstacksdk connection (admin) to ``ovn_cloud``."""
    with contextlib.closing(ovn_cloud.connection()) as c:
        yield c


@pytest.fixture(scope="session")
def ovn_env(ovn_cloud, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of netbay's processes on the lab's cloud: a clouds.yaml naming it
    ``ovn`` (no other OS_* variable); skipped without os-vif (netbay's ``cloud`` extra)."""
    pytest.importorskip("os_vif", reason="os-vif is netbay's optional `cloud` extra")
    path = tmp_path_factory.mktemp("ovn-clouds") / "clouds.yaml"
    path.write_text(json.dumps({"clouds": {"ovn": {"auth": ovn_cloud.auth(), "region_name": "RegionOne",
                                                   "identity_api_version": 3}}}))
    base = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    return {**base, "OS_CLIENT_CONFIG_FILE": str(path), "OS_CLOUD": "ovn", "NETBAY_LOG_LEVEL": "INFO"}


@pytest.fixture(scope="session")
def ovn_octavia(ovn_cloud, ovn_lab: OvnLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """An openstacksdk connection whose catalog has Octavia, its provider ``ovn``
    (ovn-octavia-provider on the lab's NB and SB)."""
    from tests.peers.octavia_peer import OvnProvider, octavia

    provider = OvnProvider(ovn_lab.nb_remote, ovn_lab.sb_remote)
    with octavia(ovn_cloud, tmp_path_factory.mktemp("octavia-ovn"), provider), \
            contextlib.closing(ovn_cloud.connection()) as c:
        yield c


@pytest.fixture(scope="session")
def ovn_cni_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``netbay-cni`` launcher, as ``netbay cni-install`` writes it."""
    from netbay.plugins.cni.launcher import install

    return install(tmp_path_factory.mktemp("ovn-cnibin"))


@pytest.fixture(scope="session")
def ovn_cni_daemons(ovn_lab: OvnLab, ovn_env: dict[str, str],
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Daemon]]:
    """``netbay cni-daemon --backend openstack`` on each of the first two chassis."""
    from .cni import start_daemon

    root = tmp_path_factory.mktemp("ovn-cni-daemons")
    made: list[Daemon] = []
    try:
        for hv in ovn_lab.hvs[:2]:
            made.append(start_daemon(ovn_lab, hv, ovn_env, root / hv.ns))
        yield made
    finally:
        for d in made:
            d.stop()


def _lab_state(lab: OvnLab) -> dict[str, set[str]]:
    """The lab's namespaces (but the outside, made once) and the br-int ports plugged into
    it (not ovn-controller's own: its Geneve tunnels ``ovn-…``, which follow the chassis
    registering, and patch ports ``patch-…`` to br-ex, which follow provider networks)."""
    seen = {"namespaces": set(lab.namespaces) - ({lab.outside} if lab.outside else set())}
    for hv in lab.hvs:
        seen[f"{hv.ns} br-int ports"] = {p for p in hv.vsctl("list-ports", "br-int").split()
                                         if not p.startswith(("ovn-", "patch-"))}
    return seen


def _state() -> dict[str, set[str]]:
    """What modules make on the shared lab and cloud, as far as this process started them."""
    conn, lab = _running.get("conn"), _running.get("lab")
    seen = _lab_state(lab) if lab is not None else {}
    if conn is not None:
        net = conn.network
        seen["networks"] = {f"{n.id} {n.name}" for n in net.networks()}
        seen["ports"] = {f"{p.id} {p.name} {p.device_owner}" for p in net.ports()}
        seen["routers"] = {f"{r.id} {r.name}" for r in net.routers()}
        seen["floating IPs"] = {f"{f.id} {f.floating_ip_address}" for f in net.ips()}
        seen["security groups"] = {f"{g.id} {g.name}" for g in net.security_groups() if g.name != "default"}
    return seen


@contextlib.contextmanager
def left_as_found() -> Iterator[None]:
    """Fail if what the enclosed block (a module) made on the shared lab or cloud is still
    there after it. A lab or cloud it started counts as found as it was after its start
    (the outside namespace, which stays once made, excepted)."""
    before = _state()
    yield
    left = []
    for key, now in _state().items():
        left += [f"{key}: {item}" for item in sorted(now - before.get(key, _baseline.get(key, set())))]
    assert not left, "left on the shared OVN lab and cloud after the module:\n  " + "\n  ".join(left)
