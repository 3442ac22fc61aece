"""Kubernetes manifests for the mapping's dataplane tests, built in one place.

Each function returns one YAML document (flow style, as a user would write it
short); :func:`many` joins a namespace's worth of them per namespace. Used by
test_dp_k8s.py, test_dp_k8s_docker.py and test_dp_k8s_watch.py.
"""

from __future__ import annotations

from collections.abc import Callable


def namespace(name: str) -> str:
    return f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n"


def pod(ns: str, name: str, labels: str = "{app: web}", port: int | None = 8080) -> str:
    """A busybox pod (a named ``http`` container port, unless ``port`` is None)."""
    ports = f", ports: [{{name: http, containerPort: {port}}}]" if port is not None else ""
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\n"
            f"spec: {{containers: [{{name: c, image: busybox{ports}}}]}}\n")


def service(ns: str, name: str, app: str, port: int, target_port: int | None = None,
            type_: str | None = None) -> str:
    """A Service selecting ``app: <app>`` (ClusterIP unless ``type_``)."""
    kind = f"type: {type_}, " if type_ else ""
    target = f", targetPort: {target_port}" if target_port is not None else ""
    return (f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n"
            f"spec: {{{kind}selector: {{app: {app}}}, ports: [{{port: {port}{target}}}]}}\n")


def deployment(ns: str, name: str, app: str, replicas: int, image: str, command: str) -> str:
    return (f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}}}\n"
            f"spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {app}}}}}\n"
            f"  template:\n    metadata: {{labels: {{app: {app}}}}}\n"
            f"    spec: {{containers: [{{name: c, image: \"{image}\", command: {command}}}]}}\n")


def own_namespace_only(ns: str, app: str, port: int) -> str:
    """A NetworkPolicy: ``app`` pods take ingress on ``port`` from their namespace's ``app`` pods only."""
    return (f"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: np, namespace: {ns}}}\n"
            f"spec: {{podSelector: {{matchLabels: {{app: {app}}}}}, policyTypes: [Ingress],"
            f" ingress: [{{from: [{{podSelector: {{matchLabels: {{app: {app}}}}}}}], ports: [{{port: {port}}}]}}]}}\n")


def many(names: list[str], each: Callable[[str], list[str]]) -> str:
    """One manifest: for every namespace name, the namespace and the documents ``each(name)``."""
    return "---\n".join(doc for ns in names for doc in [namespace(ns), *each(ns)])
