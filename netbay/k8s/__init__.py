"""Kubernetes on netbay's network model (issue 12, after kuryr-kubernetes).

One set of handlers (:mod:`.controller`) maps Kubernetes objects onto netbay's
resources — namespace → network + subnet from the cluster's pod subnet pool, pod →
port (``compute:kuryr``, named ``ns/pod``) plugged into a sandbox namespace, Service →
load balancer whose VIP is the cluster IP, Endpoints → members, LoadBalancer /
externalIPs → floating IP, NetworkPolicy → the policy hook (:mod:`.policyhook`).

Objects reach the handlers through a *source* (:mod:`.source`): the manifest source
(``netbay k8s apply -f``) and the API-server source (:mod:`.watch`, ``netbay k8s
watch``: list + watch, writing each pod's port back onto it) share the interface.
Whatever the source, the objects are first written to the store (``k8s_objects``,
the desired state) and the controller then converges netbay's
resources to them — so a resync after any crash adopts what exists and deletes what
nothing wants.
"""
