"""Container network drivers: the kernel part of flannel and calico on cluster nodes.

Layout (see docs/drivers.md):

* :mod:`.leases` — pure subnet-lease allocation (flannel subnets, calico blocks).
* :mod:`.pods` — :func:`~.pods.attach` / :func:`~.pods.detach`: one pod's veth, the
  one step the drivers, the Docker driver and the CNI plugin share.
* :mod:`.node` — :class:`~.node.Node` (plain data) and per-node helpers (cni0, forwarding).
* :mod:`.kernel`, :mod:`.peers` — netlink pieces (VXLAN, FDB, neighbours, marked
  routes) and "make a node's peer state exactly this".
* :mod:`.flannel` (``backend/vxlan``, ``backend/hostgw``; ``udp`` refused),
  :mod:`.calico` (direct routes, VXLAN; IP-in-IP needs a kernel feature).

Everything happens inside the namespaces handed in; nothing touches the host's.
"""
