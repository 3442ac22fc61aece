"""Container runtimes on netbay ports.

:mod:`netbay.runtime.attach` is the seam every runtime uses (Docker's libnetwork
plugin in :mod:`netbay.plugins.libnetwork`, the CNI daemon in
:mod:`netbay.plugins.cni`, the container API): it plugs a port into the fabric and
hands back the interface the runtime moves into its container.

The container-port lifecycle those three share lives here once: :mod:`.resolve`
(a network named by id or name), :mod:`.binding` (bind a port to a container on a
host, give it back), :mod:`.tags` (the ownership tags a restarted service and its
collector find their ports by), :mod:`.claim` (make or claim a port with those tags,
give it back, collect what nothing stands for) and :mod:`.kernel` (the one thread
netlink work runs on). On a cloud, :mod:`.vif` plugs a bound port into the cloud's
Open vSwitch with os-vif, as kuryr does, instead of into the fabric. Their async
callers reach a synchronous network backend through
:class:`netbay.backends.aio.ThreadedBackend`.
"""
