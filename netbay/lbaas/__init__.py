"""Load balancing: the Octavia-compatible load-balancer API v2's rules.

Resources (load balancers, listeners, pools, members, health monitors) follow
the network service's pattern (``netbay.network.resource.Resource``: bodies,
``render``, ``create``/``update``/``delete``, the change log); the realizer
settles their statuses through ``netbay.lbaas.status``. Services know nothing
of HTTP: ``netbay.api.loadbalancer`` serves them.
"""

from __future__ import annotations
