"""Labels: parsed from the CLI exactly as python-magnumclient parses them, and
checked against the driver registry at the API.

CLI (``magnumclient.common.utils.format_labels``): ``--labels`` may be repeated;
a single value holding more than one ``=`` is split on ``,`` and ``;``; each
pair splits on its first ``=``; a repeated key joins its values with ``,``; all
values stay strings.

API (beyond Magnum, which only fails later in Heat): a label the template's
driver (or every cluster) reads is checked against its schema, a bad value is
a 400 naming the label and what it accepts; any other label is kept as given
and reported back as ignored (``labels_ignored``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from netbay.coe import drivers
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
    """A ``/labels`` patch value: a dict, or its Python ``str()`` (what magnumclient sends)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value)
        except (SyntaxError, ValueError, MemoryError, RecursionError, TypeError) as exc:
            raise ValueError(f"labels {value!r} are not a dictionary: {exc}") from None
        if isinstance(parsed, dict):
            return parsed
    raise ValueError(f"labels {value!r} are not a dictionary")


@dataclass(frozen=True)
class Checked:
    """Labels after the check: every one kept as given; which the driver will ignore."""

    labels: dict[str, Any]
    ignored: list[str]


def check(labels: Mapping[str, Any], driver_name: str | None) -> Checked:
    """Validate the labels ``driver_name``'s clusters read; 400 on the first bad one."""
    driver = drivers.DRIVERS.get(driver_name or "")
    specs = drivers.known_labels(driver)
    normalized: dict[str, str] = {}
    for key, value in labels.items():
        spec = specs.get(key)
        if spec is None:
            continue
        try:
            normalized[key] = spec.check(value)
        except drivers.LabelError as exc:
            raise BadRequest(str(exc)) from None
    if driver is not None:
        effective = driver.effective(normalized)
        for rule in driver.checks:
            problem = rule(effective)
            if problem:
                raise BadRequest(problem)
        from netbay.coe.hostcheck import refusal

        problem = refusal(driver, effective)
        if problem:
            raise BadRequest(problem)
    return Checked(dict(labels), ignored(labels, driver_name))


def ignored(labels: Mapping[str, Any], driver_name: str | None) -> list[str]:
    """The keys no part of a cluster with ``driver_name`` reads, sorted."""
    specs = drivers.known_labels(drivers.DRIVERS.get(driver_name or ""))
    return sorted(k for k in labels if k not in specs)
