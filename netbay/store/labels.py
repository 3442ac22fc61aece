"""Labels on any row (the spec's expand-labels-scope): string values, one list filter.

A cluster's labels (its template's merged with its own) travel to its nodes'
sandboxes, its pods and Docker containers; every list of them answers
``?labels=k=v`` (repeated, or ``k=v,k2=v2``: all must hold). Values are kept as
strings wherever labels are copied, as Docker keeps them, so one comparison works
on SQLite's and PostgreSQL's JSON alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import and_
from sqlalchemy.sql.elements import ColumnElement

from netbay.errors import BadRequest

__all__ = ["strings", "pairs", "clause", "matches"]


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
