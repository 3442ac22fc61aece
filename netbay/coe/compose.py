"""Composition: a cluster's one resource graph from the base, COE and driver fragments.

``compose`` takes Magnum's template and cluster fields as plain dicts, so the
conductor, the template export and the tests all call it the same way. The
network driver's fragment is an argument: the top-level composition knows only
generic parameters and labels, and everything a driver needs is in its fragment.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from netbay.coe.fragments import COES, NETWORK_DRIVERS, base
from netbay.coe.fragments.types import Context, Fragment, FragmentFn
from netbay.coe.graph import Graph, GraphError, Param
from netbay.drivers import registry


def given_labels(template: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, Any]:
    """Cluster labels replace the template's (Magnum before Ussuri), as given."""
    return dict(cluster.get("labels") or template.get("labels") or {})


def labels_of(template: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, str]:
    """:func:`given_labels` as strings."""
    return {str(k): str(v) for k, v in given_labels(template, cluster).items()}


def compose(template: Mapping[str, Any], cluster: Mapping[str, Any],
            network_driver_fragment: FragmentFn) -> Graph:
    coe = COES.get(str(template.get("coe")))
    if coe is None:
        raise GraphError(f"no cluster fragments for COE {template.get('coe')!r}")
    ctx = Context(template, cluster, labels_of(template, cluster), coe, given_labels(template, cluster))
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
    """The driver's own fragment, else (a registered driver without one) its labels as
    stack parameters and nothing more: a driver needs no fragment to build clusters."""
    fragment = NETWORK_DRIVERS.get(name or "")
    if fragment is not None:
        return fragment
    spec = registry.get(name)
    if spec is None:
        raise GraphError(f"no fragment for network driver {name!r}")
    return functools.partial(declared_fragment, spec)


def declared_fragment(spec: registry.DriverSpec, ctx: Context) -> Fragment:
    labels = ctx.driver_labels(spec)
    out = Fragment()
    out.params = [(Param(s.key, "string", s.default, s.help, s.allowed), labels[s.key]) for s in spec.labels]
    return out


def build(template: Mapping[str, Any], cluster: Mapping[str, Any]) -> Graph:
    """The graph with the driver the template names (the API stored the COE default)."""
    driver = template.get("network_driver") or registry.default_driver(template.get("coe"))
    return compose(template, cluster, driver_fragment(driver))
