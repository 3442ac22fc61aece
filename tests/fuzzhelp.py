"""The schema fuzzer behind ``tests/test_fuzz*.py``: every operation of the server's
``/openapi.json``, fed schema-valid and schema-violating requests, must never answer 5xx.

The operations are dealt out over ``PARTS`` test modules (``test_fuzz.py`` holds part 0,
``test_fuzz_part1.py`` and ``test_fuzz_part2.py`` the others), each with its own server
and seeds, so pytest-xdist's ``--dist loadfile`` runs them on different workers: in one
module they took 7-10 minutes on one worker, the suite's critical path. Knobs:
NETBAY_FUZZ_EXAMPLES (per operation and mode, default 10), NETBAY_FUZZ_BUDGET (seconds
of each part before its remaining operations drop to 3 examples),
NETBAY_FUZZ_TIMING=1 (print each operation's time, with ``-s``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from conftest import Server, unique
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup

EXAMPLES = int(os.environ.get("NETBAY_FUZZ_EXAMPLES", "10"))  # per operation and per mode
# Past this many seconds (a loaded machine), every remaining operation still runs, with fewer examples.
BUDGET_S = float(os.environ.get("NETBAY_FUZZ_BUDGET", "150"))
EXAMPLES_LATE = 3
PARTS = 3  # modules the operations are dealt out to
# Operations with nothing to negate (no parameters or body schemathesis can break): known
# after Hypothesis has given up on them, ~460 draws and 3-4 s each, most of the fuzzing's
# time. Generation is derandomized, so the same schema with the same schemathesis and
# Hypothesis gives up on the same operations: they are remembered per operation (its part
# of the schema), in the repository and on disk (the next run), and skipped (Unsatisfiables).
UNSATISFIABLE_CACHE = Path(os.environ.get("NETBAY_FUZZ_CACHE", Path.home() / ".cache" / "netbay" / "fuzz"))
SEED = Path(__file__).with_name("fuzz_unsatisfiable.json")   # in the repository: what CI starts from
SETTINGS = dict(deadline=None, database=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def token(server: Server) -> str:
    return server.token()


@pytest.fixture(scope="module")
def seeds(server: Server, token: str) -> dict[str, list[str]]:
    """One of each resource, so fuzzed path ids can name something real."""
    c = server.http(token)

    def made(path: str, body: dict[str, Any], key: str) -> str:
        r = c.post(path, json=body)
        assert r.status_code == 201, (path, r.text)
        return r.json()[key]["id"]

    public = c.get("/networks", params={"name": "public"}).json()["networks"][0]["id"]
    net = made("/networks", {"network": {"name": unique("fz")}}, "network")
    subnet = made("/subnets", {"subnet": {"network_id": net, "cidr": "10.77.0.0/24", "ip_version": 4}}, "subnet")
    port = made("/ports", {"port": {"network_id": net}}, "port")
    router = made("/routers", {"router": {"name": unique("fz")}}, "router")
    sg = made("/security-groups", {"security_group": {"name": unique("fz")}}, "security_group")
    rule = made("/security-group-rules", {"security_group_rule": {
        "security_group_id": sg, "direction": "ingress", "protocol": "tcp", "ethertype": "IPv4",
        "port_range_min": 22, "port_range_max": 22}}, "security_group_rule")
    fip = made("/floatingips", {"floatingip": {"floating_network_id": public}}, "floatingip")
    pool = made("/subnetpools", {"subnetpool": {"name": unique("fz"), "prefixes": ["10.200.0.0/16"],
                                                "default_prefixlen": 24}}, "subnetpool")
    return {"networks": [net], "subnets": [subnet], "ports": [port], "routers": [router],
            "security-groups": [sg], "security-group-rules": [rule], "floatingips": [fip],
            "subnetpools": [pool]}


def _collection(path: str) -> str | None:
    parts = path.split("/")
    return parts[3] if len(parts) > 3 and parts[1:3] == ["network", "v2.0"] else None


def _describe(case: Any, response: Any | None, error: Exception | None) -> str:
    what = f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}"
    if response is not None:
        return f"{what} -> {response.status_code} {response.text[:300]}"
    return f"{what} -> {type(error).__name__}: {str(error)[:300]}"


def server_tracebacks(server: Server, limit: int = 8000) -> str:
    log = (server.data_dir / "server.log").read_text(errors="replace")
    start = log.find("Traceback")
    return log[start:][-limit:] if start >= 0 else "(no traceback in server.log)"


def _without_operation_ids(schema: Any) -> Any:
    """The schema less FastAPI's ``operationId``s, which name a GET+HEAD route after
    whichever method a set yields first (a server's hash seed): they generate nothing."""
    if isinstance(schema, dict):
        return {k: _without_operation_ids(v) for k, v in schema.items() if k != "operationId"}
    if isinstance(schema, list):
        return [_without_operation_ids(v) for v in schema]
    return schema


class Unsatisfiables:
    """The labels of the operations whose negative mode is unsatisfiable, for one schema.

    Remembered per operation, by a fingerprint of its own part of the schema (its
    parameters and body, with every component they refer to) and of the fuzzer's versions
    and settings: a change elsewhere in the API leaves the others known. Read from the
    repository's seed (``SEED``: what a run on a fresh machine, CI's, starts from, or it pays
    3-4 s per such operation, ~4 CPU minutes in all) and from ``NETBAY_FUZZ_CACHE`` (what
    this machine learned since; copy that file over the seed to refresh it)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        versions = [importlib.metadata.version(p) for p in ("schemathesis", "hypothesis")]
        salt = repr((versions, SETTINGS))
        components = schema.get("components", {})
        self.fingerprints: dict[str, str] = {}
        for path, methods in schema.get("paths", {}).items():
            for method, operation in methods.items():
                if isinstance(operation, dict):
                    part = {"path": path, "method": method, "operation": operation,
                            "refs": _referenced(operation, components)}
                    canonical = json.dumps(_without_operation_ids(part), sort_keys=True)
                    self.fingerprints[f"{method.upper()} {path}"] = \
                        hashlib.sha256((canonical + salt).encode()).hexdigest()[:24]
        self.path = UNSATISFIABLE_CACHE / "unsatisfiable-operations.json"
        known = self._saved(SEED) | self._saved(self.path)
        self.labels = {label for label, fp in self.fingerprints.items() if fp in known}

    @staticmethod
    def _saved(path: Path) -> set[str]:
        try:
            return set(json.loads(path.read_text()))
        except (OSError, ValueError):
            return set()

    def add(self, label: str) -> None:
        """Remember ``label``, with what the parts on other workers saved meanwhile."""
        self.labels.add(label)
        if label not in self.fingerprints:
            return
        saved = self._saved(self.path) | {self.fingerprints[label]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sorted(saved), indent=0))
        tmp.replace(self.path)   # a whole file or none


def _referenced(node: Any, components: dict[str, Any]) -> dict[str, Any]:
    """Every component ``node`` refers to (``#/components/…``), and theirs, by reference."""
    found: dict[str, Any] = {}
    pending = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/") and ref not in found:
                target: Any = components
                for key in ref.removeprefix("#/components/").split("/"):
                    target = target.get(key, {}) if isinstance(target, dict) else {}
                found[ref] = target
                pending.append(target)
            pending.extend(v for k, v in item.items() if k != "$ref")
        elif isinstance(item, list):
            pending.extend(item)
    return found


def fuzz_operations(server: Server, token: str, seeds: dict[str, list[str]], part: int) -> None:
    """Fuzz operations ``part``, ``part + PARTS``, … of the schema's (in its order), with
    an admin token. Path ids are drawn half the time from ``seeds``, so update and tag
    bodies reach the business rules instead of stopping at 404. Failures are collected,
    not raised inside Hypothesis (no shrinking, so the run stays bounded), and reported
    together with the server's tracebacks."""
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", timeout=30)
    every = [result.ok() for result in schema.get_all_operations()]
    unsatisfiable = Unsatisfiables(httpx.get(f"{server.url}/openapi.json", timeout=30).json())
    assert len(every) > 60  # every resource's routes are in the schema
    operations = every[part::PARTS]
    # Deletions last, so the seeded resources stay for the other operations.
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    headers = {"X-Auth-Token": token}
    failures: list[str] = []
    counts = {"requests": 0}
    deadline = time.monotonic() + BUDGET_S

    for op in operations:
        examples = EXAMPLES if time.monotonic() < deadline else min(EXAMPLES, EXAMPLES_LATE)
        ids = seeds.get(_collection(op.path) or "", [])
        id_param = "router_id" if "{router_id}" in op.path else "item_id" if "{item_id}" in op.path else None
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode is GenerationMode.NEGATIVE and op.label in unsatisfiable.labels:
                continue
            strategy = op.as_strategy(generation_mode=mode)
            if id_param and ids and mode is GenerationMode.POSITIVE:
                strategy = st.one_of(strategy, op.as_strategy(generation_mode=mode,
                                                              path_parameters={id_param: ids[0]}))

            @settings(max_examples=examples, **SETTINGS)
            @given(case=strategy)
            def run(case: Any) -> None:
                if op.path == "/netbay/v1/changes" and isinstance(case.query, dict):
                    wait = case.query.get("wait")
                    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0.2:
                        case.query["wait"] = 0.2  # the long poll is bounded, not skipped
                counts["requests"] += 1
                response = None
                try:
                    response = case.call(base_url=server.url, headers=headers, timeout=30)
                    case.validate_response(response, checks=[not_a_server_error])
                except (Exception, FailureGroup) as exc:  # noqa: BLE001 - every failure is collected
                    failures.append(_describe(case, response, exc))

            t0 = time.monotonic()
            try:
                run()
                if os.environ.get("NETBAY_FUZZ_TIMING"):
                    print(f"{time.monotonic() - t0:6.2f}s {mode.value:8} {op.label}")
            except Unsatisfiable:  # nothing to negate (no parameters, no body)
                assert mode is GenerationMode.NEGATIVE, op.label
                unsatisfiable.add(op.label)

    assert counts["requests"] > len(operations)
    assert not failures, (f"{len(failures)} of {counts['requests']} fuzzed requests failed:\n"
                          + "\n".join(dict.fromkeys(failures)) + "\n\nserver log:\n" + server_tracebacks(server))
