"""Fixtures for the dataplane tests: real namespaces, real packets, nothing left behind.

Every namespace a test makes is named ``nbt<6 hex>-…`` (one prefix per run) and is
deleted by the fixture that made it, and again by a final sweep over the prefix,
also when a test fails. Traffic flows only between those namespaces, on 10.x
addresses assigned inside them. A guard snapshots the host's (root)
namespace — links, addresses, routes, nftables tables — before the first test here and
fails (as an error in the last test's teardown) if it differs after the last one.

Needs root (CAP_SYS_ADMIN for namespaces and mounts, CAP_NET_ADMIN, CAP_NET_RAW for
the in-process ping); skipped otherwise.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator

import pytest

from .dp_helpers import PREFIX, _run, diff_snapshots, root_snapshot, sweep


def _root_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "dataplane tests need root (network namespaces, mounts, raw sockets)"
    if not os.path.exists("/proc/self/ns/net"):
        return "no network namespace support (/proc/self/ns/net missing)"
    return None


_SKIP = _root_skip_reason()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    if _SKIP is None:
        return
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.skip(reason=_SKIP))


@pytest.fixture(scope="package", autouse=True)
def host_untouched() -> Iterator[dict[str, set[str]]]:
    """Fail if, over the dataplane tests, the root namespace changed or a namespace was
    left over (package scope: checked right after the last test of this directory)."""
    if _SKIP is not None:
        yield {}
        return
    before = root_snapshot()
    try:
        yield before
    finally:
        leftovers = sweep()
        after = root_snapshot()
        from netbay.dataplane import netns

        from netbay.dataplane import features

        remaining = set(netns.list(PREFIX))
        if netns.exists(features.probe_namespace()):
            remaining.add(features.probe_namespace())
        if os.path.isdir(netns.NETNS_RUN_DIR):  # also unmounted leftovers
            remaining |= {n for n in os.listdir(netns.NETNS_RUN_DIR) if n.startswith(PREFIX)}
        ip_list = [ln for ln in _run("ip", "netns", "list").splitlines()
                   if ln.startswith(PREFIX)]
        bad, foreign = diff_snapshots(before, after)
        if foreign:
            warnings.warn("root namespace changed by other software during the run "
                          "(not by these tests):\n  " + "\n  ".join(foreign), stacklevel=1)
        problems = []
        if leftovers:
            problems.append(f"tests left namespaces behind (swept now): {leftovers}")
        if remaining or ip_list:
            problems.append(f"namespaces still present: {sorted(remaining | set(ip_list))}")
        if bad:
            problems.append("root namespace changed:\n  " + "\n  ".join(bad))
        assert not problems, "\n".join(problems)


# --- namespaces ----------------------------------------------------------------------


@pytest.fixture
def make_ns() -> Iterator[Callable[[str], str]]:
    """``make_ns("a")`` creates namespace ``<PREFIX>a`` and deletes it after the test."""
    from netbay.dataplane import netns

    made: list[str] = []

    def make(suffix: str) -> str:
        name = PREFIX + suffix
        netns.create(name)
        made.append(name)
        return name

    yield make
    for name in reversed(made):
        netns.delete(name)


# --- the module's cloud ----------------------------------------------------------------


@pytest.fixture(scope="module")
def cloud(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """``netbay up`` and an in-process agent for one module, on namespace prefix
    ``<PREFIX><CLOUD_TAG>-`` (the module's ``CLOUD_TAG``). A module with
    ``CLOUD_K8S = True`` gets :func:`k8s_fixtures.k8s_cloud` (also sweeps what the
    Kubernetes mapping leaves on the host). Modules that need more (a dockerd first,
    environment variables) define their own ``cloud``."""
    tag = getattr(request.module, "CLOUD_TAG", None)
    assert tag, f"{request.module.__name__} uses the shared `cloud` fixture: set CLOUD_TAG"
    if getattr(request.module, "CLOUD_K8S", False):
        from .k8s_fixtures import k8s_cloud as start
    else:
        from .agent_fixtures import make_cloud as start
    yield from start(tmp_path_factory.mktemp(f"cloud-{tag}"), tag)
