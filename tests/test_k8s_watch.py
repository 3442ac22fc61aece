"""What the watch source hands the controller (issue 12): the parts that decide
whether an API-server event causes a pass, and the pod annotation's content."""

from __future__ import annotations

import json

from netbay.k8s import objects, portinfo
from netbay.k8s.objects import parse
from netbay.k8s.watch import gone, mapped, trimmed
from tests import zygote

POD = parse("""
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: shop, labels: {app: web}}
spec: {containers: [{name: c, image: busybox}]}
""")[0]


def served(body: dict, rv: str, notes: dict | None = None, phase: str = "Running") -> dict:
    """The body as the API server returns it: bookkeeping and status added."""
    out = json.loads(json.dumps(body))
    out["metadata"].update({"resourceVersion": rv, "uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z",
                            "managedFields": [{"manager": "kubectl"}]})
    if notes:
        out["metadata"]["annotations"] = notes
    out["status"] = {"phase": phase, "podIP": "10.0.0.9"}
    return out


def test_status_bookkeeping_and_our_annotation_do_not_count_as_a_change() -> None:
    base = trimmed(served(POD, "10"))
    assert base == trimmed(served(POD, "11", {portinfo.ANNOTATION: "{}"}, phase="Pending"))
    assert "status" not in base and "resourceVersion" not in base["metadata"]
    # Anyone else's annotation, or a label, does.
    assert trimmed(served(POD, "12", {"team": "a"})) != base
    relabelled = json.loads(json.dumps(POD))
    relabelled["metadata"]["labels"]["app"] = "db"
    assert trimmed(served(relabelled, "13")) != base


def test_host_network_and_finished_pods_and_externalname_services_are_not_mapped() -> None:
    assert mapped(served(POD, "1"))
    assert not mapped(served(POD, "1", phase="Succeeded")) and not mapped(served(POD, "1", phase="Failed"))
    host = json.loads(json.dumps(POD))
    host["spec"]["hostNetwork"] = True
    assert not mapped(host)
    alias = parse("apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec: {type: ExternalName, "
                  "externalName: db.example.com}\n")[0]
    assert not mapped(alias) and mapped({**alias, "spec": {"type": "ClusterIP"}})


def test_the_annotation_carries_the_port_and_is_canonical() -> None:
    port = {"id": "p1", "mac_address": "fa:16:3e:01:02:03", "network_id": "n1",
            "fixed_ips": [{"ip_address": "10.44.0.5", "subnet_id": "s1"}]}
    subnet = {"id": "s1", "cidr": "10.44.0.0/24", "gateway_ip": "10.44.0.1"}
    value = portinfo.vif_annotation(port, subnet)
    assert value == portinfo.vif_annotation(dict(reversed(list(port.items()))), subnet)
    vif = portinfo.parse(value)
    assert vif == {"id": "p1", "address": "fa:16:3e:01:02:03", "network_id": "n1",
                   "ips": [{"ip_address": "10.44.0.5", "subnet_id": "s1"}],
                   "subnet": {"id": "s1", "cidr": "10.44.0.0/24", "gateway": "10.44.0.1"},
                   "vif_name": "eth0", "plugin": "netbay"}
    assert json.loads(value)["eth0"]["default"] is True


def test_gone_is_410_as_an_event_or_as_a_status() -> None:
    from lightkube import ApiError
    from lightkube.models.meta_v1 import Status

    assert gone(ApiError(status=Status(code=410, message="too old resource version")))
    assert not gone(ApiError(status=Status(code=500, message="boom")))
    assert not gone(OSError("connection refused"))


def test_cli_watch_refuses_a_missing_kubeconfig(tmp_path) -> None:
    import sys

    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "watch", "--kubeconfig",
                    str(tmp_path / "absent"), "--cluster", "c1"], capture_output=True, text=True, timeout=60,
                   env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error:" in r.stderr and "absent" in r.stderr
    (tmp_path / "kc").write_text("apiVersion: v1\nkind: Config\ncurrent-context: none\nclusters: []\n"
                                 "contexts: []\nusers: []\n")
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "watch", "--kubeconfig",
                    str(tmp_path / "kc"), "--context", "nowhere", "--cluster", "c1"],
                   capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert r.returncode == 1 and "error:" in r.stderr and "nowhere" in r.stderr, r.stdout + r.stderr


def test_a_pods_readiness_counts_as_a_change_its_condition_timestamps_do_not() -> None:
    def with_ready(value: str, when: str) -> dict:
        out = served(POD, "20")
        out["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": when},
            {"type": "Ready", "status": value, "lastTransitionTime": when, "reason": "ContainersNotReady"}]
        return out

    ready = trimmed(with_ready("True", "2026-01-01T00:00:00Z"))
    assert ready["status"] == {"conditions": [{"type": "PodScheduled", "status": "True"},
                                              {"type": "Ready", "status": "True"}]}
    assert trimmed(with_ready("True", "2026-01-02T00:00:00Z")) == ready
    assert trimmed(with_ready("False", "2026-01-01T00:00:00Z")) != ready
    assert objects.desired([ready]).pods[("shop", "a")].ready
    assert not objects.desired([trimmed(with_ready("False", "x"))]).pods[("shop", "a")].ready
