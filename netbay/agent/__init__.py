"""The dataplane agent: follows the network service and makes this host's kernel match.

It composes the dataplane's realizers (fabric, security groups, routers, load
balancers, tap flows) and the container network drivers' (cluster networks and
pods), so it sits above both packages and neither imports it:

* :mod:`.agent` — :class:`Agent`, the loop: a full resync, then the change stream;
* :mod:`.expand` — which ids a batch of changes concerns;
* :mod:`.api` — its client of the network service (:class:`Api`, :class:`Credentials`;
  :class:`BesideServer` in the server's own process);
* :mod:`.reporter` — status written in the background.
"""

from netbay.agent.agent import Agent, default_realizers
from netbay.agent.api import Api, ApiError, BesideServer, Credentials

__all__ = ["Agent", "Api", "ApiError", "BesideServer", "Credentials", "default_realizers"]
