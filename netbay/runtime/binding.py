"""Binding a port to a container on a host, and giving it back: the two updates.

A container port is bound when its ``device_id`` names the container (or the pod, the
endpoint), its ``device_owner`` says whose agent wires it, and ``binding:host_id`` is
the host its runtime plugs it on. The Docker driver, the CNI daemon and the container
API bind ports they made and ports they were given; a given port keeps the device a
controller already named, and only what the service set is cleared when it gives the
port back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HOST = "binding:host_id"


def bind(port: Mapping[str, Any], device_id: str, owner: str | None = None,
         host: str | None = None) -> dict[str, Any]:
    """The update that binds ``port`` (``{}``: a port yet to make): its device
    ``device_id`` unless it names one already, owned by ``owner`` (None: its owner
    stays), bound to ``host`` (None: the backend's agent binds it)."""
    update: dict[str, Any] = {}
    if not port.get("device_id"):
        update["device_id"] = device_id
    if owner is not None:
        update["device_owner"] = owner
    if host is not None:
        update[HOST] = host
    return update


def unbind(device_was_ours: bool, host: bool = True) -> dict[str, Any]:
    """The update that gives a port back: off its host (``host``: the service bound it
    there), and its device and owner cleared if the service set them."""
    update: dict[str, Any] = {HOST: ""} if host else {}
    if device_was_ours:
        update.update(device_id="", device_owner="")
    return update


__all__ = ["HOST", "bind", "unbind"]
