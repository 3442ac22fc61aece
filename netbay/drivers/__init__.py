"""Container network drivers: one package per driver, one registry, one protocol.

Layout (see docs/drivers.md):

* :mod:`.spec` — :class:`~.spec.DriverSpec` (what a driver declares); :mod:`.registry`
  — the :class:`~.registry.Driver` protocol, and the lookups everything else uses.
* one package per driver — :mod:`.flannel` (``backend/vxlan``, ``backend/hostgw``;
  ``udp`` refused), :mod:`.calico` (direct routes, VXLAN; IP-in-IP needs a kernel
  feature), :mod:`.docker` (Docker's overlay), :mod:`.kuryr` (labels only: its pods
  are ports). Each package's ``__init__`` declares the driver (``SPEC``: labels,
  checks, defaults, typed config); its ``driver`` module is the kernel part.
* shared kernel pieces — :mod:`.leases` (pure subnet-lease allocation),
  :mod:`.pods` (one pod's veth: :func:`~.pods.attach` / :func:`~.pods.detach`),
  :mod:`.node` (:class:`~.node.Node`, cni0, forwarding), :mod:`.peers` (VXLAN, FDB,
  neighbours, marked routes), :mod:`.masq`; their netlink is the dataplane's one codec
  (:mod:`netbay.dataplane.rtnl`).

Registering a driver is one line below; the order is Magnum's (its error messages
list a COE's drivers in it). Everything happens inside the namespaces handed in;
nothing touches the host's.
"""

from netbay.drivers import calico, docker, flannel, kuryr
from netbay.drivers.registry import register

register(docker.SPEC)
register(flannel.SPEC)
register(calico.SPEC)
register(kuryr.SPEC)
