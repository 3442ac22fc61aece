"""BIG TCP on the veths netbay makes: decided per path, from what this host measures.

TCP in a namespace builds GSO packets of up to :data:`GSO_MAX_SIZE` bytes instead of
the kernel's 64 KiB when both ends of its veth allow it. A packet through netbay's
paths pays a fixed cost whatever its size (a second veth hop, a bridge, conntrack,
a node's routing), so 3x larger packets divide that cost by 3 — where nothing on the
way cuts them up again. Something may: on this project's 6.18 build a pod's 192 KiB
packets routed out of a node ``eth0`` with the kernel's 64 KiB limit are cut into
MSS-sized segments in software and the pod gets a quarter to a third of the node's
throughput (issue 15); through an ``eth0`` that takes 192 KiB they pass whole and
the pod gains as much as the fabric. The kernel's version says none of this, so each
path is measured:

* ``fabric``      — sandbox → fabric bridge → sandbox (:mod:`netbay.dataplane.fabric`);
* ``pod-bridged`` — flannel host-gw: pod → ``cni0`` → node routing → ``eth0`` → …;
* ``pod-routed``  — calico: pod → ``cali…`` (routed /32) → node routing → ``eth0`` → …;
* ``pod-vxlan``   — pods behind a VXLAN device: always the kernel's default, not probed:
  a packet above 64 KiB does not survive encapsulation (its 16-bit outer UDP length
  wraps and the receiver trims the packet to it: bench/vxlan_options.py --capture).

:mod:`netbay.dataplane.gsoprobe` runs each probed path with both limits (bounded
in-process TCP streams through two copies of the same device chain in throwaway
namespaces, at the same time). BIG TCP is chosen where its packets reach the far end
whole (mean size there above 1.5x that of 64 KiB ones) and its stream was not
clearly slower (>= :data:`SPEED_FLOOR` of the default's): the packet size decides, as
it does not depend on the machine's load; the throughput only vetoes. A cluster
node's ``eth0`` is a fabric port, so the pod paths are probed after the fabric, over
an ``eth0`` with the fabric's decision; and :func:`netbay.drivers.pods.attach` never
gives a pod more than its node's ``eth0`` takes.

The decision is remembered per host (kernel release + boot id) in
:func:`cache_path`, so only the first agent start after a boot pays for the probe.
``NETBAY_BIG_TCP`` overrides it: ``auto`` (default: cache, else probe), ``probe``
(measure again), ``on``, ``off``, or per path ``pod-bridged=off,fabric=on``
(unlisted paths: auto). A kernel that refuses the limit (EINVAL/ERANGE) is not asked
again by this process.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field

log = logging.getLogger(__name__)

GSO_MAX_SIZE = 196608
KERNEL_DEFAULT = 65536
PATHS = ("fabric", "pod-bridged", "pod-routed", "pod-vxlan")
PROBED = ("fabric", "pod-bridged", "pod-routed")
NOT_PROBED = {"pod-vxlan": "not probed: VXLAN does not carry > 64 KiB"}
ENV = "NETBAY_BIG_TCP"
CACHE_ENV = "NETBAY_BIG_TCP_CACHE"
#: BIG TCP is chosen where its packets arrive whole (larger than 64 KiB ones) and its
#: stream is not clearly slower than the default's under the same load
SPEED_FLOOR = 0.75
CACHE_VERSION = 3


@dataclass
class PathDecision:
    big: bool
    source: str                        # "probe", "cache", "setting", "fixed", "refused", "error"
    default_gbps: float | None = None  # the probe's figures (None when not probed)
    big_gbps: float | None = None
    note: str = ""
    underlay_gso: int | None = None    # pod paths: the node eth0 limit they were probed over
    default_packet: int | None = None  # mean size of the packets the receiver got (bytes)
    big_packet: int | None = None


@dataclass
class Decision:
    paths: dict[str, PathDecision] = field(default_factory=dict)
    host: str = ""            # kernel release / boot id the figures belong to
    probe_ms: float | None = None   # what the probe cost (this process's, or the cached one's)

    def as_dict(self) -> dict:
        return {"host": self.host, "probe_ms": self.probe_ms,
                "paths": {p: asdict(d) for p, d in self.paths.items()}}


_lock = threading.RLock()
_state: dict[str, Decision | bool | None] = {"decision": None, "refused": False, "disabled": False}


def host_key() -> str:
    """What the figures are valid for: this kernel build, this boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "unknown"
    return f"{os.uname().release}/{boot}"


def cache_path() -> str:
    """``$NETBAY_BIG_TCP_CACHE``, else ``/run/netbay/bigtcp.json`` (tmpfs: gone at reboot)."""
    return os.environ.get(CACHE_ENV) or "/run/netbay/bigtcp.json"


def _setting() -> dict[str, str]:
    """Path -> "on" / "off" / "auto" / "probe" from ``$NETBAY_BIG_TCP``."""
    raw = (os.environ.get(ENV) or "auto").strip().lower()
    if "=" not in raw:
        if raw not in ("auto", "probe", "on", "off"):
            raise ValueError(f"{ENV}={raw!r}: expected auto, probe, on, off or path=on|off,...")
        return dict.fromkeys(PATHS, raw)
    out = dict.fromkeys(PATHS, "auto")
    for item in raw.split(","):
        path, _, value = item.strip().partition("=")
        if path not in PATHS or value not in ("on", "off", "auto", "probe"):
            raise ValueError(f"{ENV}: {item!r}: expected one of {', '.join(PATHS)} = on|off|auto|probe")
        out[path] = value
    return out


def _load_cache(key: str) -> tuple[dict[str, PathDecision], float | None]:
    try:
        with open(cache_path()) as f:
            data = json.load(f)
        if data.get("version") != CACHE_VERSION or data.get("host") != key:
            return {}, None
        return ({p: PathDecision(**{**d, "source": "cache"}) for p, d in data["paths"].items() if p in PROBED},
                data.get("probe_ms"))
    except (OSError, ValueError, TypeError, KeyError):
        return {}, None


def _save_cache(key: str, paths: dict[str, PathDecision], probe_ms: float) -> None:
    path = cache_path()
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"version": CACHE_VERSION, "host": key, "probe_ms": probe_ms,
                       "paths": {p: asdict(d) for p, d in paths.items()}}, f)
        os.replace(tmp, path)
    except OSError as exc:
        log.info("BIG TCP: cannot remember the probe in %s (%s)", path, exc)


def decide(*, probe: bool = True) -> Decision:
    """The per-path decision for this process: the setting, else the per-host cache,
    else (``probe``) a fresh measurement, written to the cache. Called at agent start;
    later calls return the same decision."""
    with _lock:
        found = _state["decision"]
        if isinstance(found, Decision):
            return found
        setting = _setting()
        key = host_key()
        result = Decision(host=key)
        cached, result.probe_ms = ({}, None) if "probe" in setting.values() else _load_cache(key)
        measured: dict[str, PathDecision] = {}
        t0 = time.monotonic()
        # The fabric first: a cluster node's eth0 is a fabric port, so the pod paths are
        # probed (and their cache entries valid) over an eth0 with the fabric's limit.
        _resolve(result, ["fabric"], setting, cached, measured, probe, None)
        underlay = GSO_MAX_SIZE if result.paths["fabric"].big else None
        stale = [p for p in ("pod-bridged", "pod-routed") if p in cached and cached[p].underlay_gso != underlay]
        for p in stale:
            del cached[p]
        _resolve(result, ["pod-bridged", "pod-routed"], setting, cached, measured, probe, underlay)
        for path, why in NOT_PROBED.items():
            result.paths[path] = PathDecision(False, "fixed", note=why)
        if measured:
            result.probe_ms = round((time.monotonic() - t0) * 1e3, 1)
            if all(d.source == "probe" for d in measured.values()):
                _save_cache(key, {**cached, **measured}, result.probe_ms)
        _state["decision"] = result
        for path, d in result.paths.items():
            log.info("BIG TCP on %s: %s (%s%s)", path, "on" if d.big else "off", d.source,
                     f", {d.default_gbps} vs {d.big_gbps} Gbit/s" if d.big_gbps is not None else "")
        return result


def _resolve(result: Decision, paths: list[str], setting: dict[str, str], cached: dict[str, PathDecision],
             measured: dict[str, PathDecision], probe: bool, underlay: int | None) -> None:
    """Decide ``paths`` into ``result``: the setting, else the cache, else a probe."""
    todo = [p for p in paths if setting[p] in ("auto", "probe") and p not in cached]
    if todo and probe:
        measured.update(_measure(todo, underlay))
    for p in paths:
        known = cached.get(p)
        if setting[p] in ("on", "off"):   # the figures stay visible beside the override
            result.paths[p] = PathDecision(setting[p] == "on", "setting", known.default_gbps if known else None,
                                           known.big_gbps if known else None, f"{ENV}={setting[p]}")
        else:
            result.paths[p] = measured.get(p) or known or PathDecision(
                False, "error", note="not probed (no root?); kernel default")


def _measure(paths: list[str], underlay: int | None) -> dict[str, PathDecision]:
    from netbay.dataplane import gsoprobe   # imports links/rtnl: only when probing
    try:
        figures = gsoprobe.measure(paths, GSO_MAX_SIZE, underlay_gso=underlay)
    except Exception as exc:  # noqa: BLE001 - a failed probe must not stop the agent
        log.warning("BIG TCP probe failed (%s); using the kernel's default GSO limit", exc)
        return {p: PathDecision(False, "error", note=f"probe failed: {exc}") for p in paths}
    out = {}
    for p in paths:
        f = figures[p]
        out[p] = PathDecision(f.whole and f.big_gbps >= f.default_gbps * SPEED_FLOOR, "probe",
                              f.default_gbps, f.big_gbps, default_packet=f.default_packet, big_packet=f.big_packet,
                              underlay_gso=underlay if p != "fabric" else None,
                              note="" if p == "fabric" else f"node eth0 at {underlay or KERNEL_DEFAULT}")
    return out


def gso_max_size(path: str) -> int | None:
    """The GSO limit to ask for on a new veth of ``path`` (one of :data:`PATHS`), or
    None for the kernel's default."""
    if path not in PATHS:
        raise ValueError(f"unknown path {path!r}; one of {', '.join(PATHS)}")
    if _state["refused"] or _state["disabled"]:
        return None
    return GSO_MAX_SIZE if decide().paths[path].big else None


def refused(exc: OSError, asked: int | None) -> bool:
    """True (and BIG TCP off from now on) if ``exc`` is the kernel refusing ``asked``:
    the caller then makes the link again without it."""
    if asked and getattr(exc, "errno", None) in (errno.EINVAL, errno.ERANGE):
        log.info("kernel refuses GSO packets of %d bytes (%s); using its default", asked, exc)
        _state["refused"] = True
        return True
    return False


def force(decisions: dict[str, bool] | None) -> None:
    """Set the decision per path without probing (tests, benchmarks); None forgets it,
    so the next use decides again (setting, cache, probe)."""
    with _lock:
        if decisions is None:
            _state["decision"] = None
            return
        unknown = set(decisions) - set(PATHS)
        if unknown:
            raise ValueError(f"unknown paths {sorted(unknown)}")
        _state["decision"] = Decision(host=host_key(), paths={
            p: PathDecision(decisions.get(p, False) if p not in NOT_PROBED else False, "setting",
                            note="forced") for p in PATHS})


def disable() -> None:
    """Use the kernel's default on every path from now on (benchmarks compare both)."""
    _state["disabled"] = True


def enable() -> None:
    """Back to the per-path decision (after :func:`disable`)."""
    _state["disabled"] = False


__all__ = ["GSO_MAX_SIZE", "PATHS", "Decision", "PathDecision", "cache_path", "decide", "disable",
           "enable", "force", "gso_max_size", "refused"]
