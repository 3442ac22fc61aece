"""The Docker labels netbay puts on the containers it makes, and trusts when it reads them back.

The Kubernetes controller adopts, replaces and removes the containers carrying its
``netbay.k8s.*`` labels; the container API follows Docker's events by
``netbay.container`` / ``netbay.sandbox``. So a label under :data:`RESERVED` is
netbay's alone: a user's container (the Zun API's ``labels``) may not carry one,
or it could pass for a pod's container and be replaced or removed by the controller.
One module, below both ``netbay.k8s`` and ``netbay.containers``, so the names and the
refusal cannot drift apart.
"""

from __future__ import annotations

RESERVED = ("netbay.",)          # every label netbay sets starts so

K8S = "netbay.k8s."
K8S_CLUSTER = K8S + "cluster"
K8S_POD = K8S + "pod"            # "<namespace>/<name>"
K8S_PORT = K8S + "port"          # the pod's port id
K8S_ROLE = K8S + "role"          # "sandbox" | "init" | "app"
K8S_SPEC = K8S + "spec"          # an init or app container: a hash of what it runs; the sandbox it joined
K8S_CONTAINER = K8S + "container"   # an init or app container: its name in the pod spec
K8S_ATTEMPT = K8S + "attempt"    # an init container's or a Job pod's run: 0, 1, ... (bounded retries)

CONTAINER = "netbay.container"   # on every app container the Zun API makes: its uuid
SANDBOX = "netbay.sandbox"       # on its sandbox (whose events are not the app's status)


def reserved(key: str) -> bool:
    """Whether ``key`` is one of netbay's own labels (no user may set it)."""
    return key.startswith(RESERVED)
