"""One place, two backends (issue 26, item 5): the ``place`` fixture gives the packet
tests of this directory a network to put containers on, security groups, a router
with a gateway on an external network, a namespace standing for the outside and an
Octavia API for load balancers —

- ``embedded``: netbay's own server and agent (``tests/dataplane/agent_fixtures.py``),
  the ``public`` network its agent bridges to an outside namespace;
- ``ovn`` (marker ``ovn``, ``peers``): the OVN lab with its real Neutron ML2/OVN — the
  session's shared ``ovn_lab`` and ``ovn_cloud`` (``tests/ovn/fixtures.py``), the same
  lab and cloud tests/ovn uses, never a second one — a provider network bridged on
  chassis 2 to the lab's outside namespace, and Octavia with ovn-octavia-provider
  (``ovn_octavia``) once a test asks for it.

Containers are pods plugged by netbay's CNI daemon in both (``netbay-cni`` ADD and
DEL, the real launcher): on the cloud one daemon per chassis (the shared
``ovn_cni_daemons``), binding the port there with os-vif; embedded, one daemon, the
agent adopting the port. The tests drive both
through the same openstacksdk calls (netbay's API is Neutron's).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from netbay.dataplane import netns
from tests.dataplane.cni_fixtures import Daemon, invoke, netbay_conf
from tests.dataplane.dp_helpers import PREFIX, root_snapshot
from tests.ovn.fixtures import left_as_found
from tests.ovn.guards import check_root_unchanged

CIDR = "10.31.0.0/24"
EXTERNAL_CIDR = "172.24.4.0/24"   # the cloud's external subnet (the lab's outside is .1)
SETTLE_TIMEOUT = 60


@dataclass
class Pod:
    name: str
    ns: str
    port: object   # openstacksdk Port
    daemon: Daemon

    @property
    def ip(self) -> str:
        return self.port.fixed_ips[0]["ip_address"]


@dataclass
class Place:
    """A network on one backend, and how to put pods on it (on host 0 or 1: the lab's
    two chassis; one host embedded)."""
    backend: str
    conn: object                 # openstacksdk Connection (admin)
    network: object
    subnet: object
    public: object               # the external network
    outside: str                 # the namespace standing for the outside
    daemons: list[Daemon]
    plugin: Path
    lab: object | None = None    # the OVN lab (cloud only)
    pods: list[Pod] = field(default_factory=list)
    balancers: Callable[[], object] | None = None   # an openstacksdk Connection with Octavia, made on first use

    def pod(self, name: str, host: int = 0) -> Pod:
        """A pod namespace with ``eth0`` on the network, plugged by netbay-cni ADD."""
        ns = f"{PREFIX}bp{self.backend[0]}-{name}"
        netns.create(ns)
        daemon = self.daemons[host % len(self.daemons)]
        r = invoke(self.plugin, "ADD", netbay_conf("bothnet", self.network.id, daemon.sock), container=name,
                   netns=netns.path(ns), args=f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={name}")
        if r.rc != 0:
            netns.delete(ns)
            raise AssertionError(f"ADD {name}: {r}\n{daemon.log.read_text()[-3000:]}")
        (port,) = self.conn.network.ports(network_id=self.network.id, name=f"default/{name}")
        made = Pod(name, ns, port, daemon)
        self.pods.append(made)
        return made

    def remove(self, pod: Pod) -> None:
        r = invoke(self.plugin, "DEL", netbay_conf("bothnet", self.network.id, pod.daemon.sock),
                   container=pod.name, netns=netns.path(pod.ns),
                   args=f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod.name}")
        netns.delete(pod.ns)
        self.pods.remove(pod)
        assert r.rc == 0, r

    def settle(self, *pods: Pod) -> None:
        """Wait until the ports are ACTIVE (the agent adopted them; OVN claimed them) and,
        on the cloud, every chassis applied the NB's current state."""
        for pod in pods:
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while (status := self.conn.network.get_port(pod.port.id).status) != "ACTIVE":
                assert time.monotonic() < deadline, f"{pod.name}'s port stayed {status}"
                time.sleep(0.2)
        self.sync()

    def sync(self) -> None:
        if self.lab is not None:
            self.lab.sync()

    def lb_conn(self):
        """A connection whose catalog has the backend's Octavia API (embedded: netbay's own;
        cloud: Octavia with ovn-octavia-provider, started on first use)."""
        return self.balancers() if self.balancers is not None else self.conn

    def vip_ready(self, lb) -> None:
        """What the backend's VIP port needs before it answers (cloud: Neutron 29 does not
        know ovn-octavia-provider 11's VIP port owner; see docs/ovn-lab.md)."""
        if self.lab is not None:
            self.conn.network.update_port(lb.vip_port_id, device_owner="")


def _plugin(tmp: Path) -> Path:
    from netbay.plugins.cni.launcher import install

    install(tmp)
    return tmp / "netbay-cni"


def _embedded(tmp: Path) -> Iterator[Place]:
    from tests.dataplane.agent_fixtures import make_cloud
    from tests.dataplane.docker_fixtures import plugin_env

    (tmp / "cloud").mkdir()
    with contextlib.contextmanager(make_cloud)(tmp / "cloud", "boe") as cloud:
        conn = cloud.server.connect()
        daemon = Daemon(tmp / "cni.sock", cloud.server.url, cloud.names.prefix, plugin_env(cloud.server),
                        tmp / "daemon.log").start()
        try:
            network = conn.network.create_network(name="both-net")
            subnet = conn.network.create_subnet(network_id=network.id, cidr=CIDR, ip_version=4, name="both-subnet")
            public = conn.network.find_network("public")
            yield Place("embedded", conn, network, subnet, public, cloud.names.external(public.id), [daemon],
                        _plugin(tmp / "bin"))
            conn.network.delete_network(network)
        finally:
            daemon.stop()


def _ovn(request: pytest.FixtureRequest) -> Iterator[Place]:
    from tests.ovn.fixtures import skip_reason
    from tests.ovn.lab import OUTSIDE, PHYSNET

    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    lab = request.getfixturevalue("ovn_lab")
    conn = request.getfixturevalue("ovn_conn")
    daemons: list[Daemon] = request.getfixturevalue("ovn_cni_daemons")
    network = public = None
    try:
        outside = lab.add_outside(lab.hvs[1])
        network = conn.network.create_network(name="both-net")
        subnet = conn.network.create_subnet(network_id=network.id, cidr=CIDR, ip_version=4, name="both-subnet",
                                            is_dhcp_enabled=False)
        public = conn.network.create_network(name="public", is_router_external=True, provider_network_type="flat",
                                             provider_physical_network=PHYSNET)
        conn.network.create_subnet(network_id=public.id, cidr=EXTERNAL_CIDR, ip_version=4,
                                   gateway_ip=OUTSIDE.split("/")[0], is_dhcp_enabled=False, name="public-subnet")
        yield Place("ovn", conn, network, subnet, public, outside, daemons, request.getfixturevalue("ovn_cni_plugin"),
                    lab=lab, balancers=lambda: request.getfixturevalue("ovn_octavia"))
    finally:
        for net in (network, public):
            if net is not None:
                conn.network.delete_network(net)


@pytest.fixture(scope="module", params=["embedded", pytest.param("ovn", marks=[pytest.mark.ovn, pytest.mark.peers])])
def place(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Place]:
    """The backend's place for the module (see the module docstring)."""
    tmp = tmp_path_factory.mktemp(f"both-{request.param}")
    make = _embedded(tmp) if request.param == "embedded" else _ovn(request)
    with left_as_found():
        yield from make


@pytest.fixture
def clean(place: Place) -> Iterator[Place]:
    """``place``, with its ports and namespaces checked to be as they were after the test."""
    ports = {p.id for p in place.conn.network.ports()}
    yield place
    for pod in list(place.pods):
        place.remove(pod)
    assert {p.id for p in place.conn.network.ports()} == ports


@pytest.fixture(scope="package", autouse=True)
def root_untouched() -> Iterator[None]:
    """Nothing of either backend may appear in the root namespace."""
    if os.geteuid() != 0:
        yield
        return
    before = root_snapshot()
    yield
    check_root_unchanged(before)
