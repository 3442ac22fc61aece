"""The network driver registry: one :class:`DriverSpec` per driver (:mod:`netbay.drivers.spec`),
one :class:`Driver` protocol.

A driver package (``netbay/drivers/<name>/``) declares in its ``SPEC`` everything
the rest of netbay asks about it — the COEs it serves and the ones it is the
default for, its labels (type, check, default: written once), the rules across
them, the kernel features it needs, whether containers can be plugged into its
nodes, its typed config and where its kernel code lives — and
``netbay/drivers/__init__.py`` registers it with one line. Nothing else switches on
a driver's name (flannel's ``pkg/backend`` pattern, one level up):

* the API checks labels with :meth:`DriverSpec.parse` (:mod:`netbay.coe.labels`);
* :func:`config` turns a name and labels into the typed config, parsed once at
  cluster create: :func:`stored` is what the cluster keeps (``driver_config``), the
  cluster network copies and the agent is given; :func:`loaded` turns it back
  without reading a label;
* :func:`make` builds the driver object the agent, the Docker plugin and the
  container API drive; :func:`default_driver` and :func:`takes_containers` answer
  the COE and placement questions.

Registration order is significant: it is the order Magnum lists a COE's supported
drivers in its error messages (``docker/flannel`` for swarm, ``flannel/calico``
for kubernetes).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from netbay.drivers.labelspec import LabelError, LabelSpec
from netbay.drivers.spec import DriverSpec

if TYPE_CHECKING:
    from netbay.drivers.leases import NetworkConfig
    from netbay.drivers.node import Node
    from netbay.drivers.pods import Bridged, PodLink

__all__ = ["BASE_KERNEL_NEEDS", "COMMON_LABELS", "DRIVERS", "Driver", "DriverConfig", "DriverSpec",
           "LabelError", "LabelSpec", "config", "default_driver", "get", "known_labels", "loaded", "make",
           "on_nodes", "register", "stored", "supported", "takes_containers"]


class DriverConfig(Protocol):
    """A driver's typed config: built from the effective labels, stored as plain data
    (a dataclass). ``network_config`` is asked only of a driver on the nodes."""

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> DriverConfig:
        """From every label the driver reads, checked and defaulted (strings)."""

    @property
    def network_config(self) -> NetworkConfig:
        """The lease manager's config: what each node gets a lease of."""


@runtime_checkable
class Driver(Protocol):
    """One cluster's driver: holds no kernel state; every verb is idempotent.

    ``allocate`` is pure (leases for node names, keeping the ones held); the others
    work in the node's namespace. ``sync_peers`` takes the *complete* node list."""

    config: Any
    requires: frozenset[str]

    def allocate(self, nodes: Iterable[str], current: Mapping[str, str]) -> dict[str, str]: ...

    def pod_mtu(self, node: Node) -> int: ...

    def setup_node(self, node: Node) -> int: ...

    def sync_peers(self, node: Node, peers: list[Node]) -> object: ...

    def teardown(self, node: Node) -> None: ...

    def attach_pod(self, node: Node, pod_ns: str, address: str, *, ifname: str = "eth0",
                   mtu: int | None = None) -> PodLink: ...

    def detach_pod(self, node: Node, pod_ns: str, *, ifname: str = "eth0") -> bool: ...


class BridgedDriver(Driver, Protocol):
    """A driver whose pods hang off a node bridge (``takes_containers``): a runtime that
    configures its containers itself (Docker's libnetwork) plugs them where this says."""

    def bridged(self, node: Node) -> Bridged: ...


DRIVERS: dict[str, DriverSpec] = {}

# Labels every cluster reads whatever its driver (the base cluster fragment's).
COMMON_LABELS: tuple[LabelSpec, ...] = (
    LabelSpec("fixed_subnet_cidr", "cidr", "10.0.0.0/24",
              "The cluster's private subnet, made when the template names no fixed_subnet."),
)

# What every embedded cluster needs whatever its driver (ports, networks, security
# groups, routers, floating IPs, load balancers).
BASE_KERNEL_NEEDS: tuple[tuple[str, str], ...] = (
    ("veth", "every port"), ("bridge", "every network"), ("br_netfilter", "security groups"),
    ("nf_tables", "security groups, NAT"), ("conntrack", "stateful security groups"),
    ("nft_nat", "routers, floating IPs, load balancers"),
)


def register(spec: DriverSpec) -> DriverSpec:
    """Add a driver; its name must be new and a default COE must have no other default."""
    if spec.name in DRIVERS:
        raise ValueError(f"network driver {spec.name!r} is registered already")
    taken = [coe for coe in spec.default_for if default_driver(coe) is not None]
    if taken:
        raise ValueError(f"network driver {spec.name!r}: {', '.join(taken)} already has a default driver")
    if spec.factory and spec.config is None:
        raise ValueError(f"network driver {spec.name!r}: a factory is built from a config; it has none")
    DRIVERS[spec.name] = spec
    return spec


def get(name: str | None) -> DriverSpec | None:
    return DRIVERS.get(name or "")


def supported(coe: str) -> list[str]:
    """The drivers serving ``coe``, in registry order (Magnum's order)."""
    return [d.name for d in DRIVERS.values() if coe in d.coes]


def default_driver(coe: str | None) -> str | None:
    """The driver a template of ``coe`` gets when it names none (and the operator set none)."""
    return next((d.name for d in DRIVERS.values() if coe in d.default_for), None)


def takes_containers(name: str | None) -> bool:
    spec = get(name)
    return spec is not None and spec.takes_containers


def known_labels(spec: DriverSpec | None) -> dict[str, LabelSpec]:
    """The labels a cluster with ``spec``'s driver reads: the common ones and the driver's."""
    specs = {s.key: s for s in COMMON_LABELS}
    if spec is not None:
        specs.update({s.key: s for s in spec.labels})
    return specs


def config(name: str | None, labels: Mapping[str, Any] | None) -> Any:
    """The typed config of driver ``name`` for ``labels`` (:class:`LabelError`, a
    ValueError, on a bad one); None for a driver without one (or none)."""
    spec = get(name)
    return None if spec is None else spec.parse(labels)


def stored(cfg: Any) -> dict[str, Any] | None:
    """A typed config as a cluster stores it (and the agent receives it); None stays None."""
    return None if cfg is None else asdict(cfg)


def loaded(name: str | None, data: Mapping[str, Any] | None) -> Any:
    """The typed config of driver ``name`` from what :func:`stored` made: no label is
    read again. None for a driver without a config, or nothing stored."""
    spec = get(name)
    if spec is None or spec.config is None or data is None:
        return None
    return spec.config(**data)


def on_nodes(name: str | None) -> bool:
    """Whether driver ``name`` programs the cluster's nodes (leases, the agent)."""
    spec = get(name)
    return spec is not None and spec.on_nodes


def make(name: str | None, cfg: Any) -> Driver:
    """Driver ``name``'s object for ``cfg``: its typed config or the stored plain data."""
    spec = get(name)
    if spec is None or not spec.on_nodes:
        raise ValueError(f"network driver {name!r} has no driver for cluster nodes")
    if isinstance(cfg, Mapping):
        cfg = loaded(name, cfg)
    module, _, cls = spec.factory.partition(":")
    return getattr(importlib.import_module(module), cls)(cfg)
