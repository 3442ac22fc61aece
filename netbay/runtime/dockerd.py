"""A private dockerd kept off the host's network, and a ``busybox`` image — for the
tests, the benchmarks and the demo.

dockerd (Debian's docker.io) runs with ``--bridge=none --iptables=false
--ip6tables=false --ip-forward=false --ip-masq=false``: it makes no bridge, no
iptables rule and no sysctl change in the root namespace. Its data root, exec root,
pidfile, socket and config file are in a temp dir of its own (several may run on
one host); it starts its own managed containerd under the exec root. With ``netns``
it runs inside that network namespace (``nsenter --net``, once at start): a baseline
dockerd using Docker's own bridge driver touches only that namespace. It is stopped
by PID and its temp dir removed, also when the caller fails.

Plugin discovery does not follow ``--exec-root``: dockerd 20.10 looks for
``/run/docker/plugins/<name>.sock`` whatever its exec root (checked by
tests/dataplane/test_dp_docker.py), so tests name their plugin per run.

The image: there is no registry here, so ``busybox`` is Debian's busybox-static
binary with an applet symlink for each command the tests run, ``docker import``-ed.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker

BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "ip", "ping", "nc", "sleep", "cat", "echo", "true", "ifconfig", "wget", "httpd", "hostname")
IMAGE = "busybox:netbay-test"
API_VERSION = "1.41"  # Docker 20.10
FLAGS = ("--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
         "--storage-driver=vfs", "--userland-proxy=false")


@dataclass
class Dockerd:
    root: Path
    proc: subprocess.Popen
    client: docker.DockerClient

    @property
    def host(self) -> str:
        return f"unix://{self.root / 'docker.sock'}"

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """The docker CLI against this daemon (for what a user sees)."""
        return subprocess.run([shutil.which("docker") or "docker", *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "DOCKER_HOST": self.host})

    def log(self) -> str:
        return (self.root / "dockerd.log").read_text(errors="replace")[-4000:]


def available() -> str | None:
    """Why dockerd tests cannot run here (None: they can)."""
    if shutil.which("dockerd") is None:
        return "dockerd not installed (Debian docker.io; scripts/setup.sh installs it)"
    if not os.path.exists(BUSYBOX):
        return "busybox-static not installed"
    return None


def busybox_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(BUSYBOX, arcname="bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    return buf.getvalue()


def start(timeout: float = 60.0, *, netns: str | None = None) -> Dockerd:
    root = Path(tempfile.mkdtemp(prefix="nbd-", dir="/tmp"))  # short: unix socket paths
    (root / "daemon.json").write_text("{}")
    inside = ["nsenter", f"--net=/run/netns/{netns}", "--"] if netns else []
    cmd = [*inside, "dockerd", f"--config-file={root / 'daemon.json'}", *FLAGS, f"--data-root={root / 'data'}",
           f"--exec-root={root / 'exec'}", f"--pidfile={root / 'docker.pid'}", f"-H=unix://{root / 'docker.sock'}"]
    # TMPDIR: containerd writes its goroutine dumps (containerd.<pid>.stacks.log, on a
    # SIGUSR1) there; under root they go with it, not into /tmp for ever.
    proc = subprocess.Popen(cmd, stdout=open(root / "dockerd.log", "w"), stderr=subprocess.STDOUT,  # noqa: SIM115 - the child process writes it while it runs
                            start_new_session=True, env={**os.environ, "TMPDIR": str(root)})
    d = Dockerd(root, proc, None)  # the client comes next, inside the try
    deadline = time.monotonic() + timeout
    try:
        # A fixed API version: the SDK would otherwise ask the (not yet listening) daemon.
        client = d.client = docker.DockerClient(base_url=f"unix://{root / 'docker.sock'}", version=API_VERSION,
                                                timeout=60)
        for _ in range(int(timeout / 0.1) + 1):
            if proc.poll() is not None:
                raise RuntimeError(f"dockerd exited ({proc.returncode}):\n{d.log()}")
            try:
                client.ping()
                break
            except Exception:  # noqa: BLE001 - not listening yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dockerd not ready after {timeout}s:\n{d.log()}") from None
                time.sleep(0.1)
        client.api.import_image_from_data(busybox_tar(), repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1])
    except BaseException:
        stop(d)
        raise
    return d


def clear(d: Dockerd) -> None:
    """Remove every container and network (best effort). Call it while their network
    plugin still answers: dockerd retries a plugin whose socket is gone for about 30 s
    per call before it gives up."""
    if d.client is None:
        return
    try:
        for c in d.client.containers.list(all=True):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - best effort before stopping
                pass
        for n in d.client.networks.list():
            if n.name not in ("bridge", "host", "none"):
                try:
                    n.remove()
                except Exception:  # noqa: BLE001
                    pass
    except Exception:  # noqa: BLE001 - daemon already gone
        pass


def stop(d: Dockerd, timeout: float = 30.0) -> None:
    """Remove every container and network, stop dockerd by PID, remove its directory."""
    try:
        clear(d)
    finally:
        if d.client is not None:
            d.client.close()
        if d.proc.poll() is None:
            d.proc.send_signal(signal.SIGTERM)
            try:
                d.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(d.proc.pid, signal.SIGKILL)  # dockerd and its managed containerd
                d.proc.wait(timeout=10)
        _unmount_under(d.root)
        shutil.rmtree(d.root, ignore_errors=True)


def _unmount_under(root: Path) -> None:
    """dockerd leaves bind mounts (netns files) under its exec root if killed."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
              if line.split()[1].startswith(str(root))]
    for m in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=10)


def running(timeout: float = 60.0, *, netns: str | None = None) -> Iterator[Dockerd]:
    d = start(timeout, netns=netns)
    try:
        yield d
    finally:
        stop(d)
