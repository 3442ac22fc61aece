"""Install ``netbay-cni`` where CNI runtimes look for plugins (``CNI_PATH``).

The launcher runs this Python with ``-I -S`` (no ``site``, no user paths) and puts
the directory netbay is installed in first on ``sys.path``: ``site`` with an editable
install's path finder costs tens of milliseconds per call, more than the rest of an
ADD; the client needs nothing from it (standard library only).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

NAME = "netbay-cni"


def script(python: str | None = None) -> str:
    import netbay

    root = Path(netbay.__file__).resolve().parent.parent
    return (f"#!{python or sys.executable} -IS\n"
            f"import sys\nsys.path.insert(0, {str(root)!r})\n"
            "from netbay.plugins.cni.client import main\nmain()\n")


def install(bin_dir: Path, name: str = NAME) -> Path:
    """Write ``bin_dir/name`` atomically (a runtime may be executing the old one)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / name
    tmp = bin_dir / f".{name}.{os.getpid()}"
    tmp.write_text(script())
    tmp.chmod(0o755)
    os.replace(tmp, target)
    return target
