"""Many clients racing for the last addresses of one subnet: no address twice, no 500."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections import Counter

import httpx
import pytest
from conftest import unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

CLIENTS = 50
REQUESTS = 500
DEADLINE = 240  # seconds for the whole storm; a hang fails instead of blocking the suite


async def _storm(url: str, token: str, network_id: str) -> list[httpx.Response]:
    # Idle connections expire on our side first: uvicorn closes them after 5 s, and reusing
    # one just as it does is a client-side race (ReadError), not an answer of the server.
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS, keepalive_expiry=1)
    async with httpx.AsyncClient(base_url=url, headers={"X-Auth-Token": token}, limits=limits,
                                 timeout=120) as client:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(REQUESTS):
            queue.put_nowait(i)
        answers: list[httpx.Response] = []

        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                answers.append(await client.post(
                    "/ports", json={"port": {"network_id": network_id, "name": f"storm-{i}"}}))

        await asyncio.wait_for(asyncio.gather(*[worker() for _ in range(CLIENTS)]), DEADLINE)
        return answers


def test_concurrent_creates_exhaust_a_subnet_exactly(server):
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    http = server.http(token)
    r = http.post("/networks", json={"network": {"name": unique("storm")}})
    assert r.status_code == 201, r.text
    network_id = r.json()["network"]["id"]
    r = http.post("/subnets", json={"subnet": {"network_id": network_id, "ip_version": 4,
                                               "cidr": "10.77.0.0/24"}})
    assert r.status_code == 201, r.text
    subnet = r.json()["subnet"]
    pool = [ipaddress.ip_address(a) for p in subnet["allocation_pools"]
            for a in range(int(ipaddress.ip_address(p["start"])), int(ipaddress.ip_address(p["end"])) + 1)]
    assert len(pool) == 253  # .1 is the gateway, .0 and .255 are not hosts

    started = time.monotonic()
    answers = asyncio.run(_storm(f"{server.url}/network/v2.0", token, network_id))
    elapsed = time.monotonic() - started

    assert len(answers) == REQUESTS
    statuses = Counter(r.status_code for r in answers)
    assert set(statuses) <= {201, 409}, {s: [r.text for r in answers if r.status_code == s][:2] for s in statuses}
    created = [r.json()["port"] for r in answers if r.status_code == 201]
    refused = [r.json()["NeutronError"] for r in answers if r.status_code == 409]
    assert {e["type"] for e in refused} == {"IpAddressGenerationFailure"}, refused[:3]
    addresses = [p["fixed_ips"][0]["ip_address"] for p in created]
    assert all(len(p["fixed_ips"]) == 1 for p in created)
    assert len(set(addresses)) == len(addresses), "an address was handed out twice"
    assert len(created) == len(pool) and len(refused) == REQUESTS - len(pool)
    assert sorted(ipaddress.ip_address(a) for a in addresses) == pool
    assert len({p["mac_address"] for p in created}) == len(created)
    assert len({tuple(p["security_groups"]) for p in created}) == 1  # one default group, made once

    # What the server holds agrees with what it answered.
    listed = http.get("/ports", params={"network_id": network_id}).json()["ports"]
    assert sorted(p["id"] for p in listed) == sorted(p["id"] for p in created)
    print(f"{REQUESTS} creates by {CLIENTS} clients in {elapsed:.1f}s: {dict(statuses)}")
