"""SSH keypairs with Nova's rules: per user, by name; a public key given is checked and
fingerprinted, none given makes a new RSA key whose private half is returned once.

netbay runs no servers, so nothing is injected anywhere: keypairs exist so that
templates and clusters can name one, and Magnum's check of that name (against
Nova) has something to check against.
"""

from __future__ import annotations

import base64
import hashlib
import string
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.errors import BadRequest, Conflict, NotFound
from netbay.store.models import Keypair

NAME_CHARS = frozenset(string.ascii_letters + string.digits + "-_ ")


def invalid(reason: str) -> BadRequest:
    return BadRequest(f"Keypair data is invalid: {reason}")


def fingerprint(public_key: str) -> str:
    """Nova's: the MD5 of the key blob, as colon-separated hex pairs."""
    try:
        serialization.load_ssh_public_key(public_key.strip().encode())
        blob = base64.b64decode(public_key.split()[1])
    except (ValueError, IndexError, TypeError, UnicodeError):
        raise invalid("failed to generate fingerprint") from None
    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def generate() -> tuple[str, str]:
    """A new RSA 2048 keypair: (OpenSSH public key, PEM private key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
    return public + " Generated-by-Nova", private


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 255:
        raise invalid("Keypair name must be string and between 1 and 255 characters long")
    if not set(name) <= NAME_CHARS:
        raise invalid("Keypair name contains unsafe characters")
    return name


def create(session: Session, user_id: str, name: Any, public_key: Any = None,
           key_type: str = "ssh") -> tuple[Keypair, str | None]:
    """The new keypair and, when netbay made the key, its private half."""
    name = _check_name(name)
    if key_type != "ssh":
        raise invalid(f"keypair type {key_type} is not offered: only 'ssh'")
    private = None
    if public_key is None:
        public_key, private = generate()
    elif not isinstance(public_key, str):
        raise invalid("failed to generate fingerprint")
    print_ = fingerprint(public_key)
    if session.scalars(select(Keypair.id).where(Keypair.user_id == user_id, Keypair.name == name)).first():
        raise Conflict(f"Key pair '{name}' already exists.")
    row = Keypair(user_id=user_id, name=name, type=key_type, public_key=public_key.strip(), fingerprint=print_)
    session.add(row)
    session.flush()
    return row, private


def get(session: Session, user_id: str, name: str) -> Keypair:
    row = session.scalars(select(Keypair).where(Keypair.user_id == user_id, Keypair.name == name)).first()
    if row is None:
        raise NotFound(f"Keypair {name} not found for user {user_id}")
    return row


def listing(session: Session, user_id: str) -> list[Keypair]:
    return list(session.scalars(select(Keypair).where(Keypair.user_id == user_id).order_by(Keypair.name)))


def delete(session: Session, user_id: str, name: str) -> None:
    session.delete(get(session, user_id, name))


def exists(session: Session, user_id: str, name: str) -> bool:
    return session.scalars(select(Keypair.id).where(Keypair.user_id == user_id, Keypair.name == name)).first() \
        is not None


def render(row: Keypair, *, detail: bool, typed: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": row.name, "public_key": row.public_key, "fingerprint": row.fingerprint}
    if typed:
        out["type"] = row.type
    if detail:
        out.update(user_id=row.user_id, id=row.id, created_at=row.created_at.isoformat(), updated_at=None,
                   deleted=False, deleted_at=None)
    return out
