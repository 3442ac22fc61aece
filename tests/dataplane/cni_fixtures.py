"""Fixtures for the CNI plugin: ``netbay cni-daemon`` as a child process, the
``netbay-cni`` launcher in a bin dir of this run, and a way to call any CNI plugin
(netbay-cni or a reference plugin such as ``bridge``) the way a runtime does — env,
config on stdin, result on stdout. Used by test_dp_cni.py, test_dp_k8s.py (the
fixtures ``bin_dir`` and ``daemon``, on the module's ``cloud``) and bench/cni_add.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from netbay.plugins.cni.launcher import install

from .dp_helpers import serving
from tests import zygote

REFERENCE_DIR = Path("/usr/lib/cni")


def reference_available() -> str | None:
    """Why the reference plugins cannot be compared here (None: they can)."""
    if not (REFERENCE_DIR / "bridge").exists():
        return "containernetworking-plugins not installed (scripts/setup.sh installs it)"
    return None


@dataclass
class Call:
    rc: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out) if self.out.strip() else None

    @property
    def code(self) -> int | None:
        body = self.json
        return body.get("code") if isinstance(body, dict) else None


def invoke(plugin: Path, command: str, conf: dict[str, Any] | bytes | None, *, container: str = "",
           netns: str = "", ifname: str = "eth0", args: str = "", cni_path: str = "",
           run_in: str | None = None, timeout: float = 60, extra_env: dict[str, str] | None = None) -> Call:
    """Run ``plugin`` as a runtime would. ``run_in``: a netns name to run it in (the
    reference ``bridge`` makes its bridge in the namespace it runs in: never the host's).
    Empty values are left out of the environment (to test their absence)."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": container, "CNI_NETNS": netns, "CNI_IFNAME": ifname,
           "CNI_ARGS": args, "CNI_PATH": cni_path or f"{plugin.parent}:{REFERENCE_DIR}", **(extra_env or {})}
    env = {k: v for k, v in env.items() if v}
    env["PATH"] = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    stdin = conf if isinstance(conf, bytes) else (json.dumps(conf).encode() if conf is not None else b"")
    cmd = [str(plugin)]
    if run_in:
        cmd = ["nsenter", f"--net=/run/netns/{run_in}", "--", *cmd]
    p = subprocess.run(cmd, input=stdin, env=env, capture_output=True, timeout=timeout)
    return Call(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))


class Daemon:
    """``netbay cni-daemon`` as a child process, stopped (or killed) by PID."""

    def __init__(self, sock: Path, url: str, prefix: str, env: dict[str, str], log: Path,
                 extra: tuple[str, ...] = ()) -> None:
        self.sock, self.url, self.prefix, self.env, self.log = sock, url, prefix, env, log
        self.extra = extra  # e.g. ("--backend", "openstack", "--os-cloud", NAME)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> Daemon:
        self.proc = zygote.popen(
            [sys.executable, "-m", "netbay.cli.main", "cni-daemon", "--socket", str(self.sock), "--url", self.url,
             "--prefix", self.prefix, *self.extra], env=self.env, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)  # noqa: SIM115 - the child process writes it while it runs
        deadline = time.monotonic() + timeout
        while not self._listening():
            assert time.monotonic() < deadline, f"cni-daemon not listening:\n{self.log.read_text()[-3000:]}"
            time.sleep(0.05)
        return self

    def _listening(self) -> bool:
        assert self.proc is not None
        return serving(self.sock, self.proc, self.log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bin dir with the ``netbay-cni`` launcher ``netbay cni-install`` writes."""
    d = tmp_path_factory.mktemp("cnibin")
    install(d)
    return d


@pytest.fixture(scope="module")
def daemon(cloud: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:  # a Cloud
    """``netbay cni-daemon`` on the module's ``cloud`` (its server and prefix)."""
    from .docker_fixtures import plugin_env

    d = tmp_path_factory.mktemp("cnid")
    dm = Daemon(d / "cni.sock", cloud.server.url, cloud.names.prefix, plugin_env(cloud.server), d / "daemon.log")
    dm.start()
    try:
        yield dm
    finally:
        dm.stop()


def netbay_conf(name: str, network: str | None, sock: Path, version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    """One plugin's configuration as a runtime hands it over (``name`` injected;
    ``network`` None: none, e.g. with ``cluster``)."""
    return {"cniVersion": version, "name": name, "type": "netbay-cni", "socket": str(sock),
            **({"network": network} if network is not None else {}), **extra}


def bridge_conf(name: str, cidr: str, data_dir: Path, version: str = "1.0.0", bridge: str = "nbtbr0") -> dict:
    return {"cniVersion": version, "name": name, "type": "bridge", "bridge": bridge, "isGateway": True,
            "ipam": {"type": "host-local", "subnet": cidr, "dataDir": str(data_dir),
                     "routes": [{"dst": "0.0.0.0/0"}]}}


class Podman:
    """podman (Debian's, rootful) on the CNI backend, confined to ``root``: its own
    storage (vfs), run root, tmp dir and containers.conf; it sees only the CNI network
    configs in ``root/net.d`` (never /etc/cni/net.d) and finds plugins in ``plugin_dir``
    then the reference dir. Containers run only on networks written here: no default
    network is ever set up. :meth:`close` removes every container and the directory.

    podman runs CNI plugins in the host's namespace: give it netbay-cni networks only
    (which make nothing there), never a reference plugin (bridge would build there)."""

    IMAGE = "localhost/busybox:netbay-test"

    def __init__(self, root: Path, plugin_dir: Path) -> None:
        self.root = root
        for d in ("net.d", "storage", "run", "tmp"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "containers.conf").write_text(
            '[containers]\nnetns = "private"\n'
            'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
            f'[network]\nnetwork_backend = "cni"\ncni_plugin_dirs = ["{plugin_dir}", "{REFERENCE_DIR}"]\n'
            f'network_config_dir = "{root / "net.d"}"\ndefault_network = "nbt-unused"\n'
            f'[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
            f'events_logfile_path = "{root / "events.log"}"\ntmp_dir = "{root / "tmp"}"\nruntime = "runc"\n')
        self.env = {**os.environ, "CONTAINERS_CONF": str(root / "containers.conf")}
        # libcni's result cache is not configurable in podman 4.3: /var/lib/cni (removed
        # again by close() if this made it and it is empty)
        self.made_cache = not os.path.exists("/var/lib/cni")

    def cli(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        cmd = ["podman", "--root", str(self.root / "storage"), "--runroot", str(self.root / "run"),
               "--storage-driver", "vfs", *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)
        if check:
            assert p.returncode == 0, f"{' '.join(args)}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
        return p

    def import_busybox(self) -> None:
        from netbay.runtime.dockerd import busybox_tar

        tar = self.root / "busybox.tar"
        tar.write_bytes(busybox_tar())
        self.cli("import", str(tar), self.IMAGE)

    def network(self, name: str, plugins: list[dict[str, Any]], version: str = "1.0.0") -> Path:
        path = self.root / "net.d" / f"{name}.conflist"
        path.write_text(json.dumps({"cniVersion": version, "name": name, "plugins": plugins}))
        return path

    def close(self) -> None:
        try:
            self.cli("rm", "--all", "--force", "--time", "0", check=False, timeout=120)
        finally:
            mounts = [ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines()
                      if ln.split()[1].startswith(str(self.root))]
            for m in sorted(mounts, key=len, reverse=True):
                subprocess.run(["umount", "-l", m], capture_output=True, timeout=10)
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)
            if self.made_cache:
                for d in ("/var/lib/cni/results", "/var/lib/cni"):
                    with contextlib.suppress(OSError):
                        os.rmdir(d)


def podman_available() -> str | None:
    import shutil

    if shutil.which("podman") is None:
        return "podman not installed (scripts/setup.sh installs it)"
    return reference_available()
