"""Kubernetes label selectors (``matchLabels`` AND ``matchExpressions``).

A lightkube ``LabelSelector`` becomes a :class:`Selector`: hashable and order-free,
so equal selectors in different policies share one peer group. ``None`` selects
nothing and ``{}`` everything, as the API defines it; an unknown operator is refused
rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class Selector:
    labels: tuple[tuple[str, str], ...] = ()
    exprs: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, selector: Any) -> Selector | None:
        """From a lightkube ``LabelSelector`` (None stays None)."""
        if selector is None:
            return None
        exprs = []
        for r in selector.matchExpressions or []:
            if r.operator not in OPERATORS:
                raise ValueError(f"unknown label selector operator {r.operator!r} (expected one of {OPERATORS})")
            exprs.append((r.key, r.operator, tuple(sorted(r.values or ()))))
        return cls(tuple(sorted((selector.matchLabels or {}).items())), tuple(sorted(exprs)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.labels:
            if labels.get(key) != value:
                return False
        for key, op, values in self.exprs:
            if op == "In":
                ok = key in labels and labels[key] in values
            elif op == "NotIn":
                ok = key not in labels or labels[key] not in values
            elif op == "Exists":
                ok = key in labels
            else:  # DoesNotExist
                ok = key not in labels
            if not ok:
                return False
        return True

    def json(self) -> list:
        return [list(map(list, self.labels)), [[k, op, list(v)] for k, op, v in self.exprs]]


EVERYTHING = Selector()


def matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """Whether a lightkube ``LabelSelector`` (or None) selects ``labels``."""
    sel = Selector.of(selector)
    return sel is not None and sel.matches(labels)


__all__ = ["EVERYTHING", "OPERATORS", "Selector", "matches"]
