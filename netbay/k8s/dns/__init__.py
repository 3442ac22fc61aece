"""Service discovery for a kuryr cluster: cluster DNS and the Service environment.

* :mod:`.records` — what the cluster's names answer, from the desired objects and
  what the controller made (cluster IPs, ready pods): a JSON file.
* :mod:`.server` — the resolver: dnslib's server answering from that file (re-read
  when it changes), run in a namespace of its own on a port of the service network.
* :mod:`.resolver` — its life: port, namespace and process, kept by every pass.
* :mod:`.podfiles` — each pod's ``resolv.conf`` and Service variables, in
  ``/etc/netns/<pod namespace>/`` (what ``ip netns exec`` bind-mounts over ``/etc``).
"""
