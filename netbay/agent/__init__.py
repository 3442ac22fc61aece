"""The dataplane agent: follows the network service and makes this host's kernel match.

It composes the dataplane's realizers (fabric, security groups, routers, load
balancers, tap flows) and the container network drivers' (cluster networks and
pods), so it sits above both packages and neither imports it:

* :mod:`.agent` — :class:`Agent`, the loop: a full resync, then the change stream;
* :mod:`.realizers` — the realizers it composes by default;
* :mod:`.expand` — which ids a batch of changes concerns;
* :mod:`.wiring` — the fabric's share of a reconcile (bridges, sandboxes, port legs);
* :mod:`.plugwait` — container ports bound before their runtime plugged them;
* :mod:`.holes` — revisions committed out of order, fetched late or given up;
* :mod:`.sweep` — the resync's removal of namespaces and fabric links nothing wants;
* :mod:`.statuses` — what a reconcile realized, as statuses that differ from the state;
* :mod:`.api` — its client of the network service (:class:`Api`, :class:`Credentials`;
  :class:`BesideServer` in the server's own process);
* :mod:`.reporter` — status written in the background.
"""

from netbay.agent.agent import Agent
from netbay.agent.api import Api, ApiError, BesideServer, Credentials
from netbay.agent.realizers import default_realizers

__all__ = ["Agent", "Api", "ApiError", "BesideServer", "Credentials", "default_realizers"]
