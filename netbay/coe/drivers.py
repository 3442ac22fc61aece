"""The network driver registry: each driver declared once, with its COEs and label schema.

A declaration is data, not code paths: the API validates labels with it, the
Network Driver and Label Matrices (``GET /v1/network-drivers``, ``docs/``) print
it, and the cluster composition (later) reads a driver's labels through it, so
a label can never be validated one way and realized another.

Registry order is significant: it is the order Magnum lists a COE's supported
drivers in its error messages (``docker/flannel`` for swarm, ``flannel/calico``
for kubernetes).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from netbay.coe.cidrs import unusable

LabelType = Literal["cidr", "int", "enum", "string"]


class LabelError(ValueError):
    """A label value the API refuses; ``str()`` is the whole message."""


@dataclass(frozen=True)
class LabelSpec:
    """One label a driver reads: its type, allowed values and default."""

    key: str
    type: LabelType
    default: str
    help: str
    allowed: tuple[str, ...] = ()
    # Values a user might expect (Magnum accepted them) that netbay refuses, and why.
    refused: Mapping[str, str] = field(default_factory=dict)
    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: Any) -> str:
        """The value as the driver will read it (a string), or ``LabelError``."""
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        text = str(value).strip() if isinstance(value, str) else str(value)
        if self.type == "cidr":
            return self._cidr(value, text)
        if self.type == "int":
            return self._int(value, text)
        if self.type == "enum":
            if text in self.refused:
                raise LabelError(f"Label {self.key}={text} is not supported: {self.refused[text]}")
            if text not in self.allowed:
                raise LabelError(self._bad(value, f"expecting one of {self.expectation()}"))
        return text

    def expectation(self) -> str:
        if self.type == "cidr":
            return "an IPv4 network in CIDR notation, e.g. " + self.default
        if self.type == "int":
            low = "" if self.minimum is None else f" >= {self.minimum}"
            high = "" if self.maximum is None else f" <= {self.maximum}"
            return "an integer" + (low + ("," if low and high else "") + high if low or high else "")
        if self.type == "enum":
            return "|".join(self.allowed)
        return "a string"

    def _bad(self, value: Any, why: str) -> str:
        return f"Invalid value {value!r} for label {self.key}: {why}."

    def _cidr(self, value: Any, text: str) -> str:
        try:
            net = ipaddress.ip_network(text, strict=True)
        except ValueError:
            raise LabelError(self._bad(value, f"expecting {self.expectation()}")) from None
        if net.version != 4 or "/" not in text:
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        problem = unusable(net)
        if problem:
            raise LabelError(self._bad(value, problem))
        return str(net)

    def _int(self, value: Any, text: str) -> str:
        if isinstance(value, float) and not value.is_integer():
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        try:
            number = int(float(text)) if isinstance(value, float) else int(text, 10)
        except ValueError:
            raise LabelError(self._bad(value, f"expecting {self.expectation()}")) from None
        if (self.minimum is not None and number < self.minimum) or (
                self.maximum is not None and number > self.maximum):
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        return str(number)


# A rule across several labels of one driver: given the effective values (defaults
# filled in), a message when they do not fit together.
CrossCheck = Callable[[Mapping[str, str]], "str | None"]
# (kernel feature, what needs it) for the effective labels; features are
# netbay.dataplane.features names.
KernelNeeds = Callable[[Mapping[str, str]], "list[tuple[str, str]]"]

# What every embedded cluster needs whatever its driver (ports, networks, security
# groups, routers, floating IPs, load balancers).
BASE_KERNEL_NEEDS: tuple[tuple[str, str], ...] = (
    ("veth", "every port"), ("bridge", "every network"), ("br_netfilter", "security groups"),
    ("nf_tables", "security groups, NAT"), ("conntrack", "stateful security groups"),
    ("nft_nat", "routers, floating IPs, load balancers"),
)


@dataclass(frozen=True)
class NetworkDriver:
    """A container network driver: the COEs it serves and the labels it reads."""

    name: str
    summary: str
    coes: tuple[str, ...]
    labels: tuple[LabelSpec, ...] = ()
    checks: tuple[CrossCheck, ...] = ()
    beyond_magnum: str = ""
    kernel: KernelNeeds | None = None

    def label(self, key: str) -> LabelSpec | None:
        return next((spec for spec in self.labels if spec.key == key), None)

    def effective(self, labels: Mapping[str, str]) -> dict[str, str]:
        """Every label this driver reads: the given (checked) values, else defaults."""
        return {spec.key: labels.get(spec.key, spec.default) for spec in self.labels}


def _subnetlen_fits(values: Mapping[str, str]) -> str | None:
    network = ipaddress.ip_network(values["flannel_network_cidr"])
    subnetlen = int(values["flannel_network_subnetlen"])
    if subnetlen <= network.prefixlen:
        return (f"Label flannel_network_subnetlen={subnetlen} must be longer than the prefix of "
                f"flannel_network_cidr={network} (/{network.prefixlen}): each node gets a "
                f"/{subnetlen} out of it.")
    return None


_ENCAPSULATING = {"Always", "CrossSubnet"}


def _flannel_kernel(values: Mapping[str, str]) -> list[tuple[str, str]]:
    backend = values["flannel_backend"]
    return [("vxlan", f"flannel_backend={backend}")] if backend == "vxlan" else []


def _calico_kernel(values: Mapping[str, str]) -> list[tuple[str, str]]:
    out = []
    if values["calico_ipv4pool_ipip"] in _ENCAPSULATING:
        out.append(("ipip", f"calico_ipv4pool_ipip={values['calico_ipv4pool_ipip']}"))
    if values["calico_ipv4pool_vxlan"] in _ENCAPSULATING:
        out.append(("vxlan", f"calico_ipv4pool_vxlan={values['calico_ipv4pool_vxlan']}"))
    return out


def _one_calico_encapsulation(values: Mapping[str, str]) -> str | None:
    ipip, vxlan = values["calico_ipv4pool_ipip"], values["calico_ipv4pool_vxlan"]
    if ipip in _ENCAPSULATING and vxlan in _ENCAPSULATING:
        return (f"Labels calico_ipv4pool_ipip={ipip} and calico_ipv4pool_vxlan={vxlan} cannot both "
                "encapsulate: a Calico IP pool uses IP-in-IP or VXLAN, not both. Set one of them "
                "to Never.")
    return None


def _overlay_fits(values: Mapping[str, str]) -> str | None:
    prefix = ipaddress.ip_network(values["docker_overlay_cidr"]).prefixlen
    if prefix > 24:
        return (f"Label docker_overlay_cidr={values['docker_overlay_cidr']} is too small: at most a /24 "
                "(each node hands out addresses from its own block of it).")
    return None


DOCKER = NetworkDriver(
    name="docker",
    summary="Docker's overlay: one container subnet across the nodes of a Swarm or Mesos cluster, "
            "carried between nodes by VXLAN (VNI 4096, UDP 4789).",
    coes=("swarm", "swarm-mode", "mesos"),
    labels=(
        LabelSpec("docker_overlay_cidr", "cidr", "10.200.0.0/16",
                  "The overlay network's subnet, one L2 network across every node; each node "
                  "hands out addresses from a block of it (a /24 where it fits)."),
    ),
    checks=(_overlay_fits,),
    kernel=lambda values: [("vxlan", "network_driver=docker (overlay)")],
    beyond_magnum="Magnum left the overlay to Docker; docker_overlay_cidr is a netbay label.",
)

FLANNEL = NetworkDriver(
    name="flannel",
    summary="flannel: one subnet per node out of a cluster-wide network, joined by VXLAN or host routes.",
    coes=("kubernetes", "swarm", "swarm-mode"),
    labels=(
        LabelSpec("flannel_network_cidr", "cidr", "10.100.0.0/16",
                  "The network flannel hands out node subnets from (flannel's Network)."),
        LabelSpec("flannel_network_subnetlen", "int", "24",
                  "Prefix length of each node's subnet (flannel's SubnetLen); longer than the "
                  "network's prefix.", minimum=8, maximum=30),
        LabelSpec("flannel_backend", "enum", "vxlan",
                  "How node subnets reach each other: vxlan encapsulates (works across L3); "
                  "host-gw routes directly (all nodes on one L2 segment, as a cluster's private "
                  "network is; no encapsulation overhead).",
                  allowed=("vxlan", "host-gw"),
                  refused={"udp": "flannel's udp backend forwards every packet through a userspace "
                                  "process; flannel recommends it only for debugging and netbay does "
                                  "not realize it. Use vxlan (the default) or host-gw (fastest, "
                                  "nodes on one L2 network)."}),
        LabelSpec("flannel_ip_masq", "enum", "true",
                  "flanneld's --ip-masq (on in Magnum's templates): pod traffic leaving "
                  "flannel_network_cidr is masqueraded to the node's address, so pods reach "
                  "other networks behind the cluster's router and the external network; "
                  "pod-to-pod traffic keeps its source (netbay label).",
                  allowed=("true", "false")),
    ),
    checks=(_subnetlen_fits,),
    kernel=_flannel_kernel,
    beyond_magnum=("Magnum's default backend was udp until 2019; netbay defaults to vxlan and refuses udp. "
                   "flannel_ip_masq is a netbay label (Magnum always runs flanneld with --ip-masq)."),
)

CALICO = NetworkDriver(
    name="calico",
    summary="Calico: routed pod networks from an IP pool, optionally encapsulated (IP-in-IP or VXLAN).",
    coes=("kubernetes",),
    labels=(
        LabelSpec("calico_ipv4pool", "cidr", "192.168.0.0/16",
                  "The IPv4 pool pod addresses come from."),
        LabelSpec("calico_ipv4pool_ipip", "enum", "Off",
                  "IP-in-IP encapsulation of the pool (Off and Never both mean none).",
                  allowed=("Off", "Never", "CrossSubnet", "Always")),
        LabelSpec("calico_ipv4pool_vxlan", "enum", "Never",
                  "VXLAN encapsulation of the pool (netbay extension; Magnum has no such label).",
                  allowed=("Never", "CrossSubnet", "Always")),
        LabelSpec("calico_ipv4pool_nat_outgoing", "enum", "true",
                  "The pool's natOutgoing (true in Magnum's templates): pod traffic leaving the "
                  "pool is masqueraded to the node's address; pod-to-pod traffic keeps its "
                  "source (netbay label).",
                  allowed=("true", "false")),
    ),
    checks=(_one_calico_encapsulation,),
    kernel=_calico_kernel,
    beyond_magnum="calico_ipv4pool_vxlan and calico_ipv4pool_nat_outgoing are netbay labels.",
)

def _kuryr_ranges_fit(values: Mapping[str, str]) -> str | None:
    pool = ipaddress.ip_network(values["kuryr_pod_subnet_pool"])
    prefixlen = int(values["kuryr_pod_subnet_prefixlen"])
    service = ipaddress.ip_network(values["kuryr_service_cidr"])
    if prefixlen <= pool.prefixlen:
        return (f"Label kuryr_pod_subnet_prefixlen={prefixlen} must be longer than the prefix of "
                f"kuryr_pod_subnet_pool={pool} (/{pool.prefixlen}): each namespace (or node) gets a "
                f"/{prefixlen} out of it.")
    if pool.overlaps(service):
        return (f"Labels kuryr_pod_subnet_pool={pool} and kuryr_service_cidr={service} overlap: cluster "
                "IPs and pod addresses must come from different ranges.")
    return None


KURYR = NetworkDriver(
    name="kuryr",
    summary="kuryr: every pod a port on its namespace's network (subnets from a pool), every Service a "
            "load balancer whose VIP is the cluster IP.",
    coes=("kubernetes",),
    labels=(
        LabelSpec("kuryr_subnet_driver", "enum", "namespace",
                  "What gets a network and a subnet from the pod pool: each Kubernetes namespace "
                  "(kuryr's default) or each node.", allowed=("namespace", "node")),
        LabelSpec("kuryr_pod_subnet_pool", "cidr", "10.10.0.0/16",
                  "The subnet pool pod subnets are allocated from (the cluster subnet)."),
        LabelSpec("kuryr_pod_subnet_prefixlen", "int", "24",
                  "Prefix length of each namespace's (or node's) pod subnet.", minimum=8, maximum=29),
        LabelSpec("kuryr_service_cidr", "cidr", "10.96.0.0/16",
                  "The service range: the subnet cluster IPs (load balancer VIPs) come from."),
        LabelSpec("kuryr_pod_runtime", "enum", "sandbox",
                  "What runs a pod on its port: a network namespace of its own (sandbox) or a Docker "
                  "container from its first container's image (docker; the controller's NETBAY_DOCKER_HOST). "
                  "A pod's annotation netbay.io/runtime overrides it.", allowed=("sandbox", "docker")),
    ),
    checks=(_kuryr_ranges_fit,),
    beyond_magnum="Magnum never shipped a kuryr driver; the labels follow kuryr-kubernetes' options "
                  "(pod_subnet_pool, service_subnet, subnet driver namespace|node).",
)

DRIVERS: dict[str, NetworkDriver] = {d.name: d for d in (DOCKER, FLANNEL, CALICO, KURYR)}

# Labels every cluster reads whatever its driver (the base cluster fragment's).
COMMON_LABELS: tuple[LabelSpec, ...] = (
    LabelSpec("fixed_subnet_cidr", "cidr", "10.0.0.0/24",
              "The cluster's private subnet, made when the template names no fixed_subnet."),
)


def supported(coe: str) -> list[str]:
    """The drivers serving ``coe``, in registry order (Magnum's order)."""
    return [d.name for d in DRIVERS.values() if coe in d.coes]


def known_labels(driver: NetworkDriver | None) -> dict[str, LabelSpec]:
    """The labels a cluster with ``driver`` reads: the common ones and the driver's."""
    specs = {s.key: s for s in COMMON_LABELS}
    if driver is not None:
        specs.update({s.key: s for s in driver.labels})
    return specs
