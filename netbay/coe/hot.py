"""Rendering a resource graph as a Heat (HOT) template and its parameter values.

The result is what ``openstack stack create -t template.yaml`` takes with the
values as ``--parameter``s (or an environment file), so a cluster the embedded
executor builds can be handed to a real Heat unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from netbay.coe.graph import Graph

HOT_VERSION = "2018-08-31"  # Rocky: has OS::Octavia::*, OS::Heat::Value


def to_hot(graph: Graph) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(template, parameters)``: the HOT document and this cluster's parameter values."""
    graph.check()
    params: dict[str, Any] = {}
    for p in graph.params.values():
        entry: dict[str, Any] = {"type": p.type}
        if p.description:
            entry["description"] = p.description
        if p.default is not None:
            entry["default"] = p.default
        if p.allowed:
            entry["constraints"] = [{"allowed_values": list(p.allowed)}]
        params[p.name] = entry
    resources: dict[str, Any] = {}
    for name in graph.order():
        node = graph.nodes[name]
        entry = {"type": node.type}
        if node.properties:
            entry["properties"] = node.properties
        if node.depends_on:
            entry["depends_on"] = list(node.depends_on)
        resources[name] = entry
    template = {
        "heat_template_version": HOT_VERSION,
        "description": graph.description,
        "parameters": params,
        "resources": resources,
        "outputs": {k: {"description": o.description, "value": o.value} for k, o in graph.outputs.items()},
    }
    values = {k: v for k, v in graph.values.items() if k in graph.params}
    # A deep, JSON-clean copy: no object shared between resources (YAML would alias it).
    return json.loads(json.dumps(template)), json.loads(json.dumps(values))


def to_yaml(graph: Graph) -> tuple[str, str]:
    """The template and an environment file (``parameters:``) as YAML text."""
    import yaml  # PyYAML: a dependency of openstacksdk

    template, values = to_hot(graph)
    dump = lambda doc: yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)  # noqa: E731
    return dump(template), dump({"parameters": values})
