"""Kernel primitives of the embedded dataplane, all in-process (no ``ip``/``nft`` forks).

- :mod:`netbay.dataplane.netns` — named network namespaces (iproute2-compatible
  ``/run/netns`` mounts) and :func:`~netbay.dataplane.netns.entered`, which moves the
  calling thread into one;
- :mod:`netbay.dataplane.links` — bridges, veth pairs, addresses, routes and sysctls
  over pyroute2 netlink sockets bound to a namespace, and ``wire_port``;
- :mod:`netbay.dataplane.nft` — nftables through libnftables' JSON API in a namespace;
- :mod:`netbay.dataplane.features` — what this kernel offers (config + probes).

Everything netbay builds lives in namespaces it created (``nb-…``); these modules
refuse to configure the namespace the process started in.
"""
