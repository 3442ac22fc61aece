"""The tests' dockerd: :mod:`netbay.runtime.dockerd` (off the host's network)."""

from netbay.runtime.dockerd import IMAGE, Dockerd, available, clear, running, shutil, start, stop  # noqa: F401
