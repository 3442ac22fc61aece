"""Labels: parsed from the CLI exactly as python-magnumclient parses them, and
checked against the driver registry at the API.

CLI (``magnumclient.common.utils.format_labels``): ``--labels`` may be repeated;
a single value holding more than one ``=`` is split on ``,`` and ``;``; each
pair splits on its first ``=``; a repeated key joins its values with ``,``; all
values stay strings.

API (beyond Magnum, which only fails later in Heat): a label the template's
driver (or every cluster) reads is checked against its schema, a bad value is
a 400 naming the label and what it accepts; any other label is kept as given
and reported back as ignored (``labels_ignored``). A read label given as a
string is stored as the check reads it (surrounding whitespace dropped, a CIDR
in its canonical form), so the agent, the HOT export and a later cluster
create all read the value the API accepted — never ``" vxlan"``.

Their count and size limits are every row's labels' (:mod:`netbay.store.labels`).
"""

from __future__ import annotations

import ast
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from netbay.drivers import registry
from netbay.errors import BadRequest


class LabelSyntaxError(ValueError):
    """The CLI's ``labels must be a list of KEY=VALUE not …`` (magnumclient's CommandError)."""


def format_labels(values: Iterable[str] | None, parse_comma: bool = True) -> dict[str, str]:
    """``["a=1,b=2"]`` → ``{"a": "1", "b": "2"}``, as magnumclient does it."""
    items = list(values or [])
    if not items:
        return {}
    if parse_comma and len(items) == 1 and items[0].count("=") > 1:
        items = items[0].replace(";", ",").split(",")
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise LabelSyntaxError(f"labels must be a list of KEY=VALUE not {item}")
        if key in labels:
            labels[key] += f",{value}"
        else:
            labels[key] = value
    return labels


def from_patch_value(value: Any) -> Any:
    """A ``/labels`` patch value: a dict, or its Python ``str()`` (what magnumclient sends).

    Magnum ``ast.literal_eval``s the string and reports the exception as is
    (``malformed node or string: <ast.BinOp object at 0x…>``); the reason here
    names the part of the value that is not a literal instead."""
    if isinstance(value, dict):
        return value
    shown = _shown(value)
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value)
        except SyntaxError as exc:
            raise ValueError(f"labels {shown} are not a dictionary: invalid syntax at "
                             f"character {exc.offset or 0}") from None
        except ValueError:
            raise ValueError(f"labels {shown} are not a dictionary of literals: "
                             f"{_not_literal(value)}") from None
        except TypeError as exc:   # e.g. a dict inside a set
            raise ValueError(f"labels {shown} are not a dictionary of literals: {exc}") from None
        except (MemoryError, RecursionError):
            raise ValueError(f"labels {shown} are not a dictionary: too deeply nested") from None
        if isinstance(parsed, dict):
            return parsed
    raise ValueError(f"labels {shown} are not a dictionary")


def _shown(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut short: a refused value is not echoed back whole."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _segment(text: str, node: ast.AST) -> str | None:
    """``ast.get_source_segment`` without its character-by-character line split, which
    is quadratic in a line's length: 14 s of a server's CPU for one 900 KB label value."""
    start, col = getattr(node, "lineno", None), getattr(node, "col_offset", None)
    end, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if start is None or col is None or end is None or end_col is None:
        return None
    lines = re.split(r"\r\n|\r|\n", text)   # the parser's line breaks (not str.splitlines')
    if start == end:
        return lines[start - 1].encode()[col:end_col].decode(errors="replace")
    first = lines[start - 1].encode()[col:].decode(errors="replace")
    last = lines[end - 1].encode()[:end_col].decode(errors="replace")
    return "\n".join([first, *lines[start:end - 1], last])


_LITERALS = (ast.Constant, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.Expression)


def _not_literal(text: str) -> str:
    """What in ``text`` ``literal_eval`` refused: ``1+2 is an expression (BinOp), not a
    string, number or boolean``."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return "it cannot be parsed"
    for node in ast.walk(tree):
        if isinstance(node, _LITERALS) or (isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)):
            continue
        if isinstance(node, (ast.USub, ast.UAdd, ast.Load)):
            continue
        segment = _segment(text.strip(), node) or type(node).__name__
        segment = segment if len(segment) <= 200 else f"{segment[:200]}…"
        kind = "a name" if isinstance(node, ast.Name) else f"an expression ({type(node).__name__})"
        return f"{segment} is {kind}, not a quoted string, number or boolean"
    return "it holds something other than strings, numbers and booleans"


@dataclass(frozen=True)
class Checked:
    """Labels after the check: the read ones as the driver reads them (a string given is
    stored normalized), the others as given; which the driver will ignore; and the
    driver's typed config made from them (None: the driver has none) — the one parse,
    which a cluster stores (``driver_config``)."""

    labels: dict[str, Any]
    ignored: list[str]
    config: Any = None


def check(labels: Mapping[str, Any], driver_name: str | None) -> Checked:
    """Validate the labels ``driver_name``'s clusters read; 400 on the first bad one."""
    driver = registry.get(driver_name)
    specs = registry.known_labels(driver)
    normalized: dict[str, str] = {}
    try:
        for key, value in labels.items():   # in the order given: the first bad one is named
            spec = specs.get(key)
            if spec is not None:
                normalized[key] = spec.check(value)
        effective = driver.checked(normalized) if driver is not None else {}
    except registry.LabelError as exc:
        raise BadRequest(str(exc)) from None
    if driver is not None:
        from netbay.coe.hostcheck import refusal

        problem = refusal(driver, effective)
        if problem:
            raise BadRequest(problem)
    kept = {key: normalized[key] if key in normalized and isinstance(value, str) else value
            for key, value in labels.items()}
    config = driver.config.from_values(effective) if driver is not None and driver.config is not None else None
    return Checked(kept, ignored(labels, driver_name), config)


def ignored(labels: Mapping[str, Any], driver_name: str | None) -> list[str]:
    """The keys no part of a cluster with ``driver_name`` reads, sorted."""
    specs = registry.known_labels(registry.get(driver_name))
    return sorted(k for k in labels if k not in specs)


def routing_problem(labels: Mapping[str, Any], driver_name: str | None, fixed_cidr: str | None,
                    external: Iterable[str]) -> str | None:
    """Why the driver's pod and service ranges in ``labels`` (as :func:`check` returned
    them) cannot be routed next to the cluster's private subnet ``fixed_cidr`` and the
    external network's subnets ``external``, or None.

    The external network: no overlap at all (nodes route and masquerade the whole
    range, so addresses toward the outside inside it would stay in the pod network).
    The private subnet: no overlap with the subnets the driver hands nodes (a lease
    or block on node addresses). Flannel keeps its first subnet free, which is why
    the spec's ``flannel_network_cidr=10.0.0.0/8`` beside ``10.0.0.0/24`` works."""
    from netbay.coe.clusternet import lease_config

    driver = registry.get(driver_name)
    if driver is None:
        return None
    effective = driver.effective({k: str(v) for k, v in labels.items()})
    try:
        leases = lease_config(driver_name, registry.config(driver_name, effective))
    except ValueError:
        leases = None
    fixed = ipaddress.ip_network(fixed_cidr, strict=False) if fixed_cidr else None
    outside = [ipaddress.ip_network(c, strict=False) for c in external]
    for spec in driver.labels:
        if spec.type not in ("cidr", "cidr6") or not effective[spec.key]:
            continue
        net = ipaddress.ip_network(str(effective[spec.key]))
        for sub in outside:
            if sub.version == net.version and net.overlaps(sub):
                return (f"Label {spec.key}={net} overlaps the external network's subnet {sub}: traffic from "
                        f"pods toward {sub} would stay in the pod network. Choose a range that does not "
                        f"overlap {sub}.")
        if fixed is None or fixed.version != 4 or net.version != 4 or not net.overlaps(fixed):
            continue
        low, high = int(net.network_address), int(net.broadcast_address)
        if leases is not None and leases.network == str(net):
            cfg = leases
            low = int(ipaddress.ip_network(cfg.first).network_address)
            high = int(ipaddress.ip_network(cfg.last).broadcast_address)
        if low <= int(fixed.broadcast_address) and int(fixed.network_address) <= high:
            hint = ""
            if leases is not None and leases.network == str(net) and leases.subnet_min is None:
                hint = (f", or one whose first /{leases.subnet_len} (kept free, never a node's) holds "
                        f"{fixed}")
            return (f"Label {spec.key}={net} overlaps the cluster's private subnet {fixed}: the "
                    f"{driver.name} driver would give pods addresses the nodes use. Choose a range "
                    f"outside {fixed}{hint}.")
    return None
