"""Every command's failures said in one line that names what to do (no traceback).

A client command meets four failures over and over: no credentials, a server that does
not answer, credentials it refuses, and a name it does not know (the API's 404). A
server-side command meets a data dir with no database. :class:`OneLineErrors` catches
them where every command passes, the ``netbay`` group, so a new command is covered
without a line of its own.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from netbay.errors import NetbayError

DATA_DIR_HINT = ("pass --data-dir (or NETBAY_DATA_DIR) of a netbay that has run (`netbay up`, "
                 "`netbay db upgrade`), or --database-url")


def one_line(exc: BaseException) -> str | None:
    """The line for a known failure, or None (a bug: its traceback is kept). The client's
    modules are looked up, not imported: a command that never loaded them cannot fail by them."""
    auth = sys.modules.get("netbay.client.auth")
    if auth is not None and isinstance(exc, auth.CredentialsMissing):
        return str(exc)
    client = sys.modules.get("netbay.client.errors")
    if client is not None and isinstance(exc, client.ApiError):
        if exc.status == 401:
            return (f"authentication failed: {exc.message} (HTTP 401): check OS_USERNAME, OS_PASSWORD and "
                    f"OS_PROJECT_NAME (or source the openrc `netbay up` wrote)")
        return f"{exc.message} (HTTP {exc.status})"
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.TransportError):
        try:
            where = str(exc.request.url.copy_with(query=None)).removesuffix("/auth/tokens")
        except RuntimeError:
            where = "the server"
        return f"no netbay at {where}: nothing answers there (is `netbay up` running? or set OS_AUTH_URL / --url)"
    if isinstance(exc, NetbayError):
        return f"{exc.message} ({exc.kind})"
    if type(exc).__module__.startswith("sqlalchemy") and "OperationalError" in type(exc).__name__:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        return f"cannot open netbay's database ({reason}): {DATA_DIR_HINT}"
    return None


class OneLineErrors:
    """Mixin of a typer group: its commands' known failures end in one ``error: …`` line, exit 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except Exception as exc:
            line = one_line(exc)
            if line is None:
                raise
            typer.echo(f"error: {line}", err=True)
            raise typer.Exit(1) from None
