"""Loaded by the ``netbay up`` subprocess of a bench run with ``--hops``: trace its hops."""
import os

if os.environ.get("NETBAY_HOPTRACE"):
    import hops

    hops.open_trace(os.environ["NETBAY_HOPTRACE"])
    hops.install_server()
    if os.environ.get("NETBAY_HOPTRACE_AGENT"):  # `up` runs the agent too
        hops.install_agent()
