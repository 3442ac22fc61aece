"""Helpers shared by the dataplane tests (imported by conftest.py and the tests).

The run id is kept in the environment (keyed by pid) so that every import of this
module in one pytest process agrees on it, whatever name it was imported under.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import socket
import struct
import subprocess
import time

RUN_ID = os.environ.setdefault(f"NETBAY_TEST_RUN_ID_{os.getpid()}", secrets.token_hex(3))
PREFIX = f"nbt{RUN_ID}-"

# Things other software on a shared host creates in the root namespace while we run
# (dockerd, podman/CNI). A difference matching this is reported, not failed — unless
# it carries this run's id or our prefixes or addresses.
FOREIGN = re.compile(r"\b(docker\d*|br-[0-9a-f]{12}|veth[0-9a-f]{4,}|cni\w*|podman\w*|"
                     r"flannel\.\d+|cali\w+|netavark\w*|vxlan\.calico)\b|"
                     r"^table (ip|ip6) (filter|nat|raw|mangle|security)$|"
                     r"^table inet netavark$")


# --- host snapshot -------------------------------------------------------------------


def _run(*cmd: str) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return f"<{cmd[0]} not installed>"
    return p.stdout if p.returncode == 0 else f"<rc={p.returncode}> {p.stderr.strip()}"


def _norm(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        line = re.sub(r"\s+(valid_lft|preferred_lft)\s+\S+", "", line)  # lifetimes tick
        line = re.sub(r"\s+", " ", line).strip()
        if line:
            out.add(line)
    return out


def root_snapshot() -> dict[str, set[str]]:
    """The root namespace as seen by iproute2 and nft (lines, normalized)."""
    return {
        "ip -o link": _norm(_run("ip", "-o", "link")),
        "ip -o addr": _norm(_run("ip", "-o", "addr")),
        "ip route": _norm(_run("ip", "route", "show", "table", "all")),
        "ip -6 route": _norm(_run("ip", "-6", "route", "show", "table", "all")),
        "nft list tables": _norm(_run("nft", "list", "tables")),
    }


def _ours(line: str) -> bool:
    return (RUN_ID in line or "nbt" in line or " nb-" in line or "nbprobe" in line
            or re.search(r"\b10\.(0|1|2|9)\.\d+\.\d+", line) is not None)


def diff_snapshots(before: dict[str, set[str]], after: dict[str, set[str]]
                   ) -> tuple[list[str], list[str]]:
    """(failures, foreign changes) between two :func:`root_snapshot` results."""
    bad, foreign = [], []
    for key in before:
        for sign, lines in (("+", after[key] - before[key]), ("-", before[key] - after[key])):
            for line in sorted(lines):
                entry = f"{key}: {sign} {line}"
                if FOREIGN.search(line) and not _ours(line):
                    foreign.append(entry)
                else:
                    bad.append(entry)
    return bad, foreign


def sweep(prefix: str = PREFIX) -> list[str]:
    """Delete every namespace with ``prefix``; returns the names found."""
    from netbay.dataplane import netns

    names = netns.list(prefix)
    for name in names:
        netns.delete(name)
    return names


def ifname(tag: str) -> str:
    """An interface name carrying the run id (so a leak into the root namespace shows)."""
    name = f"{tag}{RUN_ID}"
    assert len(name) <= 15
    return name


# --- traffic -------------------------------------------------------------------------


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(ns: str, dst: str, timeout: float = 1.0, count: int = 1) -> bool:
    """ICMP echo from inside ``ns`` to ``dst``, in-process (a raw socket opened while
    the thread is in ``ns``). True if any of ``count`` requests got its reply.

    (``ip netns exec NS ping`` would do too, but iputils-ping is not installed here.)
    """
    from netbay.dataplane import netns

    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        ident = secrets.randbits(16)
        for seq in range(1, count + 1):
            payload = b"netbay-dataplane-test"
            hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            pkt = struct.pack("!BBHHH", 8, 0, _checksum(hdr + payload), ident, seq) + payload
            s.sendto(pkt, (dst, 0))
            deadline = time.monotonic() + timeout
            for _ in range(200):  # bounded: at most 200 packets read per request
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready, _, _ = select.select([s], [], [], left)
                if not ready:
                    break
                data, addr = s.recvfrom(2048)
                ihl = (data[0] & 0x0F) * 4
                typ, _code, _ck, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
                if typ == 0 and rid == ident and rseq == seq and addr[0] == dst:
                    return True
        return False
    finally:
        s.close()


def ip_netns_exec(ns: str, *cmd: str, timeout: float = 10) -> subprocess.CompletedProcess:
    """``ip netns exec NS CMD`` (tests only: proves iproute2 sees our namespaces)."""
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          timeout=timeout)
