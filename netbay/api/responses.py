"""A JSON response rendered by orjson (FastAPI deprecated its own ORJSONResponse)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.responses import Response


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:
            # orjson has no integers beyond 64 bits; an IPv6 subnet's address count
            # (network-ip-availability) is one, and JSON has no such limit.
            return json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode()
