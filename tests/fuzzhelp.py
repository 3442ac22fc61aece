"""Fuzzing: no input, valid or not, may make the server answer 5xx.

Schemathesis generates requests from the server's own ``/openapi.json``, both
schema-valid (positive) and schema-violating (negative) ones, for every
operation, with an admin token. Path ids are drawn half the time from real
resources made for the purpose, so update and tag bodies reach the business
rules instead of stopping at 404. List calls declare no query parameters in
the schema (filters are free-form, as in Neutron), so a second, plain
Hypothesis test fuzzes their query strings, and a third the token request.

Failures are collected, not raised inside Hypothesis (no shrinking, so the run
stays bounded), and reported together with the server's tracebacks. Knobs:
NETBAY_FUZZ_EXAMPLES (per operation and mode, default 10), NETBAY_FUZZ_BUDGET
(seconds before the remaining operations drop to 3 examples), NETBAY_FUZZ_TIMING=1
(print each operation's time, with ``-s``).
"""

from __future__ import annotations

import json
import os
import time
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


def _server_tracebacks(server: Server, limit: int = 8000) -> str:
    log = (server.data_dir / "server.log").read_text(errors="replace")
    start = log.find("Traceback")
    return log[start:][-limit:] if start >= 0 else "(no traceback in server.log)"


@pytest.mark.slow
def test_openapi_operations_never_answer_5xx(server: Server, token: str, seeds: dict[str, list[str]]) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", timeout=30)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 60  # every resource's routes are in the schema
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

    assert counts["requests"] > len(operations)
    assert not failures, (f"{len(failures)} of {counts['requests']} fuzzed requests failed:\n"
                          + "\n".join(dict.fromkeys(failures)) + "\n\nserver log:\n" + _server_tracebacks(server))


# --- list query strings (free-form in the schema, so fuzzed here) -----------------------------

COLLECTIONS = ["networks", "subnets", "subnetpools", "ports", "security-groups", "security-group-rules",
               "routers", "floatingips"]
KEYS = ["id", "name", "network_id", "subnet_id", "device_id", "device_owner", "fixed_ips", "mac_address",
        "admin_state_up", "shared", "router:external", "ip_version", "cidr", "tags", "tags-any", "not-tags",
        "revision_number", "project_id", "tenant_id", "status", "fields", "sort_key", "sort_dir", "limit",
        "marker", "page_reverse", "port_range_min", "protocol", "direction", "floating_ip_address",
        "external_gateway_info", "created_at", "description", "enable_dhcp", "mtu", "bogus"]
VALUES = st.one_of(
    st.sampled_from(["", "true", "False", "0", "-1", "2147483648", "99999999999999999999", "asc", "desc",
                     "id", "name", "ip_address=10.0.0.1", "subnet_id=x", "1.2.3.4", "::1", "10.0.0.0/8",
                     "a,b", "%", "_", "'", "\\", "null", "ø", "\ud7ff", "1e309", "NaN"]),
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=12),
)


@settings(max_examples=4 * EXAMPLES * len(COLLECTIONS), **SETTINGS)
@given(collection=st.sampled_from(COLLECTIONS),
       params=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=5))
def _list_queries(client: httpx.Client, failures: list[str], collection: str,
                  params: list[tuple[str, str]]) -> None:
    try:
        r = client.get(f"/{collection}", params=params)
    except httpx.HTTPError as exc:
        failures.append(f"GET /{collection} {params!r} -> {exc!r}")
        return
    if r.status_code >= 500:
        failures.append(f"GET /{collection} {params!r} -> {r.status_code} {r.text[:300]}")


def test_list_query_strings_never_answer_5xx(server: Server, token: str) -> None:
    client = server.http(token)
    failures: list[str] = []
    _list_queries(client, failures)
    assert client.get("/ports", params={"limit": "x"}).status_code == 400  # the fuzzer reached the parser
    assert not failures, "\n".join(dict.fromkeys(failures)) + "\n\nserver log:\n" + _server_tracebacks(server)


# --- token requests: arbitrary JSON ---------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
AUTH = st.fixed_dictionaries({"auth": st.fixed_dictionaries({
    "identity": st.one_of(JSON, st.fixed_dictionaries({
        "methods": st.one_of(JSON, st.just(["password"]), st.just(["token"])),
        "password": st.one_of(JSON, st.fixed_dictionaries({"user": st.fixed_dictionaries({
            "name": JSON, "password": JSON, "domain": JSON, "id": JSON})})),
        "token": JSON})),
    "scope": JSON})})


@settings(max_examples=8 * EXAMPLES, **SETTINGS)
@given(body=st.one_of(JSON, AUTH))
def _token_bodies(url: str, failures: list[str], body: Any) -> None:
    # json.dumps writes NaN/Infinity, which is not JSON: the server must refuse it with a 400.
    r = httpx.post(url, content=json.dumps(body), headers={"Content-Type": "application/json"}, timeout=30)
    if r.status_code >= 500:
        failures.append(f"POST /identity/v3/auth/tokens {body!r} -> {r.status_code} {r.text[:300]}")


def test_token_requests_never_answer_5xx(server: Server) -> None:
    failures: list[str] = []
    _token_bodies(f"{server.auth_url}/auth/tokens", failures)
    assert not failures, "\n".join(dict.fromkeys(failures)) + "\n\nserver log:\n" + _server_tracebacks(server)
