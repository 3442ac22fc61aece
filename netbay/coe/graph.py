"""A cluster's resource graph: Heat resources whose dependencies come from intrinsics.

The graph is the one description of a cluster's infrastructure. It renders to a
HOT template for a real Heat (:mod:`netbay.coe.hot`) and the embedded executor
(:mod:`netbay.coe.executor`) applies it itself, so both orchestrators build the
same thing. Properties hold plain values and the HOT intrinsics ``get_resource``,
``get_attr``, ``get_param`` and ``str_replace``; edges are derived from them (plus
explicit ``depends_on``) exactly as Heat derives them, so no fragment can forget
to declare an ordering.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

RESOURCE_TYPES = frozenset({
    "OS::Neutron::Net", "OS::Neutron::Subnet", "OS::Neutron::SubnetPool", "OS::Neutron::Router",
    "OS::Neutron::RouterInterface",
    "OS::Neutron::SecurityGroup", "OS::Neutron::Port", "OS::Neutron::FloatingIP",
    "OS::Octavia::LoadBalancer", "OS::Octavia::Listener", "OS::Octavia::Pool",
    "OS::Octavia::HealthMonitor", "OS::Octavia::PoolMember", "OS::Nova::Server", "OS::Heat::Value",
})
PARAM_TYPES = frozenset({"string", "number", "json", "comma_delimited_list", "boolean"})


class GraphError(ValueError):
    """A graph that cannot be built: a dangling reference, a duplicate, a cycle."""


def get_resource(name: str) -> dict[str, Any]:
    return {"get_resource": name}


def get_attr(name: str, *path: Any) -> dict[str, Any]:
    return {"get_attr": [name, *path]}


def get_param(name: str) -> dict[str, Any]:
    return {"get_param": name}


def intrinsics(value: Any) -> Iterator[tuple[str, Any]]:
    """Every ``(function, argument)`` pair inside ``value``, depth first."""
    if isinstance(value, Mapping):
        if len(value) == 1:
            (key, arg), = value.items()
            if key in {"get_resource", "get_attr", "get_param"}:
                yield key, arg
                if key == "get_attr":  # a path element may itself be an intrinsic
                    yield from intrinsics(list(arg)[1:])
                return
        for item in value.values():
            yield from intrinsics(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from intrinsics(item)


def referenced(value: Any) -> tuple[set[str], set[str]]:
    """The resources and the parameters ``value`` refers to."""
    resources: set[str] = set()
    params: set[str] = set()
    for fn, arg in intrinsics(value):
        if fn == "get_param":
            params.add(arg if isinstance(arg, str) else arg[0])
        elif fn == "get_resource":
            resources.add(arg)
        else:
            resources.add(arg[0])
    return resources, params


@dataclass
class Node:
    """One resource: a Heat type, its properties, and explicit extra dependencies."""

    name: str
    type: str
    properties: dict[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()

    def requires(self) -> set[str]:
        """The resources that must exist first: referenced ones and ``depends_on``."""
        return referenced(self.properties)[0] | set(self.depends_on)


@dataclass
class Param:
    """A template parameter: HOT type, default, description, allowed values."""

    name: str
    type: str = "string"
    default: Any = None
    description: str = ""
    allowed: tuple[Any, ...] = ()


@dataclass
class Output:
    value: Any
    description: str = ""


@dataclass
class Graph:
    """Resources, parameters (with the values this cluster gives them) and outputs."""

    description: str = ""
    nodes: dict[str, Node] = field(default_factory=dict)
    params: dict[str, Param] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Output] = field(default_factory=dict)

    def add(self, node: Node) -> Node:
        if node.name in self.nodes:
            raise GraphError(f"duplicate resource {node.name}")
        if node.type not in RESOURCE_TYPES:
            raise GraphError(f"resource {node.name}: unknown type {node.type}")
        self.nodes[node.name] = node
        return node

    def param(self, param: Param, value: Any = None) -> None:
        """Declare a parameter (the same declaration twice is fine) and its value."""
        if param.type not in PARAM_TYPES:
            raise GraphError(f"parameter {param.name}: unknown type {param.type}")
        known = self.params.get(param.name)
        if known is not None and known != param:
            raise GraphError(f"parameter {param.name} declared twice, differently")
        self.params[param.name] = param
        if value is not None:
            self.values[param.name] = value

    def value(self, name: str) -> Any:
        return self.values.get(name, self.params[name].default)

    # -- checks and orderings --------------------------------------------------------------

    def check(self) -> None:
        """Every intrinsic names an existing resource or parameter; no cycle."""
        for node in self.nodes.values():
            self._check_refs(f"resource {node.name}", node.properties, node.depends_on)
        for name, out in self.outputs.items():
            self._check_refs(f"output {name}", out.value, ())
        for param in self.params.values():
            value = self.value(param.name)
            if param.allowed and value not in param.allowed:
                raise GraphError(f"parameter {param.name}={value!r} is not one of {list(param.allowed)}")
        self.waves()

    def _check_refs(self, where: str, value: Any, depends_on: tuple[str, ...]) -> None:
        resources, params = referenced(value)
        missing = sorted((resources | set(depends_on)) - set(self.nodes))
        if missing:
            raise GraphError(f"{where} refers to unknown resource(s) {', '.join(missing)}")
        missing = sorted(params - set(self.params))
        if missing:
            raise GraphError(f"{where} refers to unknown parameter(s) {', '.join(missing)}")

    def waves(self) -> list[list[str]]:
        """Kahn's layers: each wave depends only on earlier ones, so a wave may run in
        parallel. A cycle raises ``GraphError`` naming the resources caught in it."""
        needs = {name: node.requires() & set(self.nodes) for name, node in self.nodes.items()}
        done: set[str] = set()
        waves: list[list[str]] = []
        while len(done) < len(needs):
            wave = sorted(n for n, reqs in needs.items() if n not in done and reqs <= done)
            if not wave:
                stuck = sorted(set(needs) - done)
                raise GraphError(f"dependency cycle among {', '.join(stuck)}")
            waves.append(wave)
            done.update(wave)
        return waves

    def order(self) -> list[str]:
        return [name for wave in self.waves() for name in wave]

    def dependents(self) -> dict[str, set[str]]:
        """name → the resources that require it (the edges reversed, for deletes)."""
        out: dict[str, set[str]] = {name: set() for name in self.nodes}
        for name, node in self.nodes.items():
            for req in node.requires():
                out.setdefault(req, set()).add(name)
        return out

    # -- persistence ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "nodes": [{"name": n.name, "type": n.type, "properties": n.properties,
                       "depends_on": list(n.depends_on)} for n in self.nodes.values()],
            "params": [{"name": p.name, "type": p.type, "default": p.default,
                        "description": p.description, "allowed": list(p.allowed)}
                       for p in self.params.values()],
            "values": self.values,
            "outputs": {k: {"value": o.value, "description": o.description} for k, o in self.outputs.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Graph:
        graph = cls(description=data.get("description", ""), values=dict(data.get("values") or {}))
        for p in data.get("params") or ():
            graph.params[p["name"]] = Param(p["name"], p["type"], p.get("default"), p.get("description", ""),
                                            tuple(p.get("allowed") or ()))
        for n in data.get("nodes") or ():
            graph.nodes[n["name"]] = Node(n["name"], n["type"], n.get("properties") or {},
                                          tuple(n.get("depends_on") or ()))
        for k, o in (data.get("outputs") or {}).items():
            graph.outputs[k] = Output(o["value"], o.get("description", ""))
        return graph
