"""Docker-runtime pods on a kuryr cluster, with a real dockerd and real packets (issue 12).

The module's cluster has ``kuryr_pod_runtime=docker``: its pods are Docker containers
(a sandbox holding the namespace on the pod's port, the app from the pod spec joined
to it) of the tests' own dockerd (off the host's network, busybox imported, no
registry); a pod annotated ``netbay.io/runtime: sandbox`` is a sandbox namespace.
Checked: a Deployment of Docker pods behind a ClusterIP Service answers a sandbox pod
by DNS name and by its Service variables, and a Docker pod by its own (its container
has the port's MAC and address, the resolver in its resolv.conf); scaling and
deleting change the containers; a NetworkPolicy deny drops traffic to a Docker pod
and allowing it restores it; ``netbay k8s apply`` SIGKILLed mid-way then a resync
leaves exactly the manifests' containers, and deleting everything leaves nothing; a
Docker pod's environment is a kubelet's (fieldRef, ConfigMap and Secret keys, envFrom,
``$(VAR)`` in env and args), a missing reference keeps that pod only from starting and
``netbay k8s apply`` says why.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from netbay.client import NET
from netbay.dataplane import netns
from netbay.k8s.controller import Controller
from netbay.k8s.dockerpods import CLUSTER, POD, PORT, ROLE, sweep_orphans
from netbay.k8s.objects import desired, parse

from . import dockerd as dk
from . import k8s_docs
from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener
from .docker_fixtures import sh
from .cluster_pods import make_cluster
from .k8s_fixtures import (cli_env, http_get, controller, getent, in_pod, k8s_cloud, keys_of, killed_apply, lb, pod_ns,
                           policy_quota, port_of)
from tests import zygote

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

# Serves its hostname (the pod's name: the sandbox's UTS namespace) on 8080.
WEB = '["sh", "-c", "mkdir -p /w && hostname > /w/index.html && exec httpd -f -p 8080 -h /w"]'
# GET / of the Service by its variables, from inside a Docker pod (busybox nc; its wget crashes
# in this image); the body is the last line.
GET_BY_ENV = r"printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 $WEB_SERVICE_HOST $WEB_SERVICE_PORT | tail -n 1"


@pytest.fixture(scope="module")
def daemon() -> Iterator[dk.Dockerd]:
    yield from dk.running()


@pytest.fixture(scope="module")
def cloud(daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    yield from k8s_cloud(tmp_path_factory.mktemp("k8sdocker"), "kk")


@pytest.fixture(scope="module")
def cluster(cloud: Cloud) -> str:
    policy_quota(cloud)   # a cluster's policies
    return make_cluster(cloud, "kdocker", {"kuryr_pod_subnet_pool": "10.50.0.0/16",
                                           "kuryr_service_cidr": "10.252.0.0/16", "kuryr_pod_runtime": "docker"},
                        1, driver="kuryr")


@pytest.fixture
def ctrl(cloud: Cloud, cluster: str, daemon: dk.Dockerd) -> Iterator[Controller]:
    with controller(cloud, cluster) as c:
        c.dockerpods.use(daemon.client)
        yield c
    assert containers(daemon) == {}, "containers left after delete_all"


def containers(daemon: dk.Dockerd) -> dict[str, list[str]]:
    """pod → the roles of its containers, of every Docker-runtime pod on the daemon."""
    out: dict[str, list[str]] = {}
    for c in daemon.client.api.containers(all=True, filters={"label": CLUSTER}):
        out.setdefault(c["Labels"][POD], []).append(c["Labels"][ROLE])
    return {k: sorted(v) for k, v in out.items()}


def app(daemon: dk.Dockerd, ns: str, name: str):  # docker.models.containers.Container
    [found] = daemon.client.containers.list(filters={"label": [f"{POD}={ns}/{name}", f"{ROLE}=app"]})
    return found


def dropped(ns: str, host: str, port: int) -> bool:
    """The SYN went unanswered (a drop, not a refusal)."""
    try:
        with netns.entered(ns):
            socket.create_connection((host, port), timeout=1.0).close()
    except TimeoutError:
        return True
    except OSError:
        return False
    return False


SHOP = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: shop}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: http}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: {dk.IMAGE}
        command: {WEB}
        env: [{{name: GREETING, value: hello}}]
        ports: [{{name: http, containerPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: shop, annotations: {{netbay.io/runtime: sandbox}}}}
spec: {{containers: [{{name: c, image: busybox}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: dclient, namespace: shop}}
spec: {{containers: [{{name: c, image: "{dk.IMAGE}", command: [sleep], args: ["600"]}}]}}
"""


def test_docker_deployment_behind_a_service_answers_by_name_and_env(
        cloud: Cloud, ctrl: Controller, daemon: dk.Dockerd) -> None:
    report = ctrl.apply(parse(SHOP))
    assert sum(m.startswith("container ") for m in report.made) == 3, report.made
    assert containers(daemon) == {p: ["app", "sandbox"] for p in ("shop/dclient", "shop/web-0", "shop/web-1")}
    # The sandbox pod is no container; the Docker pods' ports are pods' ports like any.
    web0 = port_of(ctrl, "shop", "web-0")
    assert web0["device_owner"] == "compute:kuryr"
    cloud.wait_status(f"/network/v2.0/ports/{web0['id']}", "ACTIVE")
    c = app(daemon, "shop", "web-0")
    code, out = sh(c, "ip -o link show eth0; ip -o -4 addr show eth0; hostname; echo $GREETING")
    assert code == 0, out
    assert web0["mac_address"] in out and f"inet {web0['fixed_ips'][0]['ip_address']}/" in out, out
    assert out.split()[-2:] == ["web-0", "hello"], out

    client = pod_ns(ctrl, "shop", "client")
    vip = lb(ctrl, "shop/web")["vip_address"]
    # By DNS name (glibc in the sandbox pod, its resolv.conf), through the cluster IP, to both containers.
    assert wait_for(lambda: getent(client, "web.shop.svc.cluster.local") == [vip], 10, 0.1)
    get = ("import socket, os; s = socket.create_connection((os.environ.get('HOST', 'web'), "
           "int(os.environ.get('PORT', 80))), 3); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); "
           "print(s.makefile('rb').read().split(b'\\r\\n\\r\\n', 1)[1].decode().strip())")
    seen: set[str] = set()
    deadline = time.monotonic() + 20
    while seen != {"web-0", "web-1"} and time.monotonic() < deadline:
        seen.add(in_pod(client, "python3", "-c", get).stdout.strip())
        seen.discard("")
    assert seen == {"web-0", "web-1"}
    # By the Service variables the sandbox pod got.
    by_env = in_pod(client, "sh", "-c", "set -a; . /etc/environment; HOST=$WEB_SERVICE_HOST "
                                        f"PORT=$WEB_SERVICE_PORT python3 -c \"{get}\"")
    assert by_env.stdout.strip() in ("web-0", "web-1"), by_env.stdout + by_env.stderr

    # A Docker pod: its variables (made after the Service), its resolv.conf, and the Service by them.
    d = app(daemon, "shop", "dclient")
    code, out = sh(d, "echo $WEB_SERVICE_HOST:$WEB_SERVICE_PORT; cat /etc/resolv.conf")
    assert out.splitlines()[0] == f"{vip}:80", out
    assert f"nameserver {ctrl.discovery.resolver.address}" in out and "search shop.svc.cluster.local" in out, out
    assert sh(d, GET_BY_ENV)[1].strip() in ("web-0", "web-1")
    # ... and the resolver it was given answers it (busybox nslookup reads its resolv.conf).
    code, out = sh(d, "nslookup web.shop.svc.cluster.local")
    assert code == 0 and vip in out, out
    # Its namespace has the sandbox pods' files too (``netbay k8s exec`` / ``ip netns exec`` see the same).
    assert f"WEB_SERVICE_HOST={vip}" in Path(f"/etc/netns/{pod_ns(ctrl, 'shop', 'dclient')}/environment").read_text()

    # Scale down then up: the containers follow (and the members: only web-0 answers meanwhile).
    ctrl.apply(parse(SHOP.replace("replicas: 2", "replicas: 1")))
    assert containers(daemon).keys() == {"shop/dclient", "shop/web-0"}
    assert not ctrl.api.call("GET", f"{NET}/ports", name="shop/web-1")["ports"]
    assert wait_for(lambda: {http_get(client, vip, 80) for _ in range(6)} == {b"web-0"}, 10, 0.1)
    ctrl.apply(parse(SHOP.replace("replicas: 2", "replicas: 3")))
    assert containers(daemon).keys() == {"shop/dclient", "shop/web-0", "shop/web-1", "shop/web-2"}
    assert wait_for(lambda: http_get(client, port_of(ctrl, "shop", "web-2")["fixed_ips"][0]["ip_address"], 8080),
                    10, 0.1) == b"web-2"

    # A pod deleted: its containers, port and namespace go.
    ns = pod_ns(ctrl, "shop", "dclient")
    ctrl.delete([k for k in keys_of(SHOP) if k.name == "dclient"])
    assert "shop/dclient" not in containers(daemon)
    assert not ctrl.api.call("GET", f"{NET}/ports", name="shop/dclient")["ports"] and not netns.exists(ns)
    # A pass with nothing to do touches nothing.
    assert ctrl.resync().made == [] and ctrl.resync().deleted == []


POLICY = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-friends, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {role: friend}}}]}]
"""


def test_network_policy_drops_and_restores_traffic_to_a_docker_pod(ctrl: Controller, daemon: dk.Dockerd) -> None:
    text = SHOP.replace("replicas: 2", "replicas: 1")
    ctrl.apply(parse(text))
    client = pod_ns(ctrl, "shop", "client")
    web = port_of(ctrl, "shop", "web-0")["fixed_ips"][0]["ip_address"]
    assert wait_for(lambda: http_get(client, web, 8080), 10, 0.1) == b"web-0"
    ctrl.apply(parse(text + "---" + POLICY))           # the client is no friend: dropped
    assert wait_for(lambda: dropped(client, web, 8080), 10, 0.05)
    # ... and from the Docker client too, through the cluster IP.
    d = app(daemon, "shop", "dclient")
    assert sh(d, GET_BY_ENV)[1].strip() == "nc: timed out"   # dropped: not refused
    friendly = text.replace("metadata: {name: client, namespace: shop, annotations",
                            "metadata: {name: client, namespace: shop, labels: {role: friend}, annotations")
    ctrl.apply(parse(friendly + "---" + POLICY))       # a label change lets it in again
    assert wait_for(lambda: http_get(client, web, 8080), 10, 0.05) == b"web-0"
    ctrl.delete([k for k in keys_of(POLICY)])          # and the policy gone lets everyone in
    assert wait_for(lambda: sh(d, GET_BY_ENV)[1].strip() == "web-0", 10, 0.1)


def many(namespaces: int, replicas: int) -> str:
    return k8s_docs.many([f"m{i}" for i in range(namespaces)], lambda ns: [
        k8s_docs.deployment(ns, "d", "d", replicas, dk.IMAGE, WEB), k8s_docs.service(ns, "s", "d", 80, 8080)])


def test_sigkill_mid_apply_then_resync_adopts_and_leaves_nothing_over(
        cloud: Cloud, ctrl: Controller, daemon: dk.Dockerd, tmp_path: Path) -> None:
    text = many(2, 4)
    (tmp_path / "m.yaml").write_text(text)
    killed_apply(cloud, ctrl.refs.cluster_id, tmp_path / "m.yaml",   # once some containers exist, not all
                 lambda: sum(v == ["app", "sandbox"] for v in containers(daemon).values()) >= 2, {"NETBAY_DOCKER_HOST": daemon.host})
    # What the killed apply made whole is adopted, not made again.
    whole = {c["Id"] for c in daemon.client.api.containers(all=True, filters={"label": [CLUSTER, f"{ROLE}=app"]})}
    assert 2 <= len(whole) < 8
    # And a leftover nothing wants (a pod deleted while no controller ran): the resync removes it.
    stray = daemon.client.containers.create(dk.IMAGE, ["sleep", "600"], labels={
        CLUSTER: ctrl.refs.cluster_id, POD: "gone/pod", PORT: "0" * 32, ROLE: "sandbox"})
    report = ctrl.resync()
    assert "container gone/pod" in report.deleted, report.deleted
    want = {f"m{i}/d-{j}" for i in range(2) for j in range(4)}
    assert containers(daemon) == {p: ["app", "sandbox"] for p in want}
    assert whole <= {c["Id"] for c in daemon.client.api.containers(filters={"label": [CLUSTER, f"{ROLE}=app"]})}
    assert len([m for m in report.made if m.startswith("container ")]) <= 8 - len(whole)
    for c in daemon.client.api.containers(filters={"label": CLUSTER}):   # each on its pod's current port
        ns, name = c["Labels"][POD].split("/")
        assert c["Labels"][PORT] == port_of(ctrl, ns, name)["id"] and c["State"] == "running"
    ports = {p["name"] for p in ctrl.api.call("GET", f"{NET}/ports", tags=f"{ctrl.refs.tag},netbay-k8s=pod")["ports"]}
    assert ports == want and len(ctrl.sandboxes.existing()) == 8
    vip = lb(ctrl, "m1/s")["vip_address"]
    assert wait_for(lambda: http_get(pod_ns(ctrl, "m0", "d-0"), vip, 80), 10, 0.1) in \
        {f"d-{j}".encode() for j in range(4)}
    assert ctrl.resync().made == [] and ctrl.resync().deleted == []   # converged
    with pytest.raises(Exception):  # noqa: B017 - docker's NotFound (its errors module is not imported here)
        stray.reload()   # removed
    # The host sweep (``netbay k8s sweep``): containers whose port is gone, not the others.
    daemon.client.containers.create(dk.IMAGE, ["sleep", "600"], labels={
        CLUSTER: "another", POD: "x/y", PORT: "1" * 32, ROLE: "sandbox"})
    assert sweep_orphans(ctrl.net, daemon.client) == ["x/y"]
    assert containers(daemon) == {p: ["app", "sandbox"] for p in want}
    ctrl.delete(keys_of(text))
    assert containers(daemon) == {} and not ctrl.sandboxes.existing()
    assert not ctrl.api.call("GET", f"{NET}/ports", tags=f"{ctrl.refs.tag},netbay-k8s=pod")["ports"]


def test_a_pod_docker_cannot_run_is_that_pods_failure_only(
        ctrl: Controller, daemon: dk.Dockerd, caplog: pytest.LogCaptureFixture) -> None:
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: broken, namespace: b}}
spec: {{containers: [{{name: c, image: "nbt-missing:1", imagePullPolicy: Never}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: fine, namespace: b}}
spec: {{containers: [{{name: c, image: "{dk.IMAGE}", command: [sleep, "600"]}}]}}
"""
    report = ctrl.apply(parse(text))
    assert [m.split()[1] for m in report.made if m.startswith("container ")] == ["b/fine"]
    assert "pod b/broken not run: image nbt-missing:1 is not present and imagePullPolicy is Never" in caplog.text
    assert containers(daemon) == {"b/fine": ["app", "sandbox"]}
    ctrl.resync()   # tried again, no duplicate of what runs
    assert containers(daemon) == {"b/fine": ["app", "sandbox"]}
    # Docker unreachable: the sandbox pods are still made; Docker's wait for it to come back.
    more = text + f"""---
apiVersion: v1
kind: Pod
metadata: {{name: sandboxed, namespace: b, annotations: {{netbay.io/runtime: sandbox}}}}
spec: {{containers: [{{name: c, image: busybox}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: waits, namespace: b}}
spec: {{containers: [{{name: c, image: "{dk.IMAGE}", command: [sleep, "600"]}}]}}
"""
    ctrl.dockerpods.use(docker.DockerClient(base_url=f"unix://{daemon.root}/none.sock", version="1.41", timeout=5))
    try:
        ctrl.resync()
        report = ctrl.apply(parse(more))
        assert ctrl.sandboxes.plugged(port_of(ctrl, "b", "sandboxed")["id"])
        assert not any(m.startswith("container ") for m in report.made) and "Docker not reachable" in caplog.text
    finally:
        ctrl.dockerpods.use(daemon.client)
    ctrl.resync()   # Docker back: the waiting pod runs
    assert containers(daemon) == {"b/fine": ["app", "sandbox"], "b/waits": ["app", "sandbox"]}


def test_a_pods_runtime_changed_keeps_its_port(ctrl: Controller, daemon: dk.Dockerd) -> None:
    """The annotation changed on a live pod: the same port (address, MAC) moves from a
    sandbox namespace into Docker containers and back, answering each time."""
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: peer, namespace: rt, annotations: {{netbay.io/runtime: sandbox}}}}
spec: {{containers: [{{name: c, image: busybox}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: rt, annotations: {{netbay.io/runtime: sandbox}}}}
spec: {{containers: [{{name: c, image: "{dk.IMAGE}", command: {WEB}}}]}}
"""
    ctrl.apply(parse(text))
    before = port_of(ctrl, "rt", "p")
    peer = pod_ns(ctrl, "rt", "peer")
    ip = before["fixed_ips"][0]["ip_address"]
    assert containers(daemon) == {}
    ctrl.apply(parse(text.replace("name: p, namespace: rt, annotations: {netbay.io/runtime: sandbox}",
                                  "name: p, namespace: rt, annotations: {netbay.io/runtime: docker}")))
    assert containers(daemon) == {"rt/p": ["app", "sandbox"]} and port_of(ctrl, "rt", "p")["id"] == before["id"]
    assert wait_for(lambda: http_get(peer, ip, 8080), 10, 0.1) == b"p"
    ctrl.apply(parse(text))   # back to a sandbox: the containers go, a namespace of its own is plugged
    assert containers(daemon) == {} and port_of(ctrl, "rt", "p")["id"] == before["id"]
    assert ctrl.sandboxes.plugged(before["id"])
    server = Listener(pod_ns(ctrl, "rt", "p"), "0.0.0.0", 8080, b"sandboxed")
    try:
        assert wait_for(lambda: http_get(peer, ip, 8080), 10, 0.1) == b"sandboxed"
    finally:
        server.close()


def test_a_killed_sandbox_is_started_again_with_its_app(ctrl: Controller, daemon: dk.Dockerd) -> None:
    """A pod's sandbox container killed (its namespace with it): a full pass starts it
    again, plugs the port into its new namespace and restarts the app into it."""
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: peer, namespace: k, annotations: {{netbay.io/runtime: sandbox}}}}
spec: {{containers: [{{name: c, image: busybox}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: k}}
spec: {{containers: [{{name: c, image: "{dk.IMAGE}", command: {WEB}}}]}}
"""
    ctrl.apply(parse(text))
    peer, ip = pod_ns(ctrl, "k", "peer"), port_of(ctrl, "k", "p")["fixed_ips"][0]["ip_address"]
    assert wait_for(lambda: http_get(peer, ip, 8080), 10, 0.1) == b"p"
    [sandbox] = daemon.client.containers.list(filters={"label": [f"{POD}=k/p", f"{ROLE}=sandbox"]})
    sandbox.kill()   # the app holds the old namespace on
    sandbox.wait(timeout=10)
    ctrl.resync()
    sandbox.reload()
    assert sandbox.status == "running" and containers(daemon) == {"k/p": ["app", "sandbox"]}
    ns = pod_ns(ctrl, "k", "p")
    assert netns.inode(ns) == os.stat(f"/proc/{sandbox.attrs['State']['Pid']}/ns/net").st_ino
    app_pid = app(daemon, "k", "p").attrs["State"]["Pid"]
    assert os.stat(f"/proc/{app_pid}/ns/net").st_ino == netns.inode(ns)   # the app joined the new one
    assert wait_for(lambda: http_get(peer, ip, 8080), 10, 0.1) == b"p"
    assert ctrl.resync().made == []


# A Docker pod's environment as a kubelet makes it: the pod's own fields, a ConfigMap's and a
# Secret's keys, envFrom, the Service variables, and $(VAR) in env values and args. Its args print
# the expanded line (single quotes: the shell leaves the $$-escaped reference alone).
ENV = f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg, namespace: env}}
data: {{greeting: hello}}
---
apiVersion: v1
kind: Secret
metadata: {{name: creds, namespace: env}}
data: {{password: aHVudGVyMg==}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: env}}
spec: {{selector: {{app: web}}, ports: [{{port: 80, targetPort: 8080}}]}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: show, namespace: env}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: show}}}}
  template:
    metadata: {{labels: {{app: show}}}}
    spec:
      containers:
      - name: c
        image: {dk.IMAGE}
        command: [sh, -c]
        args: ["echo 'args: $(GREETING) $(POD_IP) $$(GREETING) $(NOPE)'; exec sleep 600"]
        envFrom: [{{configMapRef: {{name: cfg}}, prefix: CFG_}}]
        env:
        - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: APP, valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['app']"}}}}}}
        - {{name: GREETING, valueFrom: {{configMapKeyRef: {{name: cfg, key: greeting}}}}}}
        - {{name: PASSWORD, valueFrom: {{secretKeyRef: {{name: creds, key: password}}}}}}
        - {{name: URL, value: "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)/$(POD_NAME)"}}
        - {{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
        - {{name: HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: broken, namespace: env}}
spec:
  containers:
  - name: c
    image: {dk.IMAGE}
    command: [sleep, "600"]
    env: [{{name: LATER, valueFrom: {{configMapKeyRef: {{name: cfg, key: later}}}}}}]
"""
SHOW_ENV = "echo $POD_IP $POD_NAME $APP $GREETING $PASSWORD $CFG_greeting $URL $NODE $HOST_IP"


def test_a_docker_pods_env_from_its_fields_configmaps_secrets_and_expansion(
        ctrl: Controller, daemon: dk.Dockerd) -> None:
    report = ctrl.apply(parse(ENV))
    # The pod whose ConfigMap lacks its key: reported, not started; its neighbour runs.
    assert report.events == ["Warning pod env/broken CreateContainerConfigError: Error: couldn't find key later "
                             "in ConfigMap env/cfg"], report.events
    assert report.events[0] in str(report)
    assert containers(daemon) == {"env/show-0": ["app", "sandbox"]}
    ip, vip = port_of(ctrl, "env", "show-0")["fixed_ips"][0]["ip_address"], lb(ctrl, "env/web")["vip_address"]
    node = ctrl.node_of(desired(parse(ENV)).pods[("env", "show-0")])   # the pod's node, and its sandbox's address
    [host_ip] = [addr for name, _, addr in ctrl.refs.node_boxes if name == node]
    show = app(daemon, "env", "show-0")
    code, out = sh(show, SHOW_ENV)
    assert code == 0 and out.split() == [ip, "show-0", "show", "hello", "hunter2", "hello",
                                         f"http://{vip}:80/show-0", node, host_ip], out
    assert wait_for(lambda: "args:" in show.logs().decode(), 10, 0.05)
    assert show.logs().decode().splitlines()[0] == f"args: hello {ip} $(GREETING) $(NOPE)"
    assert ctrl.resync().events == ["Warning pod env/broken CreateContainerConfigError: Error: couldn't find key "
                                    "later in ConfigMap env/cfg"]   # tried again each pass, nothing else made
    assert containers(daemon) == {"env/show-0": ["app", "sandbox"]}

    # The key added and the greeting changed, one more replica: the waiting pod starts, the running one
    # keeps what it started with (no restart), the new one sees the new value.
    changed = ENV.replace("data: {greeting: hello}", "data: {greeting: hola, later: now}").replace(
        "replicas: 1", "replicas: 2")
    report = ctrl.apply(parse(changed))
    assert report.events == [] and containers(daemon).keys() == {"env/broken", "env/show-0", "env/show-1"}
    assert sh(app(daemon, "env", "broken"), "echo $LATER")[1].strip() == "now"
    assert app(daemon, "env", "show-0").id == show.id and sh(show, "echo $GREETING")[1].strip() == "hello"
    assert sh(app(daemon, "env", "show-1"), "echo $GREETING $CFG_greeting")[1].split() == ["hola", "hola"]


def test_cli_apply_prints_the_config_error_and_optional_references_are_omitted(
        cloud: Cloud, ctrl: Controller, daemon: dk.Dockerd, tmp_path: Path) -> None:
    """``netbay k8s apply`` says why a pod did not start; an ``optional`` reference to what is
    missing only leaves its variable out."""
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: needs, namespace: opt}}
spec: {{containers: [{{name: c, image: "{dk.IMAGE}", command: [sleep, "600"],
        envFrom: [{{secretRef: {{name: absent}}}}]}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: copes, namespace: opt}}
spec:
  containers:
  - name: c
    image: "{dk.IMAGE}"
    command: [sleep, "600"]
    envFrom: [{{configMapRef: {{name: absent, optional: true}}}}]
    env:
    - {{name: MAYBE, valueFrom: {{secretKeyRef: {{name: absent, key: k, optional: true}}}}}}
    - {{name: SURE, value: "x$(MAYBE)"}}
"""
    (tmp_path / "opt.yaml").write_text(text)
    done = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "apply", "-f", str(tmp_path / "opt.yaml"),
                       "--cluster", ctrl.refs.cluster_id, "--url", cloud.server.url, "--prefix", cloud.names.prefix],
                      env={**cli_env(cloud), "NETBAY_DOCKER_HOST": daemon.host}, capture_output=True, text=True,
                      timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'Warning pod opt/needs CreateContainerConfigError: Error: secret "absent" not found' in \
        " ".join(done.stdout.split()), done.stdout   # (rich wraps the line)
    assert containers(daemon) == {"opt/copes": ["app", "sandbox"]}
    assert sh(app(daemon, "opt", "copes"), 'echo "${MAYBE-unset} $SURE"')[1].strip() == "unset x$(MAYBE)"
