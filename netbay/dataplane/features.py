"""What this host's kernel can do for the embedded dataplane (for ``netbay doctor``).

Two sources, as the design asks: the kernel's build configuration
(``/proc/config.gz``, else ``/boot/config-$(uname -r)``) and a probe — create and
delete a test object of that kind inside a throwaway namespace ``nb-probe-<pid>``,
which is deleted afterwards. The probe is authoritative when it runs (a feature
built as a module shows up only when the module loads; a config file may be
stale); without root the config alone answers.

Probing may make the kernel autoload modules (``rtnl-link-<kind>``), as using the
feature would. Nothing is created outside the probe namespace.

    >>> from netbay.dataplane import features
    >>> features.detect()["vxlan"]
    Feature(available=True, how='probe', detail='CONFIG_VXLAN=y; created a link of kind vxlan')
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from pyroute2.netlink.exceptions import NetlinkError

from netbay.dataplane import links, netns
from netbay.dataplane.nft import Nft, NftError, NftUnavailable

__all__ = ["Feature", "FEATURES", "detect", "kernel_config", "probe_namespace"]


class Feature(NamedTuple):
    available: bool
    how: str          # "probe" or "config"
    detail: str


@dataclass(frozen=True)
class _Spec:
    name: str
    config: tuple[str, ...]            # every option needed (y or m)
    probe: Callable[[_Probe], str]     # returns what it did; raises if unavailable
    help: str


class _ProbeFailed(Exception):
    pass


# --- kernel configuration ----------------------------------------------------------


def kernel_config(path: str | None = None) -> dict[str, str] | None:
    """``{"CONFIG_X": "y"|"m"|"n"|value}`` from the kernel's config, or None if absent.

    "n" stands for "is not set".
    """
    candidates = [path] if path else ["/proc/config.gz", f"/boot/config-{os.uname().release}"]
    for p in candidates:
        if not p or not os.path.exists(p):
            continue
        try:
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rt", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        cfg: dict[str, str] = {}
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("CONFIG_") and "=" in line:
                k, v = line.split("=", 1)
                cfg[k] = v.strip('"')
            elif line.startswith("# CONFIG_") and line.endswith(" is not set"):
                cfg[line[2:-len(" is not set")]] = "n"
        return cfg
    return None


def _config_verdict(cfg: dict[str, str] | None, options: tuple[str, ...]) -> tuple[bool | None, str]:
    if cfg is None:
        return None, "no kernel config available"
    parts, ok = [], True
    for opt in options:
        v = cfg.get(opt, "n")
        parts.append(f"{opt}={v}" if v != "n" else f"{opt} is not set")
        ok = ok and v in ("y", "m")
    return ok, ", ".join(parts)


# --- probes --------------------------------------------------------------------------


class _Probe:
    """State shared by the probes of one run: the namespace and helper links."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self._n = 0
        self._parent: int | None = None
        self._nft: Nft | None = None

    def name(self) -> str:
        self._n += 1
        return f"nbp{self._n}"

    def link(self, kind: str, **kw: object) -> str:
        name = self.name()
        ipr = links.ipr(self.ns)
        try:
            ipr.link("add", ifname=name, kind=kind, **kw)
        except NetlinkError as exc:
            raise _ProbeFailed(f"creating a link of kind {kind} failed: {os.strerror(exc.code)}"
                               f" ({errno.errorcode.get(exc.code, exc.code)})") from None
        with contextlib.suppress(NetlinkError):
            ipr.link("del", ifname=name)
        return f"created a link of kind {kind}"

    def parent(self) -> int:
        """An Ethernet-like link to stack vlan/macvlan on (one end of a veth pair)."""
        if self._parent is None:
            try:
                self._parent = links.veth_pair(self.ns, "nbp-par0", self.ns, "nbp-par1")
            except OSError as exc:
                raise _ProbeFailed(f"no parent link (veth unavailable: {exc})") from None
        return self._parent

    def nft(self) -> Nft:
        if self._nft is None:
            try:
                self._nft = Nft(self.ns)
            except NftUnavailable as exc:
                raise _ProbeFailed(str(exc)) from None
        return self._nft

    def nft_run(self, what: str, cmd: str) -> str:
        try:
            self.nft().run(cmd)
        except NftError as exc:
            raise _ProbeFailed(f"{what} refused: {exc.error.splitlines()[0] if exc.error else exc}") from None
        return what


def _p_kind(kind: str, **kw: object) -> Callable[[_Probe], str]:
    return lambda p: p.link(kind, **kw)


def _p_stacked(kind: str, **kw: object) -> Callable[[_Probe], str]:
    return lambda p: p.link(kind, link=p.parent(), **kw)


def _p_veth(p: _Probe) -> str:
    p.parent()
    return "created a veth pair"


def _p_br_netfilter(p: _Probe) -> str:
    p.link("bridge")
    key = "net.bridge.bridge-nf-call-iptables"
    try:
        links.read_sysctl(p.ns, key)
    except OSError:
        raise _ProbeFailed(f"{key} is absent in a namespace with a bridge "
                           "(br_netfilter not loaded: modprobe br_netfilter)") from None
    return f"{key} present in a namespace"


def _p_nf_tables(p: _Probe) -> str:
    return p.nft_run("an inet table and a forward chain",
                     "add table inet nbprobe; add chain inet nbprobe c_forward "
                     "{ type filter hook forward priority 0; policy accept; }")


def _p_nat(p: _Probe) -> str:
    _p_nf_tables(p)
    return p.nft_run("a nat chain with masquerade, snat and dnat",
                     "add chain inet nbprobe c_post { type nat hook postrouting priority 100; }; "
                     "add chain inet nbprobe c_pre { type nat hook prerouting priority -100; }; "
                     "add rule inet nbprobe c_post ip saddr 10.255.0.0/24 masquerade; "
                     "add rule inet nbprobe c_post ip saddr 10.255.1.0/24 snat ip to 10.255.2.1; "
                     "add rule inet nbprobe c_pre ip daddr 10.255.2.2 dnat ip to 10.255.0.2")


def _p_conntrack(p: _Probe) -> str:
    _p_nf_tables(p)
    return p.nft_run("ct state and ct zone rules",
                     "add rule inet nbprobe c_forward ct state established,related accept; "
                     "add chain inet nbprobe c_raw { type filter hook prerouting priority -300; }; "
                     "add rule inet nbprobe c_raw ct zone set 1")


def _p_ipvs(p: _Probe) -> str:
    from pyroute2.netlink.generic import GenericNetlinkSocket

    with netns.entered(p.ns):
        sock = GenericNetlinkSocket()
    try:
        sock.get_protocol_id("IPVS")
    except Exception:  # noqa: BLE001 - pyroute2 raises several types for "no such family"
        raise _ProbeFailed("no IPVS generic netlink family") from None
    finally:
        sock.close()
    return "IPVS generic netlink family present"


FEATURES: tuple[_Spec, ...] = (
    _Spec("veth", ("CONFIG_VETH",), _p_veth, "veth pairs (every port)"),
    _Spec("bridge", ("CONFIG_BRIDGE",), _p_kind("bridge"), "Linux bridges (every network)"),
    _Spec("vxlan", ("CONFIG_VXLAN",), _p_kind("vxlan", vxlan_id=42), "VXLAN overlays"),
    _Spec("ipip", ("CONFIG_NET_IPIP",), _p_kind("ipip"), "IP-in-IP tunnels (calico ipip)"),
    _Spec("gre", ("CONFIG_NET_IPGRE",), _p_kind("gre"), "GRE tunnels"),
    _Spec("geneve", ("CONFIG_GENEVE",),
          _p_kind("geneve", geneve_id=42, geneve_remote="10.255.255.1"), "Geneve overlays"),
    _Spec("wireguard", ("CONFIG_WIREGUARD",), _p_kind("wireguard"), "WireGuard tunnels"),
    _Spec("vlan", ("CONFIG_VLAN_8021Q",), _p_stacked("vlan", vlan_id=42), "802.1Q VLANs"),
    _Spec("macvlan", ("CONFIG_MACVLAN",), _p_stacked("macvlan", macvlan_mode=4),
          "macvlan devices"),
    _Spec("vrf", ("CONFIG_NET_VRF",), _p_kind("vrf", vrf_table=100), "VRF devices"),
    _Spec("br_netfilter", ("CONFIG_BRIDGE_NETFILTER",), _p_br_netfilter,
          "bridged traffic through inet hooks (security groups)"),
    _Spec("nf_tables", ("CONFIG_NF_TABLES", "CONFIG_NF_TABLES_INET"), _p_nf_tables,
          "nftables"),
    _Spec("nft_nat", ("CONFIG_NFT_NAT", "CONFIG_NFT_MASQ"), _p_nat,
          "nftables NAT and masquerade (routers, floating IPs, load balancers)"),
    _Spec("conntrack", ("CONFIG_NF_CONNTRACK", "CONFIG_NFT_CT"), _p_conntrack,
          "connection tracking from nftables (stateful security groups)"),
    _Spec("ipvs", ("CONFIG_IP_VS",), _p_ipvs, "IPVS"),
)

_detect_lock = threading.Lock()


def probe_namespace() -> str:
    return f"{netns.PREFIX}probe-{os.getpid()}"


def _can_probe() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "not root"
    return True, ""


def detect(probe: bool = True, *, only: Iterable[str] | None = None,
           config_path: str | None = None) -> dict[str, Feature]:
    """``{feature: Feature(available, how, detail)}`` for :data:`FEATURES` (or ``only``)."""
    specs = [s for s in FEATURES if only is None or s.name in set(only)]
    cfg = kernel_config(config_path)
    result: dict[str, Feature] = {}
    can, why = _can_probe() if probe else (False, "probing disabled")
    if not can:
        for s in specs:
            ok, detail = _config_verdict(cfg, s.config)
            result[s.name] = Feature(bool(ok), "config",
                                     detail if ok is not None else f"unknown: {detail}, {why}")
        return result
    with _detect_lock:
        ns = probe_namespace()
        netns.delete(ns)  # a leftover of a crashed run with the same pid
        netns.create(ns)
        try:
            p = _Probe(ns)
            for s in specs:
                ok, cdetail = _config_verdict(cfg, s.config)
                try:
                    did = s.probe(p)
                    result[s.name] = Feature(True, "probe", f"{cdetail}; {did}")
                except _ProbeFailed as exc:
                    result[s.name] = Feature(False, "probe", f"{cdetail}; {exc}")
                except OSError as exc:
                    result[s.name] = Feature(False, "probe", f"{cdetail}; probe error: {exc}")
        finally:
            netns.delete(ns)
    return result
