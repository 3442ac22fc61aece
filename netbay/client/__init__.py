"""The one client of netbay's own APIs, used by the agent, the CLI, the plugins and the backends.

- :mod:`netbay.client.errors` — :class:`ApiError` and the one decoder of every API's error
  body (Neutron, Keystone, Octavia, Magnum/Zun, Nova, FastAPI), and the 404 rule
  (:func:`gone_ok`, :func:`or_none`);
- :mod:`netbay.client.auth` — :class:`Credentials` (an openrc's OS_* variables or a
  clouds.yaml entry) and a Keystone login that brings the token and the catalog;
- :mod:`netbay.client.sync` — :class:`Api`, thread-safe, the token renewed on 401;
- :mod:`netbay.client.aio` — :class:`AsyncApi`, the same over httpx's async client.

It sits low in the package graph (it imports only :mod:`netbay.errors`), so every package
may use it; it imports no server-side code (no SQLAlchemy, FastAPI, store or dataplane),
which keeps the CLI's client commands quick to start.
"""

from __future__ import annotations

from netbay.client.errors import ApiError, Refused, decode, gone_ok, or_none, unreachable
from netbay.client.sync import LB, NET, SANDBOXES, Api

__all__ = ["LB", "NET", "SANDBOXES", "Api", "ApiError", "Refused", "decode", "gone_ok", "or_none", "unreachable"]
