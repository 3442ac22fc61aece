"""After-the-fact checks of the OVN lab tests: nothing of a lab outlives it, the root
namespace is as it was."""

from __future__ import annotations

import warnings

from netbay.dataplane import netns
from tests.dataplane.dp_helpers import diff_snapshots, root_snapshot

from .lab import OvnLab


def check_root_unchanged(before: dict[str, set[str]]) -> None:
    """Fail if the root namespace differs from ``before`` (other software's changes
    on a shared host are only reported)."""
    bad, foreign = diff_snapshots(before, root_snapshot())
    if foreign:
        warnings.warn("root namespace changed by other software during the run:\n  "
                      + "\n  ".join(foreign), stacklevel=1)
    assert not bad, "root namespace changed:\n  " + "\n  ".join(bad)


def stop_lab(lab: OvnLab) -> None:
    """Stop ``lab``; fail if any daemon of it outlived that or a namespace is left."""
    problems = lab.stop()
    problems += [f"namespace left: {n}" for n in lab.namespaces if netns.exists(n)]
    if lab.dir.exists():
        problems.append(f"temp dir left: {lab.dir}")
    assert not problems, "\n".join(problems)
