"""What a fragment sees and what it gives back: the whole fragment interface.

A fragment is a plain function ``(Context) -> Fragment``. It reads the cluster
through the context and returns resources, parameters and outputs; it never
mutates another fragment's resources. The two hooks across fragments are
explicit fields: ``sg_rules`` (extra inline rules for a security group another
fragment declared, e.g. flannel's VXLAN port) and ``node_metadata`` (values every
server carries, e.g. the network driver's config), so driver specifics stay in
the driver's fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from netbay.coe.graph import GraphError, Node, Output, Param
from netbay.drivers.labelspec import LabelError
from netbay.drivers.spec import DriverSpec


@dataclass(frozen=True)
class CoeSpec:
    """What the base fragment needs to know of a COE: node names, its own security
    group rules, the API port and address format (as Magnum reports ``api_address``)."""

    name: str
    master_prefix: str
    minion_prefix: str
    master_sg: str
    minion_sg: str
    master_rules: tuple[dict[str, Any], ...]
    minion_rules: tuple[dict[str, Any], ...]
    api_port: int
    api_scheme: str
    etcd_lb: bool
    nodes: Callable[[Context], Fragment]
    #: (port, the service) a master answers on that health checks and load balancers use,
    #: the API first: what netbay's stand-ins answer for (:mod:`netbay.dataplane.standin`)
    standins: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Context:
    """The cluster being composed: Magnum's template and cluster fields, merged labels."""

    template: Mapping[str, Any]
    cluster: Mapping[str, Any]
    labels: Mapping[str, str]
    coe: CoeSpec
    #: the merged labels as given (numbers stay numbers): what a driver's check reads
    given: Mapping[str, Any] = field(default_factory=dict)

    def driver_labels(self, spec: DriverSpec) -> dict[str, str]:
        """Every label ``spec``'s driver reads, checked and normalized as the API checks
        them (:meth:`DriverSpec.checked`): the export reads what the agent is given."""
        try:
            return spec.checked(self.given)
        except LabelError as exc:
            raise GraphError(str(exc)) from None

    def get(self, key: str, default: Any = None) -> Any:
        """A cluster field, else the template's (Magnum: unset cluster values inherit)."""
        value = self.cluster.get(key)
        if value is None:
            value = self.template.get(key)
        return default if value is None else value

    @property
    def master_count(self) -> int:
        return int(self.cluster.get("master_count") or 1)

    @property
    def node_count(self) -> int:
        count = self.cluster.get("node_count")
        return 1 if count is None else int(count)

    @property
    def master_lb(self) -> bool:
        return bool(self.get("master_lb_enabled", False))

    @property
    def floating_ips(self) -> bool:
        return bool(self.get("floating_ip_enabled", True))

    @property
    def new_network(self) -> bool:
        """True unless the cluster reuses an existing ``fixed_network``."""
        return not self.get("fixed_network")

    def network_ref(self) -> Any:
        from netbay.coe.graph import get_param, get_resource
        return get_resource("fixed_network") if self.new_network else get_param("fixed_network")

    def subnet_ref(self) -> Any:
        from netbay.coe.graph import get_param, get_resource
        return get_resource("fixed_subnet") if self.new_network else get_param("fixed_subnet")


@dataclass
class Fragment:
    nodes: list[Node] = field(default_factory=list)
    params: list[tuple[Param, Any]] = field(default_factory=list)
    outputs: dict[str, Output] = field(default_factory=dict)
    sg_rules: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    node_metadata: dict[str, Any] = field(default_factory=dict)


FragmentFn = Callable[[Context], Fragment]


def ipv6_rules(rules: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """The IPv6 twins of IPv4 rules, for a dual-stack driver's nodes: Magnum's groups
    are IPv4 only (Heat's default ethertype), so without these the node ports drop
    unencapsulated IPv6 pod traffic (flannel host-gw, calico direct) at ingress."""
    return [{**r, "ethertype": "IPv6", **({"protocol": "ipv6-icmp"} if r.get("protocol") == "icmp" else {})}
            for r in rules]


def rule(protocol: str, low: int | None = None, high: int | None = None) -> dict[str, Any]:
    """An ingress rule as Heat's OS::Neutron::SecurityGroup takes it inline."""
    out: dict[str, Any] = {"protocol": protocol}
    if low is not None:
        out["port_range_min"] = low
        out["port_range_max"] = low if high is None else high
    return out
