"""The shape of each call Docker makes, checked before a handler reads it.

A handler reads fields as Docker sends them (libnetwork's ``remote`` and ``ipam/remote``
API); a body that is not of that shape (a missing ``NetworkID``, a number where a
string goes, a list for ``Options``) gets an ``Err`` that names the call and the
field in Docker's words (``netbay: CreateNetwork: NetworkID is missing``), never the
Python exception a handler would otherwise stumble into. ``null`` is taken for an
absent optional field (Docker sends ``"Options": null``).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from netbay.plugins.libnetwork.resources import PluginError

TEXT, OBJECT, LIST, FLAG = "a string", "an object", "a list", "true or false"
_TYPES: dict[str, type | tuple[type, ...]] = {TEXT: str, OBJECT: dict, LIST: list, FLAG: bool}

Shape = dict[str, tuple[str, bool]]  # field -> (kind, required)
_ENDPOINT: Shape = {"NetworkID": (TEXT, True), "EndpointID": (TEXT, True), "Options": (OBJECT, False)}
SHAPES: dict[str, Shape] = {
    "NetworkDriver.CreateNetwork": {"NetworkID": (TEXT, True), "Options": (OBJECT, False),
                                    "IPv4Data": (LIST, False), "IPv6Data": (LIST, False)},
    "NetworkDriver.DeleteNetwork": {"NetworkID": (TEXT, True)},
    "NetworkDriver.CreateEndpoint": {**_ENDPOINT, "Interface": (OBJECT, False)},
    "NetworkDriver.DeleteEndpoint": _ENDPOINT,
    "NetworkDriver.EndpointOperInfo": _ENDPOINT,
    "NetworkDriver.Join": {**_ENDPOINT, "SandboxKey": (TEXT, False)},
    "NetworkDriver.Leave": _ENDPOINT,
    "IpamDriver.RequestPool": {"AddressSpace": (TEXT, False), "Pool": (TEXT, False), "SubPool": (TEXT, False),
                               "Options": (OBJECT, False), "V6": (FLAG, False)},
    "IpamDriver.ReleasePool": {"PoolID": (TEXT, True)},
    "IpamDriver.RequestAddress": {"PoolID": (TEXT, True), "Address": (TEXT, False), "Options": (OBJECT, False)},
    "IpamDriver.ReleaseAddress": {"PoolID": (TEXT, True), "Address": (TEXT, False)},
}
POOL_DATA: Shape = {"Pool": (TEXT, True), "Gateway": (TEXT, False), "AddressSpace": (TEXT, False),
                    "AuxAddresses": (OBJECT, False)}
INTERFACE: Shape = {"Address": (TEXT, False), "AddressIPv6": (TEXT, False), "MacAddress": (TEXT, False)}


def verb(method: str) -> str:
    """``IpamDriver.RequestPool`` -> ``RequestPool``: how Docker users know the call."""
    return method.rpartition(".")[2]


def _fields(where: str, obj: dict[str, Any], shape: Shape) -> None:
    for name, (kind, required) in shape.items():
        value = obj.get(name)
        if value is None or (required and value == ""):
            if required:
                raise PluginError(f"netbay: {where}: {name} is missing")
            continue
        if not isinstance(value, _TYPES[kind]) or (kind != FLAG and isinstance(value, bool)):
            raise PluginError(f"netbay: {where}: {name} must be {kind}, not {_json_kind(value)}")


def _json_kind(value: Any) -> str:
    """The JSON word for what was sent (not Python's)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    words: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}
    return words.get(type(value), "something else")


def check(method: str, req: Any) -> dict[str, Any]:
    """``req`` if it is of the shape ``method`` takes, else :class:`PluginError`."""
    where = verb(method)
    if not isinstance(req, dict):
        raise PluginError(f"netbay: {where}: the body must be a JSON object, not {_json_kind(req)}")
    shape = SHAPES.get(method)
    if shape is None:
        return req
    _fields(where, req, shape)
    for data in ("IPv4Data", "IPv6Data"):
        for i, item in enumerate(req.get(data) or () if data in shape else ()):
            if not isinstance(item, dict):
                raise PluginError(f"netbay: {where}: {data}[{i}] must be an object, not {_json_kind(item)}")
            _fields(f"{where}: {data}[{i}]", item, POOL_DATA)
    if "Interface" in shape and req.get("Interface"):
        _fields(f"{where}: Interface", req["Interface"], INTERFACE)
    return req


def address(where: str, value: str) -> str:
    """``value`` if it is an IP address (no prefix length: as Docker sends one)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise PluginError(f"netbay: {where}: {value!r} is not an IP address") from None
    return value


__all__ = ["SHAPES", "address", "check", "verb"]
