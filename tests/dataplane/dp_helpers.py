"""Helpers shared by the dataplane tests (imported by conftest.py and the tests).

The run id is kept in the environment (keyed by pid) so that every import of this
module in one pytest process agrees on it, whatever name it was imported under.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from tests import zygote

RUN_ID = os.environ.setdefault(f"NETBAY_TEST_RUN_ID_{os.getpid()}", secrets.token_hex(3))
PREFIX = f"nbt{RUN_ID}-"

# Things other software on a shared host creates in the root namespace while we run
# (dockerd, podman/CNI). A difference matching this is reported, not failed — unless
# it carries this run's id or our prefixes or addresses.
FOREIGN = re.compile(r"\b(nbt[0-9a-f]{6}\w*|docker\d*|br-[0-9a-f]{12}|veth[0-9a-f]{4,}|cni\w*|podman\w*|"
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
    """This run's, or the product's: a link of another test run (``nbt<other id>``, e.g. a
    veth the peers' tests create for Docker to move while this run ends) is foreign."""
    return (RUN_ID in line or (" nbt" in line and not re.search(r" nbt[0-9a-f]{6}", line))
            or " nb-" in line or "nbprobe" in line
            or re.search(r"\b10\.(0|1|2|9)\.\d+\.\d+", line) is not None)


def _alongside(line: str) -> bool:
    """A container end (``nbc…``) waiting for Docker to move it, while other tests run
    beside this process (pytest-xdist's other workers, or ``NETBAY_TEST_ALONGSIDE``):
    theirs or ours cannot be told by name, so it is reported, not failed (run alone,
    it fails)."""
    beside = (int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
              or bool(os.environ.get("NETBAY_TEST_ALONGSIDE")))
    return beside and re.search(r"\bnbc[0-9a-f]{11}\b", line) is not None


def diff_snapshots(before: dict[str, set[str]], after: dict[str, set[str]]
                   ) -> tuple[list[str], list[str]]:
    """(failures, foreign changes) between two :func:`root_snapshot` results."""
    bad, foreign = [], []
    for key in before:
        for sign, lines in (("+", after[key] - before[key]), ("-", before[key] - after[key])):
            for line in sorted(lines):
                entry = f"{key}: {sign} {line}"
                if (FOREIGN.search(line) and not _ours(line)) or _alongside(line):
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


def ping(ns: str, dst: str, timeout: float = 1.0, count: int = 1) -> bool:
    """ICMP echo from inside ``ns`` to ``dst``, in-process: the product's own probe
    (:func:`netbay.dataplane.probe.ping`, a raw socket opened inside ``ns``). True if
    any of ``count`` requests got its reply. (iputils-ping is not installed here.)"""
    from netbay.dataplane import probe

    return probe.ping(ns, dst, timeout, count)


def ip_version(address: str) -> int:
    """4 or 6 (an address, with or without its prefix length)."""
    return ipaddress.ip_interface(address).version


def fixed_ip(port: dict, version: int) -> str:
    """The port's first fixed IP of IP ``version``."""
    return next(f["ip_address"] for f in port["fixed_ips"] if ip_version(f["ip_address"]) == version)


def ip_netns_exec(ns: str, *cmd: str, timeout: float = 10) -> subprocess.CompletedProcess:
    """``ip netns exec NS CMD`` (tests only: proves iproute2 sees our namespaces)."""
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          timeout=timeout)


def serving(sock: Path, proc: subprocess.Popen, log: Path) -> bool:
    """Whether the daemon ``proc`` (still alive, else its log's tail fails the test)
    accepts connections on its Unix socket ``sock``."""
    import socket

    assert proc.poll() is None, log.read_text()[-3000:]
    if not sock.is_socket():
        return False
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


def netbay_up(data_dir: Path, port: int, prefix: str, env: dict, log: Path) -> subprocess.Popen:
    """``netbay up`` with its agent on ``prefix``, as a child process writing to ``log``
    (appended: a restarted server's lines follow the killed one's)."""
    return zygote.popen(
        [sys.executable, "-m", "netbay.cli.main", "up", "--port", str(port), "--data-dir", str(data_dir),
         "--agent", "--agent-prefix", prefix], env=env,
        stdout=open(log, "a"), stderr=subprocess.STDOUT)
