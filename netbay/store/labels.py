"""Labels on any row (the spec's expand-labels-scope): string values, one list filter.

A cluster's labels (its template's merged with its own) travel to its nodes'
sandboxes, its pods and Docker containers; every list of them answers
``?labels=k=v`` (repeated, or ``k=v,k2=v2``: all must hold). Values are kept as
strings wherever labels are copied, as Docker keeps them, so one comparison works
on SQLite's and PostgreSQL's JSON alike.

Limits wherever labels enter (templates, clusters, pods, sandboxes): Magnum keeps
labels as JSON in a TEXT column (64 KiB); netbay says so up front with at most
:data:`MAX_LABELS` labels, keys of at most :data:`MAX_KEY` characters, values of
at most :data:`MAX_VALUE` characters and :data:`MAX_TOTAL` bytes of JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import and_
from sqlalchemy.sql.elements import ColumnElement

from netbay.errors import BadRequest

__all__ = ["strings", "pairs", "clause", "matches", "limit_problem", "MAX_LABELS", "MAX_KEY", "MAX_VALUE",
           "MAX_TOTAL"]

MAX_LABELS = 256
MAX_KEY = 255
MAX_VALUE = 4096
MAX_TOTAL = 65535


def limit_problem(labels: Mapping[str, Any]) -> str | None:
    """Why ``labels`` are too many or too large to keep, or None."""
    if len(labels) > MAX_LABELS:
        return f"{len(labels)} labels are more than the {MAX_LABELS} allowed"
    for key, value in labels.items():
        if len(str(key)) > MAX_KEY:
            return f"Label key {str(key)[:40]}… has {len(str(key))} characters, more than the {MAX_KEY} allowed"
        if len(str(value)) > MAX_VALUE:
            return (f"Label {key} has a value of {len(str(value))} characters, more than the "
                    f"{MAX_VALUE} allowed")
    size = len(json.dumps(dict(labels), default=str).encode())
    if size > MAX_TOTAL:
        return f"Labels take {size} bytes as JSON, more than the {MAX_TOTAL} allowed"
    return None


def strings(labels: Mapping[str, Any] | None) -> dict[str, str]:
    """``labels`` with string values (``True`` → ``"true"``, as Magnum's templates spell it)."""
    out = {}
    for key, value in (labels or {}).items():
        out[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def pairs(values: Iterable[str]) -> list[tuple[str, str]]:
    """``["a=1,b=2", "c=3"]`` → ``[("a", "1"), ("b", "2"), ("c", "3")]``; 400 on a bad one."""
    out = []
    for value in values:
        for item in value.split(","):
            key, sep, val = item.partition("=")
            if not sep or not key:
                raise BadRequest(f"Invalid input for labels. Reason: '{item}' is not KEY=VALUE.")
            out.append((key, val))
    return out


def clause(column: Any, values: Iterable[str]) -> ColumnElement[bool]:
    """Rows whose JSON ``column`` holds every ``k=v`` asked for."""
    return and_(*(column[key].as_string() == val for key, val in pairs(values)))


def matches(labels: Mapping[str, Any] | None, values: Iterable[str]) -> bool:
    """The same test in Python (for lists filtered after the query)."""
    have = strings(labels)
    return all(have.get(key) == val for key, val in pairs(values))
