"""Heat's intrinsic functions over made resources: ``get_param``, ``get_resource``,
``get_attr`` and ``str_replace``, as the executor resolves a resource's properties
and the stack's outputs (``made(name)`` gives a made resource's physical id and
attributes, or raises ``LookupError``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from netbay.coe.graph import Graph


class Made(Protocol):
    physical_id: str | None
    attributes: dict[str, Any]


def resolve(graph: Graph, value: Any, made: Callable[[str], Made]) -> Any:
    """``value`` with every intrinsic replaced by what it names."""
    if isinstance(value, Mapping):
        if len(value) == 1:
            (key, arg), = value.items()
            if key == "get_param":
                return graph.value(arg)
            if key == "get_resource":
                return made(arg).physical_id
            if key == "get_attr":
                out: Any = made(arg[0]).attributes
                for step in arg[1:]:
                    step = resolve(graph, step, made)
                    out = out[int(step)] if isinstance(out, list) else out[step]
                return out
            if key == "str_replace":
                text = str(resolve(graph, arg["template"], made))
                for k, v in resolve(graph, arg.get("params") or {}, made).items():
                    text = text.replace(k, str(v))
                return text
        return {k: resolve(graph, v, made) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(graph, v, made) for v in value]
    return value


def outputs(graph: Graph, made: Callable[[str], Made]) -> dict[str, Any]:
    """The stack's outputs; one whose resource is missing is None (as Heat shows it)."""
    values: dict[str, Any] = {}
    for key, out in graph.outputs.items():
        try:
            values[key] = resolve(graph, out.value, made)
        except (LookupError, KeyError, IndexError, TypeError):
            values[key] = None
    return values
