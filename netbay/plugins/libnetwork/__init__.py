"""Docker's remote NetworkDriver + IpamDriver (libnetwork plugin API v1.2) on netbay.

``netbay libnetwork`` serves ``/run/docker/plugins/<name>.sock``; the plugin name is
the driver name (``docker network create -d netbay --ipam-driver netbay …``).

- :mod:`.resources` — the network backend (:mod:`netbay.backends.aio`: netbay's own, or a
  cloud's Neutron) as Docker's verbs use it; the plugin never learns which it has.
- :mod:`.options` — ``-o`` / ``--ipam-opt`` names (netbay's and kuryr-libnetwork's).
- :mod:`.ipam` — IpamDriver: pools are netbay subnets, addresses are netbay ports.
- :mod:`.network` — NetworkDriver: networks, endpoints (ports plugged through
  :mod:`netbay.runtime.attach`), Join; :mod:`.netcreate` — its CreateNetwork.
- :mod:`.directory` — where Docker's ids live in netbay (tags), with caches.
- :mod:`.dockerview` — what dockerd knows (networks, endpoints, containers), asked off
  the call path.
- :mod:`.gc` — collects a crash's leftovers (ports, networks, host-side veth ends).
- :mod:`.server` — the HTTP dispatch on the Unix socket, every call bounded.

State lives in netbay (tags on networks, subnets and ports), never only in this
process: a plugin killed and restarted finds every network and endpoint again.
"""
