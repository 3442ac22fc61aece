"""The ``netbay`` command."""

from __future__ import annotations

import typer

from netbay.cli.errors import OneLineErrors
from netbay.cli.lazy import Lazy, LazyGroup


class Netbay(OneLineErrors, LazyGroup):
    """The sub-commands below, each imported when it runs; a client failure is one line."""

    lazy = {
        "serve": Lazy("netbay.cli.server", "serve",
                      "Run the API services (identity, network, load balancers, container infrastructure)."),
        "up": Lazy("netbay.cli.server", "up",
                   "Migrate, bootstrap, create the ``public`` external network, write an openrc; serve the API "
                   "and run the dataplane agent."),
        "down": Lazy("netbay.cli.server", "down",
                     "Stop the netbay serving DATA_DIR and delete exactly its agent's namespaces."),
        "db": Lazy("netbay.cli.server", "db_app", "Database schema migrations."),
        "demo": Lazy("netbay.cli.demo", "demo",
                     "Create a network, subnet, router with gateway, ports and a floating IP; print them."),
        "doctor": Lazy("netbay.cli.doctor", "doctor",
                       "The network backend in use and whether it answers; kernel features for the embedded "
                       "dataplane, and the driver modes this host can run."),
        "agent": Lazy("netbay.cli.agent", "agent",
                      "Run the dataplane agent: wire this host's kernel as the network service says."),
        "libnetwork": Lazy("netbay.cli.libnetwork", "libnetwork",
                           "Serve Docker's remote NetworkDriver and IpamDriver (libnetwork plugin API v1.2)."),
        "cni-daemon": Lazy("netbay.cli.cni", "cni_daemon",
                           "Serve the netbay-cni plugin's calls (CNI 1.0/1.1 ADD, DEL, CHECK, STATUS, GC)."),
        "cni-install": Lazy("netbay.cli.cni", "cni_install",
                            "Install the netbay-cni plugin executable (a fast launcher of this netbay)."),
        "admin": Lazy("netbay.cli.admin", "app", "Manage projects, users and roles."),
        "sandbox": Lazy("netbay.cli.sandbox", "app", "Sandboxes: network namespaces that ports plug into."),
        "tap": Lazy("netbay.cli.tap", "app",
                    "Port mirroring (Tap-as-a-Service): capture what a tap service receives."),
        "cluster-template": Lazy("netbay.cli.clustertemplate", "app",
                                 "Cluster templates (Magnum): COE, network driver and labels."),
        "cluster": Lazy("netbay.cli.cluster", "app", "Clusters (Magnum): built from a cluster template, followed live."),
        "pod": Lazy("netbay.cli.pod", "app",
                    "Pods on cluster nodes: a namespace per pod, addressed from its node's lease."),
        "k8s": Lazy("netbay.cli.k8s", "app",
                    "Kubernetes objects on a cluster: kuryr's networks, ports and load balancers, or "
                    "flannel's and calico's node leases and node-answered Services."),
        "network-driver": Lazy("netbay.cli.networkdriver", "app",
                               "Container network drivers: which COE uses which, and their labels."),
        "container-network": Lazy("netbay.cli.container", "network_app",
                                  "Container networks: netbay networks containers use."),
        "container": Lazy("netbay.cli.container", "app",
                          "Containers on netbay networks (Zun-compatible API), run by Docker."),
    }


app = typer.Typer(cls=Netbay, help="netbay: first-class cloud networking for containers.", no_args_is_help=True,
                  rich_markup_mode=None)


@app.callback()
def netbay() -> None:
    """Every command is one of the lazy group's (typer makes a group only of an app with a
    callback or commands)."""


if __name__ == "__main__":
    app()
