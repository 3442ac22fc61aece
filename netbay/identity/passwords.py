"""Password and secret hashes: scrypt at a cost the operator sets, recorded in each hash.

Keystone makes its hash cost a setting (``[identity] password_hash_rounds``); netbay's is
``NETBAY_PASSWORD_HASH_COST``, scrypt's log2(N) with r=8, p=1 (default 14: ~55 ms of CPU per
hash, what OWASP asks of an interactive login). A lower cost makes authentication cheap where
the passwords are throwaway (tests, demos). A hash at another cost than the default
names its parameters (``scrypt$ln=4,r=8,p=1$salt$digest``), so a hash made at one cost
verifies at any other; one at the default cost is written as before the cost was a setting
(``scrypt$salt$digest``: no parameters, read as the default's), so older netbays read it.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from base64 import b64decode, b64encode

__all__ = ["COST_ENV", "DEFAULT_COST", "check_password", "hash_password", "hash_cost"]

COST_ENV = "NETBAY_PASSWORD_HASH_COST"
DEFAULT_COST = 14
MIN_COST, MAX_COST = 1, 20
_R, _P = 8, 1
_LEGACY = {"ln": DEFAULT_COST, "r": _R, "p": _P}  # the parameters of hashes that name none


@functools.cache
def hash_cost() -> int:
    """The configured cost, read once per process (like the server's other settings)."""
    raw = os.environ.get(COST_ENV, "").strip()
    if not raw:
        return DEFAULT_COST
    try:
        cost = int(raw)
    except ValueError:
        raise ValueError(f"{COST_ENV}={raw!r}: expected an integer from {MIN_COST} to {MAX_COST}") from None
    if not MIN_COST <= cost <= MAX_COST:
        raise ValueError(f"{COST_ENV}={cost}: expected an integer from {MIN_COST} to {MAX_COST}")
    return cost


def _scrypt(secret: str, salt: bytes, ln: int, r: int, p: int) -> bytes:
    n = 2**ln
    maxmem = 128 * r * (n + 2) + 128 * r * p + 2**20  # OpenSSL's need plus slack: high costs fit
    return hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=maxmem)


def hash_password(password: str, cost: int | None = None) -> str:
    """A salted scrypt hash naming its parameters; ``cost`` defaults to the configured one.
    At the default cost it is written in the older form, which names none: a netbay from
    before the setting, sharing the database during a rolling upgrade (HA on PostgreSQL),
    still verifies what this one writes."""
    ln = hash_cost() if cost is None else cost
    salt = os.urandom(16)
    digest = _scrypt(password, salt, ln, _R, _P)
    named = "" if ln == _LEGACY["ln"] else f"ln={ln},r={_R},p={_P}$"
    return f"scrypt${named}{b64encode(salt).decode()}${b64encode(digest).decode()}"


def _parameters(text: str) -> dict[str, int] | None:
    try:
        params = {k: int(v) for k, v in (item.split("=", 1) for item in text.split(","))}
    except ValueError:
        return None
    if set(params) != {"ln", "r", "p"} or not MIN_COST <= params["ln"] <= MAX_COST \
            or not 1 <= params["r"] <= 32 or not 1 <= params["p"] <= 16:
        return None
    return params


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored``, at the parameters ``stored`` names."""
    parts = stored.split("$")
    if len(parts) == 3 and parts[0] == "scrypt":
        params: dict[str, int] | None = _LEGACY
        salt, digest = parts[1], parts[2]
    elif len(parts) == 4 and parts[0] == "scrypt":
        params = _parameters(parts[1])
        salt, digest = parts[2], parts[3]
    else:
        return False
    if params is None:
        return False
    try:
        actual = _scrypt(password, b64decode(salt, validate=True), params["ln"], params["r"], params["p"])
        expected = b64decode(digest, validate=True)
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)
