"""Install ``netbay-cni`` where CNI runtimes look for plugins (``CNI_PATH``).

A runtime forks the plugin for every call, so its start is part of every ADD. The
preferred launcher is ``launcher.c`` compiled here with the host's C compiler (a
~1 ms start, as a Go plugin's): it speaks the daemon's frame itself and leaves only
the unusual cases to :mod:`.client`. Without a compiler (or when asked), the launcher
is a script running this Python with ``-I -S`` (no ``site``, no user paths; ``site``
with an editable install's path finder costs tens of milliseconds per call) and the
directory netbay is installed in first on ``sys.path``: ~10-15 ms of interpreter start.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from netbay.plugins.cni.client import DEFAULT_SOCKET, MAX_STDIN, TIMEOUT, VERSION

NAME = "netbay-cni"
SOURCE = Path(__file__).with_name("launcher.c")
COMPILE_TIMEOUT = 120.0
log = logging.getLogger(__name__)


def _root() -> str:
    import netbay

    return str(Path(netbay.__file__).resolve().parent.parent)


def script(python: str | None = None) -> str:
    return (f"#!{python or sys.executable} -IS\n"
            f"import sys\nsys.path.insert(0, {_root()!r})\n"
            "from netbay.plugins.cni.client import main\nmain()\n")


def c_string(text: str) -> str:
    """``text`` as a C string literal (octal escapes for all but plain ASCII)."""
    out = []
    for byte in text.encode():
        ch = chr(byte)
        out.append(ch if 0x20 <= byte < 0x7F and ch not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_source(python: str | None = None) -> str:
    """``launcher.c`` with this installation's settings defined before it."""
    settings = {"NB_PYTHON": c_string(python or sys.executable), "NB_ROOT": c_string(repr(_root())),
                "NB_VERSION": c_string(VERSION), "NB_DEFAULT_SOCKET": c_string(DEFAULT_SOCKET),
                "NB_TIMEOUT": str(int(TIMEOUT)), "NB_MAX_STDIN": str(MAX_STDIN)}
    return "".join(f"#define {k} {v}\n" for k, v in settings.items()) + SOURCE.read_text()


def compile_launcher(target: Path, python: str | None = None) -> bool:
    """Build the compiled launcher at ``target``; False (and why, logged) when it cannot be."""
    cc = shlex.split(os.environ.get("CC", "")) or [c for c in (shutil.which("cc") or shutil.which("gcc"),) if c]
    if not cc:
        log.info("no C compiler: netbay-cni is the Python launcher")
        return False
    with tempfile.TemporaryDirectory(prefix="netbay-cni-") as tmp:
        src = Path(tmp) / "launcher.c"
        src.write_text(c_source(python))
        err = ""
        for static in (["-static"], []):  # static: no dynamic loader at each start
            try:
                p = subprocess.run([*cc, "-O2", "-s", *static, "-o", str(target), str(src)],
                                   capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
            except (OSError, subprocess.SubprocessError) as exc:
                err = str(exc)
                break
            if p.returncode == 0:
                return True
            err = p.stderr.strip()
    log.warning("netbay-cni: %s could not build the launcher (%s); the Python launcher is used",
                " ".join(cc), err[-500:])
    return False


def install(bin_dir: Path, name: str = NAME, compiled: bool = True) -> Path:
    """Write ``bin_dir/name`` atomically (a runtime may be executing the old one):
    the compiled launcher when it can be built (and ``compiled``), else the script."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / name
    tmp = bin_dir / f".{name}.{os.getpid()}"
    if not (compiled and compile_launcher(tmp)):
        tmp.write_text(script())
    tmp.chmod(0o755)
    os.replace(tmp, target)
    return target


def is_compiled(path: Path) -> bool:
    """Whether the installed launcher is the compiled one (an ELF file, not a script)."""
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"
