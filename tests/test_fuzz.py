"""Fuzzing: no input, valid or not, may make the server answer 5xx.

Schemathesis generates requests from the server's own ``/openapi.json``, both
schema-valid (positive) and schema-violating (negative) ones, for every
operation (part 0 of them here, the others in ``test_fuzz_part*.py``; ``tests/fuzzhelp.py``
says why). List calls declare no query parameters in the schema (filters are
free-form, as in Neutron), so a second, plain Hypothesis test fuzzes their query
strings, and a third the token request.

Failures are collected, not raised inside Hypothesis, and reported together with
the server's tracebacks; the knobs are ``tests/fuzzhelp.py``'s.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from conftest import Server
from fuzzhelp import EXAMPLES, SETTINGS, fuzz_operations, seeds, server_tracebacks, token  # noqa: F401 - fixtures
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.slow
def test_openapi_operations_never_answer_5xx(server: Server, token: str, seeds: dict[str, list[str]]) -> None:
    fuzz_operations(server, token, seeds, part=0)


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
    assert not failures, "\n".join(dict.fromkeys(failures)) + "\n\nserver log:\n" + server_tracebacks(server)


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
    assert not failures, "\n".join(dict.fromkeys(failures)) + "\n\nserver log:\n" + server_tracebacks(server)
