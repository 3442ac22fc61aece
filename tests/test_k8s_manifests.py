"""The manifest source's parsing (lightkube models) and the kuryr driver's labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from netbay.coe import labels
from netbay.coe.fragments import NETWORK_DRIVERS
from netbay.errors import BadRequest
from netbay.k8s.objects import Key, ManifestError, desired, key_of, load_paths, parse, selects

DEPLOY = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {type: LoadBalancer, selector: {app: web}, ports: [{port: 80, targetPort: http, protocol: UDP}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: shop}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""


def test_deployment_expands_into_its_replicas_and_service_facts() -> None:
    want = desired(parse(DEPLOY))
    assert sorted(want.pods) == [("shop", "web-0"), ("shop", "web-1"), ("shop", "web-2")]
    assert want.pods[("shop", "web-1")].ports == {"http": 8080}
    assert set(want.namespaces) == {"shop"}  # implied by the namespaced objects
    svc = want.services[("shop", "web")]
    assert (svc.type, svc.ports[0].protocol, svc.ports[0].target, svc.cluster_ip) == ("LoadBalancer", "UDP", "http", None)
    assert [p["metadata"]["name"] for p in want.policies] == ["deny"]
    assert selects({"app": "web"}, {"app": "web", "x": "y"}) and not selects({}, {"app": "web"})
    assert not selects(None, {"app": "web"})


def test_scale_to_zero_and_keys() -> None:
    bodies = parse(DEPLOY.replace("replicas: 3", "replicas: 0"))
    assert desired(bodies).pods == {}
    assert key_of(bodies[0]) == Key("Deployment", "shop", "web")
    ns = parse("apiVersion: v1\nkind: Namespace\nmetadata: {name: a, labels: {team: x}}\n")[0]
    assert key_of(ns) == Key("Namespace", "", "a") and desired([ns]).namespaces == {"a": {"team": "x"}}


@pytest.mark.parametrize("text, message", [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "kind ConfigMap is not mapped"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {namespace: a}\n", "without metadata.name"),
    ("apiVersion: v1\nkind: Nonsense\nmetadata: {name: c}\n", "Nonsense"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: 10.0.0, ports: [{port: 1}]}\n",
     "is not an IPv4 address"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 1, protocol: SCTP}]}\n",
     "SCTP is not supported"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {netbay.io/runtime: vm}}\n"
     "spec: {containers: [{name: c, image: busybox}]}\n", "netbay.io/runtime='vm' is not one of sandbox, docker"),
])
def test_refused_manifests_say_why(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        desired(parse(text, "m.yaml"))


def test_refused_at_parse_before_anything_is_stored() -> None:
    """The mapping's own checks run at parse: a refused object never reaches the store
    (where every later pass would trip on it)."""
    with pytest.raises(ManifestError, match="m.yaml: .*is not an IPv4 address"):
        parse("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: x, ports: [{port: 1}]}\n",
              "m.yaml")


def test_a_pods_runtime_and_first_container() -> None:
    """What a Docker-runtime pod runs: the first container's image, command (Docker's
    entrypoint), args, plain env values; the runtime annotation of the template."""
    text = DEPLOY.replace("    metadata: {labels: {app: web}}\n",
                          "    metadata: {labels: {app: web}, annotations: {netbay.io/runtime: docker}}\n").replace(
        "image: busybox,", "image: 'busybox:1', command: [sh, -c], args: ['echo $A'], "
        "env: [{name: A, value: '1'}, {name: B, valueFrom: {fieldRef: {fieldPath: metadata.name}}}],")
    pod = desired(parse(text)).pods[("shop", "web-2")]
    assert pod.runtime == "docker"
    c = pod.container
    assert (c.image, c.command, c.args, dict(c.env), c.pull, c.restart) == \
        ("busybox:1", ("sh", "-c"), ("echo $A",), {"A": "1"}, "IfNotPresent", "Always")
    plain = desired(parse(DEPLOY)).pods[("shop", "web-0")]
    assert plain.runtime is None and plain.container.command is None and plain.container.args is None


def test_a_directory_is_read_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n")
    (tmp_path / "a.yml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert [b["metadata"]["name"] for b in load_paths([tmp_path])] == ["a", "b"]
    with pytest.raises(ManifestError, match="No such file"):
        load_paths([tmp_path / "missing.yaml"])


def test_kuryr_labels_are_checked_and_the_driver_has_a_fragment() -> None:
    assert "kuryr" in NETWORK_DRIVERS
    labels.check({"kuryr_subnet_driver": "node", "kuryr_pod_subnet_prefixlen": 26}, "kuryr")
    with pytest.raises(BadRequest, match="expecting one of namespace|node"):
        labels.check({"kuryr_subnet_driver": "pod"}, "kuryr")
    labels.check({"kuryr_pod_runtime": "docker"}, "kuryr")
    with pytest.raises(BadRequest, match="expecting one of sandbox|docker"):
        labels.check({"kuryr_pod_runtime": "vm"}, "kuryr")
    with pytest.raises(BadRequest, match="overlap"):
        labels.check({"kuryr_service_cidr": "10.10.128.0/20"}, "kuryr")
    with pytest.raises(BadRequest, match="must be longer than the prefix"):
        labels.check({"kuryr_pod_subnet_pool": "10.10.0.0/24", "kuryr_pod_subnet_prefixlen": 24}, "kuryr")


def test_cli_refuses_a_bad_manifest_before_touching_anything(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    r = subprocess.run([sys.executable, "-m", "netbay.cli.main", "k8s", "apply", "-f", str(bad), "--cluster", "x"],
                       capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 1
    assert "kind ConfigMap is not mapped" in r.stderr.replace("\n", " ")
