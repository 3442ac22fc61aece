"""Docker 20.10's captured plugin calls, replayed on a plugin's Unix socket.

The captures (``/work/shared/reference/docker-plugin-captures``) hold every call
dockerd made to a remote network + IPAM driver for ``docker network create``,
``run``, ``stop``, ``rm``, ``connect`` and ``disconnect``, failures and Docker's
rollbacks included. :func:`replay` sends them in Docker's order with Docker's exact
bodies; pools, addresses and gateways are the plugin's, mapped as Docker would
carry them from one answer into the next request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "reference" / "docker-plugin-captures"
if not CAPTURES.is_dir():  # a worktree's layout differs from the main checkout's
    CAPTURES = Path("/work/shared/reference/docker-plugin-captures")
UNSUPPORTED = ("203.0.113.", "2001:db8", "95abbf67")  # --ip-range, IPv6: refused by this driver
NAMES = ("network-create-run-stop-rm.jsonl", "connect-disconnect-errors.jsonl")

OnAnswer = Callable[[str, dict, dict], None]


def _subst(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return mapping.get(value, value)
    if isinstance(value, dict):
        return {k: _subst(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_subst(v, mapping) for v in value]
    return value


def replay(sock: Path, name: str, on_answer: OnAnswer | None = None) -> list[tuple[str, dict]]:
    """Send the capture ``name`` to the plugin at ``sock``; ``on_answer(path, request,
    answer)`` sees each successful call as it is answered (a check mid-way). A call
    Docker saw fail is skipped: what follows it is Docker's rollback. Returns every
    (path, answer)."""
    mapping: dict[str, str] = {}
    answers = []
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://p", timeout=30) as c:
        refused = False  # a pool this driver refused: Docker made nothing on it, skip to the next
        for line in (CAPTURES / name).read_text().splitlines():
            rec = json.loads(line)
            if any(u in line for u in UNSUPPORTED) or "Err" in (rec.get("resp") or {}):
                continue
            refused = refused and rec["path"] != "/IpamDriver.RequestPool"
            if refused:
                continue
            req = _subst(rec["req"], mapping) if rec["req"] is not None else None
            r = c.post(rec["path"], json=req)
            body = r.json()
            answers.append((rec["path"], body))
            if rec["path"] == "/IpamDriver.RequestPool" and not (rec["req"] or {}).get("Pool"):
                assert r.status_code == 500 and "--subnet" in body["Err"], body
                refused = True  # this driver needs a subnet: Docker stops there
                continue
            assert r.status_code == 200, (rec["seq"], rec["path"], body)
            resp = rec["resp"] or {}
            if "PoolID" in resp:
                mapping[resp["PoolID"]] = body["PoolID"]
            if "Address" in resp:
                mapping[resp["Address"]] = body["Address"]
                mapping[resp["Address"].split("/")[0]] = body["Address"].split("/")[0]
            if on_answer is not None:
                on_answer(rec["path"], req or {}, body)
    return answers


__all__ = ["CAPTURES", "NAMES", "replay"]
