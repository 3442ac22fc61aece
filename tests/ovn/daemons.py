"""OVS/OVN daemons run in the foreground inside a test namespace, known by PID.

Every daemon is ``ip netns exec NS <daemon>`` (iproute2 execs the daemon after setns,
so the PID we hold is the daemon's), with OVS_*/OVN_* directories pointing into the
lab's temporary directory so that nothing touches /var/run/openvswitch or /var/run/ovn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.children import die_with_parent

OVS_SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
NB_SCHEMA = Path("/usr/share/ovn/ovn-nb.ovsschema")
SB_SCHEMA = Path("/usr/share/ovn/ovn-sb.ovsschema")
BINARIES = ("ovsdb-server", "ovsdb-tool", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl",
            "ovn-northd", "ovn-controller", "ovn-nbctl", "ovn-sbctl")
DAEMON_NAMES = ("ovsdb-server", "ovs-vswitchd", "ovn-northd", "ovn-controller")


def env_for(rundir: Path) -> dict[str, str]:
    """The environment that keeps a daemon's (and its clients') files in ``rundir``."""
    env = dict(os.environ)
    for var in ("OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR",
                "OVN_RUNDIR", "OVN_DBDIR", "OVN_LOGDIR", "OVN_SYSCONFDIR"):
        env[var] = str(rundir)
    env["OVS_PKGDATADIR"] = str(OVS_SCHEMA.parent)
    env["OVN_PKGDATADIR"] = str(NB_SCHEMA.parent)
    return env


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    log: Path
    ctl: Path  # its unixctl socket (for ovs-appctl -t)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        out = self.log.with_suffix(".out")  # what it said before its log file opened
        text = "".join(f.read_text(errors="replace") for f in (out, self.log) if f.exists())
        return f"--- {self.name} (pid {self.pid}, rc {self.proc.poll()}) ---\n{text[-chars:]}"

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL (by PID only)."""
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def spawn(name: str, ns: str, rundir: Path, argv: list[str], unixctl: bool = True) -> Daemon:
    """Start ``argv`` (a daemon, foreground) in namespace ``ns``; log and control socket
    are ``rundir/name.log`` and ``rundir/name.ctl`` (without ``unixctl``, for daemons
    that lack the option — ovn-controller 23.03 —, the default ``<prog>.<pid>.ctl``)."""
    log = rundir / f"{name}.log"
    ctl_opt = [f"--unixctl={rundir / f'{name}.ctl'}"] if unixctl else []
    with open(rundir / f"{name}.out", "ab") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv, f"--log-file={log}", *ctl_opt, "-vconsole:off"],
            env=env_for(rundir), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)  # noqa: PLW1509 - prctl only, before exec
    ctl = rundir / (f"{name}.ctl" if unixctl else f"{os.path.basename(argv[0])}.{proc.pid}.ctl")
    return Daemon(name, proc, log, ctl)


def ctl(ns: str, rundir: Path, *cmd: str, timeout: float = 30, check: bool = True) -> str:
    """A client (ovs-vsctl, ovn-nbctl, …) run inside ``ns`` too; its stdout, stripped."""
    p = subprocess.run(["ip", "netns", "exec", ns, *cmd], env=env_for(rundir),
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} -> rc {p.returncode}: {p.stderr.strip()}")
    return p.stdout.strip()


def create_db(ns: str, path: Path, schema: Path) -> None:
    """A fresh database file (ovsdb-tool too runs in the lab's namespace, like all of OVS)."""
    ctl(ns, path.parent, "ovsdb-tool", "create", str(path), str(schema))


def wait_for(what: str, predicate, timeout: float, daemons: list[Daemon] = (),
             interval: float = 0.2) -> None:
    """Poll ``predicate`` until true; fail with the daemons' logs if it never is or
    one of them died meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        dead = [d for d in daemons if not d.alive()]
        if dead:
            raise RuntimeError(f"{what}: daemon died\n" + "\n".join(d.tail() for d in dead))
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout}s\n"
                               + "\n".join(d.tail(1500) for d in daemons))
        time.sleep(interval)


def processes_under(path: Path) -> list[tuple[int, str]]:
    """(pid, cmdline) of every OVS/OVN daemon whose command line names ``path``: the
    run's own, whatever started them (the leak check after teardown)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        args = raw.split(b"\0")
        cmdline = " ".join(a.decode(errors="replace") for a in args if a)
        if str(path) in cmdline and any(os.path.basename(a.decode(errors="replace")) in DAEMON_NAMES
                                        for a in args if a):
            found.append((int(entry), cmdline))
    return found
