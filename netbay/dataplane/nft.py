"""nftables in-process: a minimal ctypes binding to libnftables' JSON interface.

``Nft(ns)`` drives the ruleset of one netbay namespace without forking ``nft``
(a fork costs milliseconds; an element add in-process costs ~0.1 ms). The
libnftables context is created while the calling thread is inside the namespace,
and every command also runs inside it: whether libnftables opens its netlink
socket when the context is made or lazily per command, it is bound to ``ns``.

Commands are nftables JSON (``{"nftables": [...]}`` or the list inside it, see
libnftables-json(5)); plain nft syntax is accepted too. Results are parsed JSON.
A failed command raises :class:`NftError` carrying nft's own error text.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import json
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from netbay.dataplane import netns

__all__ = ["Nft", "NftError", "NftUnavailable", "LIBNFTABLES", "parse_prefix", "prefix"]

LIBNFTABLES = "libnftables.so.1"

NFT_CTX_DEFAULT = 0
NFT_CTX_OUTPUT_HANDLE = 1 << 3
NFT_CTX_OUTPUT_JSON = 1 << 4
NFT_CTX_OUTPUT_ECHO = 1 << 5

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


class NftError(RuntimeError):
    """An nftables command failed; ``.error`` is nft's message, ``.command`` the input."""

    def __init__(self, ns: str, error: str, command: str) -> None:
        self.ns, self.error, self.command = ns, error.strip(), command
        short = command if len(command) <= 300 else command[:300] + "…"
        super().__init__(f"nft in namespace {ns!r}: {self.error or 'failed'} "
                         f"(command: {short})")


class NftUnavailable(OSError):
    """libnftables cannot be loaded."""


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        try:
            lib = ctypes.CDLL(LIBNFTABLES, use_errno=True)
        except OSError as exc:
            raise NftUnavailable(errno.ENOENT, f"cannot load {LIBNFTABLES} (Debian package "
                                               f"libnftables1): {exc}") from None
        vp, cp, i, u = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint
        lib.nft_ctx_new.argtypes, lib.nft_ctx_new.restype = [ctypes.c_uint32], vp
        lib.nft_ctx_free.argtypes, lib.nft_ctx_free.restype = [vp], None
        lib.nft_ctx_output_get_flags.argtypes, lib.nft_ctx_output_get_flags.restype = [vp], u
        lib.nft_ctx_output_set_flags.argtypes, lib.nft_ctx_output_set_flags.restype = [vp, u], None
        lib.nft_ctx_buffer_output.argtypes, lib.nft_ctx_buffer_output.restype = [vp], i
        lib.nft_ctx_buffer_error.argtypes, lib.nft_ctx_buffer_error.restype = [vp], i
        lib.nft_ctx_get_output_buffer.argtypes, lib.nft_ctx_get_output_buffer.restype = [vp], cp
        lib.nft_ctx_get_error_buffer.argtypes, lib.nft_ctx_get_error_buffer.restype = [vp], cp
        lib.nft_run_cmd_from_buffer.argtypes, lib.nft_run_cmd_from_buffer.restype = [vp, cp], i
        _lib = lib
        return lib


class Nft:
    """An nftables context bound to network namespace ``ns``. Thread-safe (serialized).

    Close it (or use it as a context manager) when done; deleting the namespace with
    :func:`netns.delete` closes every open context of that namespace.
    """

    _open: dict[str, weakref.WeakSet[Nft]] = {}
    _open_lock = threading.Lock()

    def __init__(self, ns: str, *, handles: bool = True) -> None:
        self.ns = ns
        self._lib = _load()
        self._lock = threading.Lock()
        self._flags = NFT_CTX_OUTPUT_JSON | (NFT_CTX_OUTPUT_HANDLE if handles else 0)
        self._ctx: int | None = None
        self._ns_inode = 0
        self._open_ctx()
        with Nft._open_lock:
            Nft._open.setdefault(ns, weakref.WeakSet()).add(self)

    # -- lifecycle --------------------------------------------------------------------

    def _open_ctx(self) -> None:
        with netns.entered(self.ns):
            if netns.in_home():
                raise PermissionError(f"namespace {self.ns!r} is the host's namespace; "
                                      "netbay does not touch its nftables")
            ino = netns.current_inode()
            # libnftables (1.0.6 at least) opens its netlink socket here.
            ctx = self._lib.nft_ctx_new(NFT_CTX_DEFAULT)
        if not ctx:
            raise NftUnavailable(errno.ENOMEM, "nft_ctx_new failed")
        self._lib.nft_ctx_output_set_flags(ctx, self._flags)
        if self._lib.nft_ctx_buffer_output(ctx) or self._lib.nft_ctx_buffer_error(ctx):
            self._lib.nft_ctx_free(ctx)
            raise NftUnavailable(errno.ENOMEM, "cannot buffer libnftables output")
        self._ctx, self._ns_inode = ctx, ino

    def _check_ctx(self, buf: str) -> None:
        """Called with the lock held: the namespace may have been deleted or re-created
        behind our back; the context's socket would still point at the old one."""
        if self._ctx is None:
            raise NftError(self.ns, "context is closed", buf)
        ino = netns.inode(self.ns)
        if ino == self._ns_inode:
            return
        self._lib.nft_ctx_free(self._ctx)
        self._ctx = None
        if ino is None:
            raise NftError(self.ns, "network namespace does not exist", buf)
        self._open_ctx()

    def close(self) -> None:
        with self._lock:
            if self._ctx is not None:
                self._lib.nft_ctx_free(self._ctx)
                self._ctx = None
        with Nft._open_lock:
            s = Nft._open.get(self.ns)
            if s is not None:
                s.discard(self)
                if not s:
                    Nft._open.pop(self.ns, None)

    def __enter__(self) -> Nft:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if self._ctx is not None:
                self._lib.nft_ctx_free(self._ctx)
                self._ctx = None
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass

    @classmethod
    def _close_ns(cls, ns: str) -> None:
        with cls._open_lock:
            ctxs = list(cls._open.get(ns, ()))
        for c in ctxs:
            c.close()

    # -- commands ---------------------------------------------------------------------

    def run(self, command: dict | Sequence[dict] | str, *, echo: bool = False) -> Any:
        """Run one nft command buffer (applied atomically as one transaction).

        ``command``: ``{"nftables": [...]}``, the list inside it, or nft syntax.
        Returns the parsed JSON output (``None`` when there is none). ``echo=True``
        makes nft print what it added, with handles.
        """
        if isinstance(command, str):
            buf = command
        else:
            if not isinstance(command, dict):
                command = {"nftables": list(command)}
            buf = json.dumps(command, separators=(",", ":"))
        raw = buf.encode()
        with self._lock:
            self._check_ctx(buf)
            if echo:
                self._lib.nft_ctx_output_set_flags(self._ctx, self._flags | NFT_CTX_OUTPUT_ECHO)
            try:
                with netns.entered(self.ns):
                    rc = self._lib.nft_run_cmd_from_buffer(self._ctx, raw)
                out = self._lib.nft_ctx_get_output_buffer(self._ctx) or b""
                err = self._lib.nft_ctx_get_error_buffer(self._ctx) or b""
            finally:
                if echo:
                    self._lib.nft_ctx_output_set_flags(self._ctx, self._flags)
        if rc != 0:
            raise NftError(self.ns, err.decode(errors="replace"), buf)
        text = out.decode(errors="replace").strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def list_ruleset(self) -> list[dict]:
        """The namespace's whole ruleset as libnftables JSON objects (no metainfo)."""
        return self._objects(self.run([{"list": {"ruleset": None}}]))

    def list_table(self, family: str, name: str) -> list[dict] | None:
        """Table ``name``'s objects (its own, sets, chains, rules, counters; no metainfo),
        or None where there is no such table (any other error is raised)."""
        try:
            return self._objects(self.run([{"list": {"table": {"family": family, "name": name}}}]))
        except NftError as exc:
            if "No such file" in exc.error or "does not exist" in exc.error:
                return None
            raise

    def list_set(self, family: str, table: str, name: str) -> list[Any]:
        """Elements of set or map ``name`` (JSON form, as nft prints them)."""
        objs = self._objects(self.run([{"list": {"set": {"family": family, "table": table,
                                                          "name": name}}}]))
        for o in objs:
            body = o.get("set") or o.get("map")
            if body is not None:
                return list(body.get("elem", []))
        return []

    def add_elements(self, family: str, table: str, name: str, elements: Iterable[Any]) -> None:
        """Add ``elements`` to set/map ``name`` in one transaction (existing ones are kept)."""
        elems = list(elements)
        if elems:
            self.run([{"add": {"element": {"family": family, "table": table, "name": name,
                                           "elem": elems}}}])

    def delete_elements(self, family: str, table: str, name: str,
                        elements: Iterable[Any]) -> None:
        """Delete ``elements`` from set/map ``name``; an absent element is an error
        (nft's semantics: the whole transaction is refused)."""
        elems = list(elements)
        if elems:
            self.run([{"delete": {"element": {"family": family, "table": table, "name": name,
                                              "elem": elems}}}])

    def tables(self) -> list[tuple[str, str]]:
        """``(family, name)`` of every table."""
        out = self._objects(self.run([{"list": {"tables": None}}]))
        return [(o["table"]["family"], o["table"]["name"]) for o in out if "table" in o]

    @staticmethod
    def _objects(result: Any) -> list[dict]:
        if not isinstance(result, dict):
            return []
        return [o for o in result.get("nftables", []) if "metainfo" not in o]



def prefix(cidr: str) -> dict:
    """A network as an element or operand in nftables JSON (``{"prefix": …}``)."""
    net = ipaddress.ip_network(cidr)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


def parse_prefix(raw: Any) -> str:
    """A network element as nft lists it (``"10.0.0.0/8"`` or ``{"prefix": …}``, a host
    as a bare address) in canonical form; ValueError if it is something else."""
    if isinstance(raw, str):
        return str(ipaddress.ip_network(raw))
    if isinstance(raw, dict) and "prefix" in raw:
        p = raw["prefix"]
        return str(ipaddress.ip_network(f"{p['addr']}/{p['len']}"))
    raise ValueError(raw)


netns.on_delete(Nft._close_ns)
