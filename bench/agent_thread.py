"""The dataplane agent on a thread of the benchmark's process, under the bench's prefix.

Dataplane benchmarks run ``netbay up --no-agent`` (bench/harness.py) and this agent
beside it, so every namespace it makes carries the bench's own prefix and is swept
at the end (:func:`sweep`), also on failure.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import harness

from netbay.dataplane import netns
from netbay.agent import Agent, Api, Credentials
from netbay.dataplane.names import Names


@contextmanager
def running(srv: harness.Server, names: Names, ready_timeout: float = 30.0) -> Iterator[Agent]:
    """Start the agent, wait for its first resync, stop it (bounded) on the way out."""
    creds = Credentials(f"{srv.url}/identity/v3", "admin", harness.ADMIN_PASSWORD, "admin")
    agent = Agent(Api(srv.url, creds.token), names, wait=2.0)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        if not agent.ready.wait(ready_timeout):
            raise RuntimeError("agent did not finish its first resync")
        yield agent
    finally:
        stop.set()
        thread.join(timeout=15)
        agent.api.close()


def sweep(prefix: str) -> list[str]:
    """Stop the cluster resolvers a bench's clusters left running under ``prefix`` (their
    processes outlive their namespaces), then delete every namespace whose name starts
    with ``prefix``; returns the namespaces' names."""
    from netbay.k8s.dns.process import stop_all

    stop_all(prefix)
    if not os.path.isdir(netns.NETNS_RUN_DIR):
        return []
    gone = sorted(n for n in os.listdir(netns.NETNS_RUN_DIR) if n.startswith(prefix))
    for name in gone:
        netns.delete(name)
    return gone
