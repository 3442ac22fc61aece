"""Whole pods and every workload kind on the Docker runtime, with a real dockerd (issue 27).

The module's kuryr cluster (two workers) has ``kuryr_pod_runtime=docker``. Checked: a pod's
initContainer writes into an emptyDir the file its first container serves, and its
second container fetches it over localhost (one network namespace: the sandbox's), a
peer pod over the pod's port; a Job runs to completion (Succeeded, the Job Complete) and
a failing one stops at its backoffLimit; a container exiting 1 under ``restartPolicy:
Never`` fails its pod with reason Error, a failing init container with Init:Error and no
app (under ``OnFailure``: run again, bounded, then Init:CrashLoopBackOff), a Job's
``OnFailure`` pod restarted by Docker up to its backoffLimit; a StatefulSet's pods come up in ordinal order under stable names, a pod waits for
its predecessor; a DaemonSet runs one pod per node; ``netbay k8s apply`` SIGKILLed then a
resync adopts what exists and deletes what nothing wants (containers and volumes), and
scaling down converges; an app container labelled before containers had names is adopted.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.k8s import podstatus
from netbay.k8s.controller import Controller
from netbay.k8s.dockerpods import CLUSTER, CONTAINER, POD, PORT, ROLE
from netbay.k8s.objects import desired, parse

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .cluster_pods import make_cluster
from .docker_fixtures import sh
from .k8s_fixtures import (cli_env, controller, http_get, k8s_cli, k8s_cloud, keys_of, killed_apply, pod_ns,
                           port_of)

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))


@pytest.fixture(scope="module")
def daemon() -> Iterator[dk.Dockerd]:
    yield from dk.running()


@pytest.fixture(scope="module")
def cloud(daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    yield from k8s_cloud(tmp_path_factory.mktemp("k8spods"), "kp")


@pytest.fixture(scope="module")
def cluster(cloud: Cloud) -> str:
    return make_cluster(cloud, "kpods", {"kuryr_pod_subnet_pool": "10.51.0.0/16",
                                         "kuryr_service_cidr": "10.251.0.0/16", "kuryr_pod_runtime": "docker"},
                        2, driver="kuryr")


@pytest.fixture
def ctrl(cloud: Cloud, cluster: str, daemon: dk.Dockerd) -> Iterator[Controller]:
    with controller(cloud, cluster) as c:
        c.dockerpods.use(daemon.client)
        yield c
    assert containers(daemon) == {}, "containers left after delete_all"
    assert not volumes(daemon), "volumes left after delete_all"


def containers(daemon: dk.Dockerd) -> dict[str, list[str]]:
    """pod → ``role:name`` of its containers."""
    out: dict[str, list[str]] = {}
    for c in daemon.client.api.containers(all=True, filters={"label": CLUSTER}):
        labels = c["Labels"]
        out.setdefault(labels[POD], []).append(":".join(filter(None, (labels[ROLE], labels.get(CONTAINER)))))
    return {k: sorted(v) for k, v in out.items()}


def volumes(daemon: dk.Dockerd) -> list[str]:
    return sorted(v["Name"] for v in daemon.client.api.volumes(filters={"label": CLUSTER}).get("Volumes") or [])


def ctr(daemon: dk.Dockerd, pod: str, name: str):  # docker.models.containers.Container
    [found] = daemon.client.containers.list(all=True, filters={"label": [f"{POD}={pod}", f"{CONTAINER}={name}"]})
    return found


def ts(stamp: str) -> str:
    """Docker's RFC 3339 time (trailing zeros of its nanoseconds trimmed) as a comparable string."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return f"{head}.{frac.ljust(9, '0')}"


def statuses(ctrl: Controller) -> dict[tuple[str, str], dict]:
    return podstatus.of_cluster(ctrl)


def phase(ctrl: Controller, ns: str, name: str) -> str:
    return statuses(ctrl)[(ns, name)]["phase"]


# GET / over localhost (busybox nc; its wget crashes in this image): the body is the last line.
GET_LOCAL = r"printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 127.0.0.1 8080 | tail -n 1"

WEB = f"""
apiVersion: v1
kind: Pod
metadata: {{name: peer, namespace: web, annotations: {{netbay.io/runtime: sandbox}}}}
spec: {{containers: [{{name: c, image: busybox}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: site, namespace: web}}
spec:
  volumes: [{{name: www, emptyDir: {{}}}}]
  initContainers:
  - name: fill
    image: {dk.IMAGE}
    command: [sh, -c, "sleep 1; echo written-by-init > /w/index.html"]
    volumeMounts: [{{name: www, mountPath: /w}}]
  containers:
  - name: server
    image: {dk.IMAGE}
    command: [httpd, -f, -p, "8080", -h, /w]
    volumeMounts: [{{name: www, mountPath: /w, readOnly: true}}]
  - name: client
    image: {dk.IMAGE}
    command: [sleep, "600"]
    env: [{{name: ROLE, value: client}}]
"""


def test_a_pod_runs_its_init_container_then_both_containers_in_one_namespace(
        cloud: Cloud, ctrl: Controller, daemon: dk.Dockerd) -> None:
    report = ctrl.apply(parse(WEB))
    assert containers(daemon) == {"web/site": ["app:client", "app:server", "init:fill", "sandbox"]}, report
    fill, server, client = (ctr(daemon, "web/site", n) for n in ("fill", "server", "client"))
    # The init container ran to completion before either container started.
    assert fill.attrs["State"]["ExitCode"] == 0 and fill.attrs["State"]["Status"] == "exited"
    assert ts(fill.attrs["State"]["FinishedAt"]) <= ts(server.attrs["State"]["StartedAt"])
    assert ts(fill.attrs["State"]["FinishedAt"]) <= ts(client.attrs["State"]["StartedAt"])
    # One network namespace: the sandbox's, plugged to the pod's port.
    ns = pod_ns(ctrl, "web", "site")
    [sandbox] = daemon.client.containers.list(filters={"label": [f"{POD}=web/site", f"{ROLE}=sandbox"]})
    inodes = {os.stat(f"/proc/{c.attrs['State']['Pid']}/ns/net").st_ino for c in (sandbox, server, client)}
    assert inodes == {os.stat(f"/run/netns/{ns}").st_ino}
    # The second container reaches the first on localhost; it serves what the init container wrote.
    assert wait_for(lambda: sh(client, GET_LOCAL)[1].strip() == "written-by-init", 10, 0.1)
    assert sh(client, "echo $ROLE")[1].strip() == "client"
    # ... and a peer pod reaches it through the pod's port.
    ip = port_of(ctrl, "web", "site")["fixed_ips"][0]["ip_address"]
    assert wait_for(lambda: http_get(pod_ns(ctrl, "web", "peer"), ip, 8080), 10, 0.1) == b"written-by-init"
    status = statuses(ctrl)[("web", "site")]
    assert (status["phase"], podstatus.display(status)) == ("Running", "Running")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert [s["ready"] for s in status["containerStatuses"]] == [True, True]
    assert statuses(ctrl)[("web", "peer")]["reason"] == "NetworkOnly"   # the sandbox runtime says so
    # ``netbay k8s pods``: kubectl's columns.
    done = subprocess.run(k8s_cli(cloud, ctrl.refs.cluster_id, "pods"), capture_output=True, text=True,
                          env={**cli_env(cloud), "NETBAY_DOCKER_HOST": daemon.host}, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split() for line in done.stdout.splitlines()] == [
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS"], ["web", "peer", "0/0", "Running", "0"],
        ["web", "site", "2/2", "Running", "0"]], done.stdout
    assert ctrl.resync().made == []   # adopted as it is: the init container is not run again
    assert ctr(daemon, "web/site", "fill").id == fill.id
    # A pod the runtime cannot run as written is refused by name at apply, never trimmed.
    with pytest.raises(Exception, match=r"spec.volumes\[0\] \(www\): hostPath is not supported"):
        ctrl.refuse(parse(WEB.replace("emptyDir: {}", "hostPath: {path: /srv}")))


FAILS = f"""
apiVersion: v1
kind: Pod
metadata: {{name: exits, namespace: f}}
spec:
  restartPolicy: Never
  containers: [{{name: c, image: {dk.IMAGE}, command: [sh, -c, "exit 1"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: badinit, namespace: f}}
spec:
  restartPolicy: Never
  initContainers: [{{name: setup, image: {dk.IMAGE}, command: [sh, -c, "exit 3"]}}]
  containers: [{{name: c, image: {dk.IMAGE}, command: [sleep, "600"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: retries, namespace: f}}
spec:
  restartPolicy: OnFailure
  initContainers: [{{name: setup, image: {dk.IMAGE}, command: [sh, -c, "exit 4"]}}]
  containers: [{{name: c, image: {dk.IMAGE}, command: [sleep, "600"]}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: restarts, namespace: f}}
spec:
  backoffLimit: 2
  template:
    spec:
      restartPolicy: OnFailure
      containers: [{{name: c, image: {dk.IMAGE}, command: [sh, -c, "exit 5"]}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: once, namespace: f}}
spec:
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: {dk.IMAGE}, command: [sh, -c, "echo done"]}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: never, namespace: f}}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: {dk.IMAGE}, command: [sh, -c, "exit 2"]}}]
"""


def test_jobs_complete_and_failures_are_reported_with_their_reason(ctrl: Controller, daemon: dk.Dockerd) -> None:
    ctrl.apply(parse(FAILS))
    assert wait_for(lambda: phase(ctrl, "f", "exits") == "Failed", 20, 0.2)
    [c] = statuses(ctrl)[("f", "exits")]["containerStatuses"]
    assert c["state"]["terminated"]["reason"] == "Error" and c["state"]["terminated"]["exitCode"] == 1
    assert podstatus.display(statuses(ctrl)[("f", "exits")]) == "Error"
    bad = statuses(ctrl)[("f", "badinit")]   # its init container failed: no app was made
    assert (bad["phase"], podstatus.display(bad)) == ("Failed", "Init:Error")
    assert bad["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert "f/badinit" in containers(daemon) and "app:c" not in containers(daemon)["f/badinit"]
    # Under OnFailure a failing init container is run again, a bounded number of times, then given up.
    retries = statuses(ctrl)[("f", "retries")]
    assert (retries["phase"], podstatus.display(retries)) == ("Pending", "Init:CrashLoopBackOff")
    assert retries["initContainerStatuses"][0]["restartCount"] == 3
    assert sorted(containers(daemon)["f/retries"]) == ["init:setup", "sandbox"]
    # A Job's OnFailure pod: Docker restarts it up to backoffLimit, then it and the Job have failed.
    assert wait_for(lambda: phase(ctrl, "f", "restarts-0") == "Failed", 30, 0.2)
    assert statuses(ctrl)[("f", "restarts-0")]["containerStatuses"][0]["restartCount"] == 2
    assert podstatus.job(desired(parse(FAILS)), "Job/restarts", statuses(ctrl))["conditions"][0]["type"] == "Failed"
    # A Job whose pods exit 0: Succeeded, the Job Complete.
    assert wait_for(lambda: {phase(ctrl, "f", f"once-{i}") for i in range(2)} == {"Succeeded"}, 20, 0.2)
    want = desired(parse(FAILS))
    assert podstatus.job(want, "Job/once", statuses(ctrl))["conditions"] == [{"type": "Complete", "status": "True"}]
    # A failing Job's pod is run again (full passes) until its backoffLimit, then the Job has Failed.
    assert wait_for(lambda: phase(ctrl, "f", "never-0") == "Failed", 20, 0.2)
    first = ctr(daemon, "f/never-0", "c").id
    ctrl.resync()
    again = ctr(daemon, "f/never-0", "c")
    assert again.id != first and again.labels["netbay.k8s.attempt"] == "1"
    assert wait_for(lambda: phase(ctrl, "f", "never-0") == "Failed", 20, 0.2)
    ctrl.resync()   # the limit reached: not run again
    assert ctr(daemon, "f/never-0", "c").id == again.id
    job = podstatus.job(want, "Job/never", statuses(ctrl))
    assert job["failed"] == 1 and job["conditions"][0]["reason"] == "BackoffLimitExceeded"
    # Finished pods are not restarted by a pass either.
    assert ctrl.resync().made == [] and phase(ctrl, "f", "once-0") == "Succeeded"


PARALLEL = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: batch, namespace: j}}
spec:
  completions: 4
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: {dk.IMAGE}, command: [sh, -c, "sleep 1"]}}]
"""


def _instant(rfc3339: str) -> tuple[str, int]:
    """Docker's RFC 3339 UTC time (nanoseconds, trailing zeros trimmed) as a sortable pair."""
    whole, _, frac = rfc3339.rstrip("Z").partition(".")
    return whole, int(frac.ljust(9, "0"))


def test_a_jobs_parallelism_bounds_its_running_pods_until_completions(ctrl: Controller, daemon: dk.Dockerd) -> None:
    """``parallelism: 2``, ``completions: 4``: two pods at once, the next made as one
    finishes (no resync asked: the controller's follow-up pass), four Succeeded, the Job
    Complete with its counts."""
    report = ctrl.apply(parse(PARALLEL))
    assert sorted(containers(daemon)) == ["j/batch-0", "j/batch-1"]
    assert sum("Waiting" in e and "parallelism" in e for e in report.events) == 2, report.events

    def finished() -> bool:
        return {phase(ctrl, "j", f"batch-{i}") for i in range(4)} == {"Succeeded"}
    assert wait_for(finished, 60, 0.1, "four completions")
    # How many ran at once, from Docker's own record of each app container's run (started,
    # finished), not from sampling: a loaded host can start and end a 1 s container between
    # two polls.
    runs = []
    for c in daemon.client.api.containers(all=True, filters={"label": [f"{ROLE}=app", CLUSTER]}):
        if c["Labels"][POD].startswith("j/batch-"):
            state = daemon.client.api.inspect_container(c["Id"])["State"]
            runs.append((c["Labels"][POD], state["StartedAt"], state["FinishedAt"]))
    assert sorted(pod for pod, _, _ in runs) == [f"j/batch-{i}" for i in range(4)], runs
    edges = sorted([(_instant(start), 1) for _, start, _ in runs] + [(_instant(end), -1) for _, _, end in runs])
    at_once = most = 0
    for _, step in edges:
        at_once += step
        most = max(most, at_once)
    assert most == 2, runs
    want = desired(parse(PARALLEL))
    assert podstatus.job(want, "Job/batch", statuses(ctrl)) == {
        "succeeded": 4, "failed": 0, "active": 0, "conditions": [{"type": "Complete", "status": "True"}]}


def statefulset(replicas: int, image: str = dk.IMAGE) -> str:
    return f"""
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: s}}
spec:
  replicas: {replicas}
  serviceName: db
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      containers: [{{name: c, image: "{image}", command: [sleep, "600"]}}]
"""


def test_a_statefulset_comes_up_in_order_under_stable_names(ctrl: Controller, daemon: dk.Dockerd) -> None:
    ctrl.apply(parse(statefulset(3)))
    assert containers(daemon) == {f"s/db-{i}": ["app:c", "sandbox"] for i in range(3)}
    apps = [ctr(daemon, f"s/db-{i}", "c") for i in range(3)]
    for before, after in zip(apps, apps[1:]):   # each created once the one before it ran
        assert ts(before.attrs["State"]["StartedAt"]) <= ts(after.attrs["Created"])
    assert [sh(c, "hostname")[1].strip() for c in apps] == ["db-0", "db-1", "db-2"]
    ports = {i: port_of(ctrl, "s", f"db-{i}")["id"] for i in range(3)}
    # A pod's containers gone (a crash): made again under the same name, on the same port.
    daemon.client.api.remove_container(apps[1].id, force=True)
    ctrl.resync()
    assert ctr(daemon, "s/db-1", "c").status == "running" and port_of(ctrl, "s", "db-1")["id"] == ports[1]
    # Scale down: the highest ordinals go; up again: the same names come back.
    ctrl.apply(parse(statefulset(1)))
    assert containers(daemon) == {"s/db-0": ["app:c", "sandbox"]}
    ctrl.apply(parse(statefulset(2)))
    assert containers(daemon).keys() == {"s/db-0", "s/db-1"}
    # A predecessor that cannot run holds the rest back (and says so).
    ctrl.delete(keys_of(statefulset(2)))
    report = ctrl.apply(parse(statefulset(2, "nbt-missing:1").replace("command:", "imagePullPolicy: Never, command:")))
    assert "Normal pod s/db-1 Waiting: db-0 is not Running" in report.events, report.events
    assert containers(daemon) == {}


DAEMONSET = f"""
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: d}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      containers:
      - name: c
        image: {dk.IMAGE}
        command: [sleep, "600"]
        env: [{{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}]
"""


def test_a_daemonset_runs_one_pod_per_node(ctrl: Controller, daemon: dk.Dockerd) -> None:
    workers = [n for n in ctrl.refs.nodes if "master" not in n]
    assert len(workers) == 2, ctrl.refs.nodes
    ctrl.apply(parse(DAEMONSET))
    assert containers(daemon) == {f"d/agent-{n}": ["app:c", "sandbox"] for n in workers}
    for n in workers:
        assert sh(ctr(daemon, f"d/agent-{n}", "c"), "echo $NODE")[1].strip() == n
        assert port_of(ctrl, "d", f"agent-{n}")["description"] == f"node={n}"
    assert {phase(ctrl, "d", f"agent-{n}") for n in workers} == {"Running"}


def test_sigkill_mid_apply_then_resync_adopts_and_deletes_what_nothing_wants(
        cloud: Cloud, ctrl: Controller, daemon: dk.Dockerd, tmp_path: Path) -> None:
    text = statefulset(4) + "---" + WEB
    (tmp_path / "m.yaml").write_text(text)
    killed_apply(cloud, ctrl.refs.cluster_id, tmp_path / "m.yaml",   # once some containers exist, not all
                 lambda: sum("app:c" in v for v in containers(daemon).values()) >= 2, {"NETBAY_DOCKER_HOST": daemon.host})
    made = {c["Id"] for c in daemon.client.api.containers(all=True, filters={"label": [CLUSTER, f"{ROLE}=app"]})}
    # Leftovers nothing wants (a pod deleted while no controller ran): a container and a volume.
    stray = daemon.client.containers.create(dk.IMAGE, ["sleep", "600"], labels={
        CLUSTER: ctrl.refs.cluster_id, POD: "gone/pod", PORT: "0" * 32, ROLE: "sandbox"})
    daemon.client.api.create_volume("nbt-stray", labels={CLUSTER: ctrl.refs.cluster_id, POD: "gone/pod"})
    report = ctrl.resync()
    assert "container gone/pod" in report.deleted, report.deleted
    want = {f"s/db-{i}": ["app:c", "sandbox"] for i in range(4)}
    want["web/site"] = ["app:client", "app:server", "init:fill", "sandbox"]
    assert containers(daemon) == want
    assert "nbt-stray" not in volumes(daemon) and len(volumes(daemon)) == 1   # the site's emptyDir
    running = {c["Id"] for c in daemon.client.api.containers(filters={"label": [CLUSTER, f"{ROLE}=app"]})}
    assert made & running, "what the killed apply made is adopted"
    with pytest.raises(Exception):  # noqa: B017 - docker's NotFound
        stray.reload()
    ip = port_of(ctrl, "web", "site")["fixed_ips"][0]["ip_address"]
    assert wait_for(lambda: http_get(pod_ns(ctrl, "s", "db-0"), ip, 8080), 10, 0.1) == b"written-by-init"
    assert ctrl.resync().made == [] and ctrl.resync().deleted == []   # converged
    ctrl.apply(parse(statefulset(2) + "---" + WEB))   # scale down converges
    assert containers(daemon).keys() == {"s/db-0", "s/db-1", "web/site"}
    ctrl.delete(keys_of(text))
    assert containers(daemon) == {} and not volumes(daemon)


def test_an_app_container_from_before_container_names_is_adopted(ctrl: Controller, daemon: dk.Dockerd) -> None:
    """An upgrade restarts no pod: an app container labelled as before containers had names
    (no ``netbay.k8s.container``) is the pod's first container while its spec hash matches."""
    text = statefulset(1)
    ctrl.apply(parse(text))
    new = ctr(daemon, "s/db-0", "c")
    old_labels = {k: v for k, v in new.labels.items() if k not in (CONTAINER, "netbay.k8s.attempt")}
    [sandbox] = daemon.client.containers.list(filters={"label": [f"{POD}=s/db-0", f"{ROLE}=sandbox"]})
    new.remove(force=True)
    old = daemon.client.containers.run(dk.IMAGE, ["sleep", "600"], detach=True, labels=old_labels,
                                       network_mode=f"container:{sandbox.id}")
    assert ctrl.resync().made == []
    assert containers(daemon) == {"s/db-0": ["app", "sandbox"]}   # kept as it was: not made again
    old.reload()
    assert old.status == "running"
    assert statuses(ctrl)[("s", "db-0")]["containerStatuses"][0]["state"].keys() == {"running"}
