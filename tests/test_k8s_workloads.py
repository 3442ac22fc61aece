"""Workload kinds expanded into their pods, a pod's every container read, what a runtime
cannot run refused by name, and pod statuses from Docker's container states (issue 27)."""

from __future__ import annotations

import pytest

from netbay.k8s import podstatus
from netbay.k8s.objects import ManifestError, desired, parse
from netbay.k8s.podrun import Found


def workload(kind: str, api: str, extra: str = "", restart: str = "") -> str:
    policy = f", restartPolicy: {restart}" if restart else ""
    return f"""
apiVersion: {api}
kind: {kind}
metadata: {{name: w, namespace: n}}
spec:
  {extra or "selector: {matchLabels: {app: w}}"}
  template:
    metadata: {{labels: {{app: w}}}}
    spec: {{containers: [{{name: c, image: busybox}}]{policy}}}
"""


def test_every_workload_kind_expands_into_its_pods() -> None:
    nodes = ("kd-minion-0", "kd-minion-1", "kd-master-0")
    rc = desired(parse(workload("ReplicationController", "v1", "replicas: 2\n  selector: {app: w}")))
    assert sorted(rc.pods) == [("n", "w-0"), ("n", "w-1")] and rc.pods[("n", "w-0")].owner == "ReplicationController/w"
    sts = desired(parse(workload("StatefulSet", "apps/v1", "replicas: 3\n  serviceName: w\n  "
                                 "selector: {matchLabels: {app: w}}")))
    assert [(name, p.after) for (_, name), p in sorted(sts.pods.items())] == \
        [("w-0", None), ("w-1", "w-0"), ("w-2", "w-1")]
    parallel = desired(parse(workload("StatefulSet", "apps/v1", "replicas: 2\n  serviceName: w\n  "
                                      "podManagementPolicy: Parallel\n  selector: {matchLabels: {app: w}}")))
    assert {p.after for p in parallel.pods.values()} == {None}
    ds = desired(parse(workload("DaemonSet", "apps/v1")), nodes)   # one per worker (masters are tainted)
    assert {name: p.node for (_, name), p in ds.pods.items()} == {"w-kd-minion-0": "kd-minion-0",
                                                                 "w-kd-minion-1": "kd-minion-1"}
    assert len(desired(parse(workload("DaemonSet", "apps/v1")), ("only-master",)).pods) == 1
    job = desired(parse(workload("Job", "batch/v1", "completions: 2\n  backoffLimit: 1", "Never")))
    assert sorted(job.pods) == [("n", "w-0"), ("n", "w-1")]
    assert {(p.restart, p.backoff_limit, p.owner) for p in job.pods.values()} == {("Never", 1, "Job/w")}
    # Scaling is the expansion again: fewer replicas, fewer pods.
    assert len(desired(parse(workload("StatefulSet", "apps/v1", "replicas: 1\n  serviceName: w\n  "
                                      "selector: {matchLabels: {app: w}}"))).pods) == 1


@pytest.mark.parametrize("text,message", [
    (workload("Job", "batch/v1"), "a Job's pods restart Never or OnFailure, not Always"),
    (workload("Deployment", "apps/v1", restart="Never"), "a Deployment's pods restart Always"),
])
def test_a_workload_the_api_server_refuses_is_refused(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse(text)


POD = """
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: n}
spec:
  restartPolicy: OnFailure
  volumes: [{name: www, emptyDir: {}}]
  initContainers:
  - {name: fill, image: busybox, command: [sh, -c, "echo hi > /w/index.html"], volumeMounts: [{name: www, mountPath: /w}]}
  containers:
  - {name: web, image: busybox, workingDir: /w, volumeMounts: [{name: www, mountPath: /w, readOnly: true}]}
  - name: side
    image: busybox
    args: [sleep, "600"]
    livenessProbe: {exec: {command: ["true"]}}
"""


def test_a_pods_init_containers_and_every_container_are_read() -> None:
    pod = desired(parse(POD)).pods[("n", "p")]
    assert [c.name for c in pod.init] == ["fill"] and [c.name for c in pod.containers] == ["web", "side"]
    assert pod.restart == "OnFailure" and pod.volumes == ("www",) and pod.refused == ()
    assert pod.containers[0].mounts[0].read_only and pod.containers[0].working_dir == "/w"
    assert pod.containers[1].args == ("sleep", "600") and pod.container == pod.containers[0]
    assert pod.ignored == ("spec.containers[1].livenessProbe",)   # run without: reported when made


def test_what_no_runtime_here_runs_as_written_is_refused_by_name() -> None:
    pod = desired(parse(POD.replace("{name: www, emptyDir: {}}", "{name: www, hostPath: {path: /srv}}"))).pods[("n", "p")]
    assert pod.refused == ("spec.volumes[0] (www): hostPath is not supported (emptyDir only)",)
    with pytest.raises(ManifestError, match=r"spec.initContainers\[0\].volumeMounts\[0\].name: Not found: 'nope'"):
        parse(POD.replace("volumeMounts: [{name: www, mountPath: /w}]", "volumeMounts: [{name: nope, mountPath: /w}]"))
    with pytest.raises(ManifestError, match="Duplicate value"):
        parse(POD.replace("name: side", "name: web"))
    with pytest.raises(ManifestError, match="spec.restartPolicy: Unsupported value: 'Sometimes'"):
        parse(POD.replace("restartPolicy: OnFailure", "restartPolicy: Sometimes"))


def inspected(cid: str, status: str, code: int = 0, restarting: bool = False, attempt: int = 0) -> dict:
    return {"Id": cid, "RestartCount": 0, "Config": {"Labels": {"netbay.k8s.attempt": str(attempt)}},
            "State": {"Status": status, "Running": status == "running", "Restarting": restarting, "ExitCode": code,
                      "OOMKilled": False, "StartedAt": "t0", "FinishedAt": "t1"}}


def test_pod_status_from_its_containers() -> None:
    pod = desired(parse(POD)).pods[("n", "p")]
    sb = {"Id": "sb"}
    found = Found(sb, {}, {"fill": {"Id": "i"}})

    def status(inits: dict, apps: dict) -> dict:
        found = Found(sb, {n: {"Id": c["Id"]} for n, c in apps.items()}, {n: {"Id": c["Id"]} for n, c in inits.items()})
        return podstatus.docker_pod(pod, found, {c["Id"]: c for c in [*inits.values(), *apps.values()]})

    assert podstatus.docker_pod(pod, Found(), {})["phase"] == "Pending"
    s = status({"fill": inspected("i", "running")}, {})
    assert (s["phase"], podstatus.display(s)) == ("Pending", "Init:0/1")
    s = status({"fill": inspected("i", "exited", 1)}, {})
    assert (s["phase"], podstatus.display(s)) == ("Pending", "Init:Error")   # OnFailure: retried
    s = status({"fill": inspected("i", "exited", 1, attempt=3)}, {})
    assert podstatus.display(s) == "Init:CrashLoopBackOff"
    never = podstatus.docker_pod(desired(parse(POD.replace("OnFailure", "Never"))).pods[("n", "p")], found,
                                 {"i": inspected("i", "exited", 2)})
    assert (never["phase"], podstatus.display(never)) == ("Failed", "Init:Error")
    done = {"fill": inspected("i", "exited", 0)}
    s = status(done, {"web": inspected("a", "running")})
    assert (s["phase"], podstatus.display(s)) == ("Pending", "PodInitializing")   # side not made yet
    s = status(done, {"web": inspected("a", "running"), "side": inspected("b", "running")})
    assert (s["phase"], podstatus.display(s)) == ("Running", "Running")
    assert [c["state"] for c in s["containerStatuses"]] == [{"running": {"startedAt": "t0"}}] * 2
    s = status(done, {"web": inspected("a", "exited", 0), "side": inspected("b", "exited", 0)})
    assert (s["phase"], podstatus.display(s)) == ("Succeeded", "Completed")
    s = status(done, {"web": inspected("a", "exited", 0), "side": inspected("b", "exited", 1)})
    assert (s["phase"], podstatus.display(s)) == ("Failed", "Error")
    assert s["containerStatuses"][1]["state"]["terminated"] == {"exitCode": 1, "reason": "Error",
                                                                "startedAt": "t0", "finishedAt": "t1"}
    s = status(done, {"web": inspected("a", "running"), "side": inspected("b", "restarting", 1, restarting=True)})
    assert (s["phase"], podstatus.display(s)) == ("Running", "CrashLoopBackOff")
    assert podstatus.sandbox_pod(True) == {"phase": "Running", "reason": "NetworkOnly",
                                           "message": podstatus.NETWORK_ONLY, "containerStatuses": []}


def test_a_jobs_status_counts_its_pods() -> None:
    want = desired(parse(workload("Job", "batch/v1", "completions: 2\n  backoffLimit: 1", "Never")))
    ok = {"phase": "Succeeded", "containerStatuses": [{"restartCount": 0}]}
    assert podstatus.job(want, "Job/w", {("n", "w-0"): ok}) == {"succeeded": 1, "failed": 0, "active": 1}
    assert podstatus.job(want, "Job/w", {("n", "w-0"): ok, ("n", "w-1"): ok})["conditions"] == \
        [{"type": "Complete", "status": "True"}]
    retried = {"phase": "Failed", "containerStatuses": [{"restartCount": 0}]}   # within backoffLimit: retried
    assert podstatus.job(want, "Job/w", {("n", "w-0"): ok, ("n", "w-1"): retried})["failed"] == 0
    spent = {"phase": "Failed", "containerStatuses": [{"restartCount": 1}]}
    assert podstatus.job(want, "Job/w", {("n", "w-0"): ok, ("n", "w-1"): spent})["conditions"][0]["reason"] == \
        "BackoffLimitExceeded"


def test_a_jobs_parallelism_holds_back_its_later_pods() -> None:
    """Up to ``parallelism`` pods made and unfinished at once, in ordinal order; a pod
    finishing makes room for the next; completions unset: ``parallelism`` pods."""
    from netbay.k8s.jobgate import held, watched

    want = desired(parse(workload("Job", "batch/v1", "completions: 5\n  parallelism: 2", "Never")))
    assert {p.parallelism for p in want.pods.values()} == {2} and len(want.pods) == 5
    keys = sorted(want.pods)
    made = Found(apps={"c": {"Id": "x"}})
    done = Found(apps={"c": {"Id": "done"}})

    def finished(found: Found) -> bool:
        return found.apps["c"]["Id"] == "done"
    assert held(want.pods, keys, {}, finished) == {("n", "w-2"), ("n", "w-3"), ("n", "w-4")}
    running = {("n", "w-0"): made, ("n", "w-1"): made}
    wait = held(want.pods, keys, running, finished)
    assert wait == {("n", "w-2"), ("n", "w-3"), ("n", "w-4")}
    assert watched(want.pods, wait, running, finished) == [made, made]
    wait = held(want.pods, keys, {("n", "w-0"): done, ("n", "w-1"): made}, finished)
    assert wait == {("n", "w-3"), ("n", "w-4")}, "w-0 finished: w-2 may start"
    assert watched(want.pods, wait, {("n", "w-0"): done, ("n", "w-1"): made}, finished) == [made]
    queue = desired(parse(workload("Job", "batch/v1", "parallelism: 3", "Never")))
    assert len(queue.pods) == 3 and held(queue.pods, sorted(queue.pods), {}, finished) == set()
    default = desired(parse(workload("Job", "batch/v1", "completions: 2", "Never")))
    assert held(default.pods, sorted(default.pods), {}, finished) == {("n", "w-1")}, "parallelism 1"
    ok = {"phase": "Succeeded", "containerStatuses": [{"restartCount": 0}]}
    assert podstatus.job(want, "Job/w", {("n", "w-0"): ok}) == {"succeeded": 1, "failed": 0, "active": 2}
    with pytest.raises(ManifestError, match="greater than or equal to 0"):
        parse(workload("Job", "batch/v1", "parallelism: -1", "Never"))
