"""Where a cloud's container ports are plugged on this host, for the commands that plug
them (``netbay cni-daemon``, ``netbay libnetwork``): the same three options and the
same start-up (:mod:`netbay.runtime.vif`: os-vif into the cloud's Open vSwitch, bound to
this host's chassis; half-done plugs finished before the first call)."""

from __future__ import annotations

from typing import Any

import typer


DEFAULT_OVSDB = "unix:/run/openvswitch/db.sock"   # netbay.runtime.vif's (not imported: the CLI starts fast)


def plug_option() -> Any:
    return typer.Option(None, "--plug", envvar="NETBAY_PLUG",
                        help="Where host ends go: os-vif (the cloud's Open vSwitch; the openstack backend's "
                             "default) or fabric (netbay's fabric namespace; the embedded backend's only).")


def ovsdb_option() -> Any:
    return typer.Option(DEFAULT_OVSDB, "--ovsdb", envvar="NETBAY_OVSDB",
                        help="This host's Open vSwitch database (--plug os-vif).")


def ovs_netns_option() -> Any:
    return typer.Option(None, "--ovs-netns", envvar="NETBAY_OVS_NETNS",
                        help="The network namespace this host's OVS datapath lives in, where host ends "
                             "go (default: this process's).")


def host_vifs(kind: str, plug: str | None, ovsdb: str, ovs_netns: str | None, host: str | None):  # noqa: ANN201
    """(os-vif's plugger or None, the host ports are bound to); half-done plugs finished.
    ValueError, worded for the command line, when it cannot plug here."""
    plug = plug or ("os-vif" if kind == "openstack" else "fabric")
    if plug not in ("os-vif", "fabric"):
        raise ValueError(f"--plug {plug!r}: os-vif or fabric")
    if plug == "fabric":
        return None, host
    if kind != "openstack":
        raise ValueError("--plug os-vif binds a cloud's ports: it needs --backend openstack")
    try:
        from netbay.runtime.vif import OvsVifs

        vifs = OvsVifs(ovsdb, ovs_netns)
    except ImportError as exc:
        raise ValueError(f"--plug os-vif needs os-vif (pip install 'netbay[cloud]'), or --plug fabric: {exc}") from None
    try:
        chassis = vifs.chassis_host()
    except Exception as exc:  # noqa: BLE001 - the database's own words
        raise ValueError(f"--plug os-vif: the Open vSwitch database {ovsdb} does not answer: {exc}") from None
    if chassis is None and host is None:
        raise ValueError(f"--plug os-vif: no chassis at {ovsdb} (no ovn-controller system-id); give --host")
    vifs.recover()
    return vifs, host or chassis


__all__ = ["host_vifs", "ovs_netns_option", "ovsdb_option", "plug_option"]
