"""python-openstackclient run in the test's own process: the same shell, parser, plugins,
requests and output as the ``openstack`` command, without its start.

Each ``openstack`` process spends 1.7-1.9 s of CPU importing the client and loading its
plugins before its first request (10-17 s of wall time on a loaded 2-core machine); a
scenario of twenty commands paid that twenty times. Here the imports are paid once per
test process and every call builds a fresh :class:`openstackclient.shell.OpenStackShell`
(fresh options, session, token and client manager, as a new process has), with the
call's environment as ``os.environ``, and stdout/stderr captured. What a command leaves
behind in the process is put back: the root logger's handlers and levels the shell
configures, the loggers' levels it sets, the warning filters it adds, the environment,
``sys.argv``, and the clients osc-lib caches on its ``ClientManager`` class.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping

_ONE_AT_A_TIME = threading.Lock()   # os.environ, sys.stdout and the root logger are the process's


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    """``sys.argv`` as the command's (argparse names the program after ``sys.argv[0]``)."""
    saved, sys.argv = sys.argv, argv
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logger.level for name, logger in logging.Logger.manager.loggerDict.items()
              if isinstance(logger, logging.Logger)}
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level)
        for name, logger in list(logging.Logger.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                logger.setLevel(levels.get(name, logging.NOTSET))


def _forget_clients() -> None:
    """Drop the clients osc-lib keeps on its ``ClientManager`` class (``ClientCache``
    descriptors hold the first handle made, for the process's life): a new process starts
    without them, so each call starts without them too (else it would reuse the first
    call's session, user and endpoints)."""
    from osc_lib.clientmanager import ClientCache
    from openstackclient.common.clientmanager import ClientManager

    for klass in ClientManager.__mro__:
        for attr in vars(klass).values():
            if isinstance(attr, ClientCache):
                attr._handle = None


def openstack(*args: str, env: Mapping[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """``openstack ARGS`` with environment ``env`` (the whole environment, as ``subprocess.run``
    takes it); its exit status, stdout and stderr as a :class:`subprocess.CompletedProcess`.
    Bounded by ``timeout`` (then :class:`subprocess.TimeoutExpired`, as ``subprocess.run``)."""
    from openstackclient.shell import OpenStackShell

    argv = ["openstack", *args]
    out, err = io.StringIO(), io.StringIO()
    result: dict[str, int] = {}

    def run() -> None:
        try:
            _forget_clients()
            shell = OpenStackShell()
            shell.NAME = "openstack"   # cliff's class attribute, from sys.argv[0] at its import
            result["rc"] = shell.run(list(args))
        except SystemExit as exc:   # argparse's usage errors and --help
            result["rc"] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)

    with _ONE_AT_A_TIME, _environment(env), _argv(argv), _logging_kept(), warnings.catch_warnings(), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        worker = threading.Thread(target=run, name="openstack-cli", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            raise subprocess.TimeoutExpired(argv, timeout, out.getvalue(), err.getvalue())
    _forget_clients()
    if "rc" not in result:
        raise RuntimeError(f"openstack {' '.join(args)} ended without a status:\n{err.getvalue()}")
    return subprocess.CompletedProcess(argv, result["rc"], out.getvalue(), err.getvalue())
