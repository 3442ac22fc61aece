"""The container-infra (Magnum) API's prefix and links, shared by its route modules.

:mod:`netbay.api.containerinfra` mounts :mod:`netbay.api.clusterops`, so what both
use lives here, below the two; what Magnum shares with Zun is in
:mod:`netbay.api.versioned`.
"""

from __future__ import annotations

from fastapi import Request

from netbay.api.urls import public_root

PREFIX = "/container-infra"


def links(request: Request, collection: str, obj_id: str) -> list[dict[str, str]]:
    root = public_root(request) + PREFIX
    return [{"href": f"{root}/v1/{collection}/{obj_id}", "rel": "self"},
            {"href": f"{root}/{collection}/{obj_id}", "rel": "bookmark"}]


__all__ = ["PREFIX", "links"]
