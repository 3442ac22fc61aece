"""A container's ``cpu``, ``memory``, ``restart_policy`` and ``mounts`` from Zun's body,
checked as Zun checks them, kept as Docker is then given them.

``mounts`` are Zun's, without Cinder: ``{"type": "volume", "size": N, "destination"}``
is a local Docker volume of the container's own (``zun-<uuid>-<n>``, kept across
rebuilds, removed with the container; Docker's local driver has no size, so ``size``
is recorded only); ``{"type": "bind", "source": <base64 contents>, "destination"}`` is
Zun's local file, written into the container before it first starts. A ``source``
of type ``volume`` names a Cinder volume, which netbay does not have: refused by name.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from netbay.containers import schema
from netbay.errors import BadRequest


def from_body(body: dict[str, Any], container_id: str) -> dict[str, Any]:
    """The columns ``cpu``, ``memory``, ``restart_policy``, ``mounts`` (body already schema-checked)."""
    cpu, memory = body.get("cpu"), body.get("memory")
    return {"cpu": float(cpu) if cpu is not None else None, "memory": str(memory) if memory is not None else None,
            "restart_policy": restart_policy(body.get("restart_policy")),
            "mounts": mounts(body.get("mounts") or [], container_id)}


def restart_policy(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Zun's ``check_for_restart_policy``: a retry count only with ``on-failure``; kept as strings."""
    if not value:
        return None
    name, count = value["Name"], int(value.get("MaximumRetryCount") or 0)
    if name in ("always", "unless-stopped") and count != 0:
        raise BadRequest(f"maximum retry count not valid with restart policy of {name}")
    return {"Name": name, "MaximumRetryCount": str(0 if name == "no" else count)}


def mounts(value: list[dict[str, Any]], container_id: str) -> list[dict[str, Any]]:
    out = []
    for n, mount in enumerate(value):
        kind, destination = mount.get("type", "volume"), mount["destination"]
        if not destination.startswith("/"):
            raise schema.invalid(f"mounts/{n}/destination", destination, "It is not an absolute path.")
        if kind == "volume":
            if mount.get("source"):
                raise BadRequest(f"Volume {mount['source']} could not be found: netbay has no block storage "
                                 "(Cinder). Give 'size' for a local volume, or type 'bind' for a file.")
            out.append({"type": "volume", "size": str(mount["size"]), "destination": destination,
                        "name": f"zun-{container_id}-{n}"})
        elif kind == "bind":
            try:
                base64.b64decode(mount.get("source") or "", validate=True)
            except (binascii.Error, ValueError):
                raise schema.invalid(f"mounts/{n}/source", mount.get("source"),
                                     "A bind mount's source is the file's contents, base64-encoded.") from None
            out.append({"type": "bind", "source": mount.get("source") or "", "destination": destination})
        else:
            raise schema.invalid(f"mounts/{n}/type", kind, "It is 'volume' or 'bind'.")
    return out


def binds(mounts: list[dict[str, Any]] | None) -> list[str]:
    """Docker's ``binds`` for the container's local volumes."""
    return [f"{m['name']}:{m['destination']}" for m in mounts or () if m["type"] == "volume"]


def volumes(mounts: list[dict[str, Any]] | None) -> list[str]:
    return [m["name"] for m in mounts or () if m["type"] == "volume"]


def files(mounts: list[dict[str, Any]] | None) -> list[tuple[str, bytes]]:
    """(path in the container, contents) of Zun's ``bind`` mounts."""
    return [(m["destination"], base64.b64decode(m["source"])) for m in mounts or () if m["type"] == "bind"]


def tar_of(path: str, contents: bytes) -> bytes:
    """A tar holding the one file at ``path`` from ``/`` (Docker makes the directories)."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode = len(contents), 0o644
        tar.addfile(info, io.BytesIO(contents))
    return buf.getvalue()
