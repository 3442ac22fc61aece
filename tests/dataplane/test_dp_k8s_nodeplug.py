"""A node cluster's controller sees a pod plugged in the kernel only once ``attach_pod``
is complete (netbay/k8s/nodeplug.py): calico's routed pod needs its node's route too,
the last thing the attach makes; flannel's bridged pod its default route."""

from __future__ import annotations

from netbay.dataplane import links, netns
from netbay.dataplane.rtnl import rtnl
from netbay.drivers import node as nodelib, pods
from netbay.drivers.node import Node
from netbay.k8s.nodeplug import plugged


def test_a_pod_is_plugged_once_its_attach_is_complete(make_ns) -> None:
    n = make_ns("plugn")
    links.bridge(n, "eth0", 1500)   # the node's underlay (its route is no way to a pod)
    links.add_address(n, "eth0", "10.9.0.10/24")
    nodelib.enable_forwarding(n)

    routed = make_ns("plugr")
    assert not plugged(n, routed, "10.100.2.5")   # nothing attached yet
    pods.attach(n, routed, address="10.100.2.5/32", gateway=pods.ROUTED_GATEWAY, mtu=1500, bridge=None)
    assert plugged(n, routed, "10.100.2.5")
    assert not plugged(n, routed, "10.100.2.6")   # another address: not this pod's
    assert rtnl(n).del_route("10.100.2.5/32")     # the node's way back to it, made last
    assert not plugged(n, routed, "10.100.2.5")

    nodelib.ensure_cni_bridge(Node(n, "10.9.0.10/24", "10.100.1.0/24"), 1450)
    bridged = make_ns("plugb")
    pods.attach(n, bridged, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    assert plugged(n, bridged, "10.100.1.2")
    assert rtnl(bridged).del_route("0.0.0.0/0", gateway="10.100.1.1")   # flannel's last step
    assert not plugged(n, bridged, "10.100.1.2")

    netns.delete(routed)   # a pod gone: not plugged, no error
    assert not plugged(n, routed, "10.100.2.5")
