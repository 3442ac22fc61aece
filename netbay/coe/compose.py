"""Composition: a cluster's one resource graph from the base, COE and driver fragments.

``compose`` takes Magnum's template and cluster fields as plain dicts, so the
conductor, the template export and the tests all call it the same way. The
network driver's fragment is an argument: the top-level composition knows only
generic parameters and labels, and everything a driver needs is in its fragment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netbay.coe.fragments import COES, NETWORK_DRIVERS, base
from netbay.coe.fragments.types import Context, Fragment, FragmentFn
from netbay.coe.graph import Graph, GraphError


def labels_of(template: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, str]:
    """Cluster labels replace the template's (Magnum before Ussuri), as strings."""
    labels = cluster.get("labels") or template.get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def compose(template: Mapping[str, Any], cluster: Mapping[str, Any],
            network_driver_fragment: FragmentFn) -> Graph:
    coe = COES.get(str(template.get("coe")))
    if coe is None:
        raise GraphError(f"no cluster fragments for COE {template.get('coe')!r}")
    ctx = Context(template, cluster, labels_of(template, cluster), coe)
    parts: list[Fragment] = [base.fragment(ctx), coe.nodes(ctx), network_driver_fragment(ctx)]
    name = cluster.get("name") or "cluster"
    graph = Graph(description=f"netbay cluster {name}: {coe.name}, "
                              f"network driver {template.get('network_driver') or 'none'}")
    for part in parts:
        for param, value in part.params:
            graph.param(param, value)
        for node in part.nodes:
            graph.add(node)
        graph.outputs.update(part.outputs)
    for part in parts:
        for sg, rules in part.sg_rules.items():
            target = graph.nodes.get(sg)
            if target is None or target.type != "OS::Neutron::SecurityGroup":
                raise GraphError(f"a fragment adds rules to {sg}, which is no security group of this cluster")
            target.properties["rules"] = [*target.properties.get("rules", []), *rules]
        for node in graph.nodes.values():
            if node.type == "OS::Nova::Server" and part.node_metadata:
                node.properties["metadata"] = {**node.properties.get("metadata", {}), **part.node_metadata}
    graph.check()
    return graph


def driver_fragment(name: str | None) -> FragmentFn:
    fragment = NETWORK_DRIVERS.get(name or "")
    if fragment is None:
        raise GraphError(f"no fragment for network driver {name!r}")
    return fragment


def build(template: Mapping[str, Any], cluster: Mapping[str, Any]) -> Graph:
    """The graph with the driver the template names (the API stored the COE default)."""
    driver = template.get("network_driver") or ("flannel" if template.get("coe") == "kubernetes" else "docker")
    return compose(template, cluster, driver_fragment(driver))
