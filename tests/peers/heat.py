"""OpenStack Heat from PyPI, for checking netbay's HOT export with Heat's own code.

Installed once per machine into a virtualenv of its own (``$NETBAY_HEAT_DIR``,
default ``~/.cache/netbay/openstack-heat``), pinned to the release of the same
OpenStack series as the peers' Keystone and Neutron (``openstack_cloud.PINS``),
under a file lock so parallel runs share one install.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

PINS = ("openstack-heat==27.0.1",)
INSTALL_TIMEOUT = 1500


def heat_dir() -> Path:
    return Path(os.environ.get("NETBAY_HEAT_DIR", Path.home() / ".cache" / "netbay" / "openstack-heat"))


def install() -> Path:
    """Heat's virtualenv, made on first use."""
    root = heat_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv, stamp = root / "venv", root / "installed"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == "\n".join(PINS):
            return venv
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *PINS],
                       check=True, timeout=INSTALL_TIMEOUT)
        stamp.write_text("\n".join(PINS))
    return venv
