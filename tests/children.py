"""Children of a test run that must not outlive it.

A fixture's teardown stops what it started, but a run killed with SIGKILL (a CI
timeout, ``kill -9``) runs no teardown: its servers would be reparented to init and
keep their ports, sockets and CPU. :func:`die_with_parent` asks the kernel to send
SIGTERM to the child when the test process dies instead.
"""

from __future__ import annotations

import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: in the child before exec, SIGTERM when the thread that started it
    (pytest's main thread) exits. Kept across ``exec`` of programs that are not set-uid;
    a server that forks workers (uWSGI's master, ``--die-on-term``) stops them itself."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
