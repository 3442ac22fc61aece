"""The API-server source (list + watch) on a kuryr cluster, checked with real packets (issue 12).

No Kubernetes API server can run on this machine: the objects come from a stand-in
for one (``tests/k8s_standin.py``: the real API paths, real objects, real watch-event
framing, increasing resourceVersions, bookmarks, 410 Gone after a compaction),
reached through lightkube from a kubeconfig as kubectl reads it. The controller and
dataplane are the real ones. Checked: pods and Services created in the API server
become ports and load balancers that answer; each pod gets its port written back
(annotation ``netbay.io/vif``) once, without a pass looping on it; a pod deleted
there loses its port and its sandbox; changes missed while the server was
unreachable and its history compacted are found by the re-list after ``410 Gone``
(as an ERROR event and as an HTTP 410); a reconnect resumes from the bookmark's
resourceVersion; a watch gone silent is renewed from where it was, not re-listed;
lists are read in pages; a pod whose Ready condition turns False leaves its
Service's pool (connections reach the ready pods only) and rejoins when Ready; ``netbay k8s watch`` SIGKILLed mid-stream and started again
converges with nothing leaked, and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_standin import StandinApiServer  # tests/k8s_standin.py
from netbay.client import LB, NET
from netbay.k8s import desired, objects, portinfo
from netbay.k8s.controller import Controller

from . import k8s_docs
from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .cluster_pods import make_cluster
from .k8s_fixtures import cli_env, ctrl, lb, lb_tree  # noqa: F401 - ctrl: a fixture
from .k8s_docs import pod


CLOUD_TAG = "kw"   # the shared `cloud` fixture (conftest.py): its namespace prefix
CLOUD_K8S = True   # ... with the Kubernetes mapping's host leftovers swept


@pytest.fixture(scope="module")
def cluster(cloud: Cloud) -> str:
    return make_cluster(cloud, "kwatch", {"kuryr_pod_subnet_pool": "10.44.0.0/16"}, 1, driver="kuryr")


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandinApiServer]:
    server = StandinApiServer().start()
    (tmp_path / "kubeconfig").write_text(server.kubeconfig())
    server.kubeconfig_path = tmp_path / "kubeconfig"
    try:
        yield server
    finally:
        server.stop()


class Watching:
    """The watch source in a thread of its own (its event loop), stopped cleanly."""

    def __init__(self, standin: StandinApiServer, sink: Controller, **limits: float) -> None:
        from lightkube import AsyncClient, KubeConfig

        from netbay.k8s.watch import Limits, WatchSource

        self.config = KubeConfig.from_file(standin.kubeconfig_path).get()
        self.sink, self.source, self.stats = sink, None, None
        self._limits = Limits(**{"server_timeout": 60, "backoff_first": 0.05, "backoff_max": 0.5, **limits})
        self._make = WatchSource
        self._client_cls = AsyncClient
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self.thread.start()
        wait_for(lambda: self.source is not None and self.source.ready.is_set(), 60, 0.05, "the first lists")

    async def _main(self) -> None:
        client = self._client_cls(config=self.config)
        self.source = self._make(client, self._limits)
        try:
            self.stats = await self.source.run(self.sink)
        finally:
            await client.close()

    def stop(self) -> None:
        self.source.stop()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "the watch source did not stop"


def add(standin: StandinApiServer, text: str) -> None:
    """Objects into the API server: real ones as lightkube reads them, not only what the
    mapping accepts (its refusals are the watch source's to set aside)."""
    from lightkube import codecs

    for obj in codecs.load_all_yaml(text):
        standin.create(obj.to_dict())


SHOP = "---\n".join([
    "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
    pod("shop", "web-0"), pod("shop", "web-1"), pod("other", "client", "{app: client}"),
    "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n"
    "spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}\n",
])


def ports_of(ctrl: Controller) -> dict[str, dict]:
    return {p["name"]: p for p in ctrl.api.call("GET", f"{NET}/ports", tags=f"{ctrl.refs.tag},netbay-k8s=pod")["ports"]}


def lbs_of(ctrl: Controller) -> list[str]:
    return sorted(x["name"] for x in ctrl.api.call("GET", f"{LB}/loadbalancers", tags=ctrl.refs.tag)["loadbalancers"])


def annotation(standin: StandinApiServer, ns: str, name: str) -> dict | None:
    obj = standin.get("Pod", ns, name) or {}
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(portinfo.ANNOTATION)
    return portinfo.parse(value) if value and "eth0" in value else None


def seen_replies(client: str, ip: str, port: int, expect: set[bytes], seconds: float = 20) -> set:
    seen: set = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not expect <= seen:
        seen |= {tcp_read(client, ip, port, timeout=2.0) for _ in range(6)}
    return seen - {None}


def test_pods_and_services_from_the_api_server_answer_and_pods_carry_their_port(
        ctrl: Controller, standin: StandinApiServer) -> None:
    add(standin, SHOP)
    watching = Watching(standin, ctrl, list_chunk=2)   # lists read in pages (limit / continue)
    listeners: list[Listener] = []
    try:
        ports = ports_of(ctrl)
        assert sorted(ports) == ["other/client", "shop/web-0", "shop/web-1"] and standin.pages_served >= 1
        assert lbs_of(ctrl) == ["shop/web"]
        # The write-back: each pod carries its port (id, MAC, address, network, subnet).
        for name in ports:
            ns, pod_name = name.split("/")
            vif = wait_for(lambda: annotation(standin, ns, pod_name), 10, 0.05, f"{name}'s annotation")
            port = ports[name]
            assert vif["id"] == port["id"] and vif["address"] == port["mac_address"]
            assert vif["network_id"] == port["network_id"]
            assert vif["ips"] == [{"ip_address": port["fixed_ips"][0]["ip_address"],
                                   "subnet_id": port["fixed_ips"][0]["subnet_id"]}]
            assert vif["subnet"]["id"] == port["fixed_ips"][0]["subnet_id"]
            assert vif["subnet"]["cidr"].startswith("10.44.")
        # ... once: the MODIFIED events the patches caused do not make passes or patches again.
        passes = watching.source.stats.passes
        time.sleep(0.5)
        assert len(standin.patches) == 3 and watching.source.stats.passes == passes

        client = ctrl.sandboxes.ns(ports["other/client"]["id"])
        listeners = [Listener(ctrl.sandboxes.ns(ports[f"shop/{n}"]["id"]), "0.0.0.0", 8080, n.encode())
                     for n in ("web-0", "web-1")]
        vip = ctrl.api.call("GET", f"{LB}/loadbalancers", name="shop/web")["loadbalancers"][0]["vip_address"]
        assert seen_replies(client, vip, 80, {b"web-0", b"web-1"}) == {b"web-0", b"web-1"}

        # ConfigMaps and Secrets (what Docker pods' env reads) reach the desired state, and their changes.
        add(standin, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: shop}\ndata: {k: v1}\n---\n"
                     "apiVersion: v1\nkind: Secret\nmetadata: {name: pw, namespace: shop}\ndata: {k: aHVudGVyMg==}\n")
        assert wait_for(lambda: objects.desired(desired.load(ctrl.store, ctrl.refs.cluster_id)).secrets.get(
            ("shop", "pw")), 10, 0.05) == {"k": "hunter2"}
        cfg = standin.get("ConfigMap", "shop", "cfg")
        cfg["data"] = {"k": "v2"}
        standin.update(cfg)
        assert wait_for(lambda: objects.desired(desired.load(ctrl.store, ctrl.refs.cluster_id)).configmaps.get(
            ("shop", "cfg")) == {"k": "v2"}, 10, 0.05)

        # A pod created in the API server: a port, a sandbox, its annotation, a member.
        add(standin, pod("shop", "web-2"))
        port2 = wait_for(lambda: ports_of(ctrl).get("shop/web-2"), 20, 0.05, "web-2's port")
        assert wait_for(lambda: annotation(standin, "shop", "web-2"), 10, 0.05)["id"] == port2["id"]
        wait_for(lambda: ctrl.sandboxes.plugged(port2["id"]), 10, 0.05)
        listeners.append(Listener(ctrl.sandboxes.ns(port2["id"]), "0.0.0.0", 8080, b"web-2"))
        assert b"web-2" in seen_replies(client, vip, 80, {b"web-2"})

        # A pod deleted there loses its port and its sandbox, and stops being a member.
        web0 = ports["shop/web-0"]["id"]
        standin.delete("Pod", "shop", "web-0")
        wait_for(lambda: "shop/web-0" not in ports_of(ctrl), 20, 0.05, "web-0's port to go")
        wait_for(lambda: web0 not in ctrl.sandboxes.existing(), 10, 0.05, "web-0's sandbox to go")
        replies = {tcp_read(client, vip, 80, timeout=2.0) for _ in range(8)} - {None}
        assert replies and b"web-0" not in replies, replies

        # Deleted and made again at once (nothing the mapping uses changed, so no pass):
        # the new pod still gets its annotation; so does one whose annotation was overwritten.
        body = standin.get("Pod", "shop", "web-1")
        standin.delete("Pod", "shop", "web-1")
        body["metadata"] = {k: v for k, v in body["metadata"].items() if k in ("name", "namespace", "labels")}
        standin.create(body)
        wait_for(lambda: annotation(standin, "shop", "web-1"), 10, 0.05, "the re-created pod's annotation")
        assert annotation(standin, "shop", "web-1")["id"] == ports_of(ctrl)["shop/web-1"]["id"]
        body = standin.get("Pod", "shop", "web-2")
        body["metadata"]["annotations"][portinfo.ANNOTATION] = "{}"
        standin.update(body)
        wait_for(lambda: (annotation(standin, "shop", "web-2") or {}).get("id") == port2["id"], 10, 0.05,
                 "the overwritten annotation to be restored")
        patches = len(standin.patches)
        time.sleep(0.5)
        assert len(standin.patches) == patches   # and then quiet
    finally:
        for listener in listeners:
            listener.close()
        watching.stop()
    assert watching.stats.errors == []


def ready(standin: StandinApiServer, ns: str, name: str, value: str) -> None:
    """The kubelet's report: the pod's Ready condition set (a MODIFIED event)."""
    body = standin.get("Pod", ns, name)
    body["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                          {"type": "Ready", "status": value}]}
    standin.update(body)


def members_of(ctrl: Controller, name: str) -> list[str]:
    return sorted(address for members in lb_tree(ctrl, lb(ctrl, name)).values() for address, _ in members)


def test_a_pod_turning_not_ready_leaves_the_pool_and_rejoins_when_ready(
        ctrl: Controller, standin: StandinApiServer) -> None:
    add(standin, "---\n".join([pod("rd", "web-0"), pod("rd", "web-1"), pod("rd", "client", "{app: client}"),
                               "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: rd}\n"
                               "spec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}\n"]))
    for name in ("web-0", "web-1"):
        ready(standin, "rd", name, "True")
    watching = Watching(standin, ctrl)
    listeners: list[Listener] = []
    try:
        ports = ports_of(ctrl)
        ips = {n: ports[f"rd/{n}"]["fixed_ips"][0]["ip_address"] for n in ("web-0", "web-1")}
        client = ctrl.sandboxes.ns(ports["rd/client"]["id"])
        listeners = [Listener(ctrl.sandboxes.ns(ports[f"rd/{n}"]["id"]), "0.0.0.0", 8080, n.encode())
                     for n in ("web-0", "web-1")]
        vip = ctrl.api.call("GET", f"{LB}/loadbalancers", name="rd/web")["loadbalancers"][0]["vip_address"]
        assert seen_replies(client, vip, 80, {b"web-0", b"web-1"}) == {b"web-0", b"web-1"}

        ready(standin, "rd", "web-1", "False")   # its readiness probe fails: out of the pool
        wait_for(lambda: members_of(ctrl, "rd/web") == [ips["web-0"]], 20, 0.05, "web-1 to leave the pool")
        # the API's pool first, then the agent's map (as Octavia's PENDING_UPDATE → ACTIVE): bounded
        wait_for(lambda: {tcp_read(client, vip, 80, timeout=2.0) for _ in range(4)} == {b"web-0"}, 20, 0.1,
                 "the load balancer's dataplane to drop web-1")
        replies = [tcp_read(client, vip, 80, timeout=2.0) for _ in range(10)]
        assert set(replies) == {b"web-0"}, replies   # every connection answered, by the ready pod only
        assert ports_of(ctrl)["rd/web-1"]["id"] == ports["rd/web-1"]["id"]   # its port stays: only not a member

        ready(standin, "rd", "web-1", "True")    # ready again: back in the pool
        wait_for(lambda: members_of(ctrl, "rd/web") == sorted(ips.values()), 20, 0.05, "web-1 to rejoin")
        assert seen_replies(client, vip, 80, {b"web-0", b"web-1"}) == {b"web-0", b"web-1"}
    finally:
        for listener in listeners:
            listener.close()
        watching.stop()
    assert watching.stats.errors == []


def test_gone_relists_and_resyncs_what_changed_unseen(ctrl: Controller, standin: StandinApiServer) -> None:
    add(standin, "---\n".join([pod("a", "p0"), pod("a", "p1"), pod("b", "q0"),
                               "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a}\n"
                               "spec: {selector: {app: web}, ports: [{port: 80}]}\n"]))
    watching = Watching(standin, ctrl)
    try:
        assert sorted(ports_of(ctrl)) == ["a/p0", "a/p1", "b/q0"] and lbs_of(ctrl) == ["a/s"]
        rounds = ((False, "a/p0", "a/p2", ["a/p1", "a/p2", "b/q0"]),
                  (True, "b/q0", "c/r0", ["a/p1", "a/p2", "c/r0"]))
        for gone_as_http, drop, make, want in rounds:
            relists = watching.source.stats.relists
            # Unreachable while things change and the history is compacted: the watch
            # cannot replay them; its resourceVersion is Gone.
            standin.partition()
            standin.delete("Pod", *drop.split("/"))
            add(standin, pod(*make.split("/")))
            if gone_as_http:
                standin.delete("Service", "a", "s")
            standin.gone_as_http = gone_as_http
            standin.compact()
            standin.heal()
            wait_for(lambda: sorted(ports_of(ctrl)) == want, 30, 0.1, f"the re-list to converge to {want}")
            assert watching.source.stats.relists >= relists + len(watching.source.kinds)
            # each kind is re-listed on its own: the Services' list may come after the Pods'
            wait_for(lambda gone=gone_as_http: lbs_of(ctrl) == ([] if gone else ["a/s"]), 10, 0.05,
                     "the re-list to converge the Services")
            assert wait_for(lambda: annotation(standin, *make.split("/")), 10, 0.05)["id"] == ports_of(ctrl)[make]["id"]
        assert len(ctrl.sandboxes.existing()) == 3
    finally:
        watching.stop()


def test_reconnect_resumes_from_the_bookmark(ctrl: Controller, standin: StandinApiServer) -> None:
    add(standin, pod("bm", "p0"))
    watching = Watching(standin, ctrl)
    try:
        last_pod_rv = int(standin.get("Pod", "bm", "p0")["metadata"]["resourceVersion"])
        # Other kinds move the resourceVersion on; the pods' watch sees none of it ...
        add(standin, "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: bm}\n"
                     "spec: {clusterIP: None, selector: {app: web}, ports: [{port: 80}]}\n")
        add(standin, "apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n")
        # ... until a bookmark tells it where it is.
        mark = standin.bookmark()
        assert mark > last_pod_rv + 1
        wait_for(lambda: watching.source.kinds["Pod"].version == str(mark), 10, 0.02, "the bookmark")
        before = len(standin.watch_requests("pods"))
        standin.close_watches()   # the server ends the watch (its timeout): a reconnect
        wait_for(lambda: len(standin.watch_requests("pods")) > before, 10, 0.02, "the reconnect")
        again = standin.watch_requests("pods")[before]
        assert again["resourceVersion"] == str(mark) and again["allowWatchBookmarks"] == "true"
        relists = watching.source.stats.relists
        # Compacted up to the bookmark: the reconnect from it is not Gone; no re-list.
        standin.compacted = mark
        standin.close_watches()
        wait_for(lambda: len(standin.watch_requests("pods")) > before + 1, 10, 0.02, "the second reconnect")
        time.sleep(0.3)
        assert watching.source.stats.relists == relists
        # An object the mapping refuses (a runtime netbay does not have; the API server takes
        # any annotation) is set aside, not a wedge for every later pass.
        add(standin, "apiVersion: v1\nkind: Pod\nmetadata: {name: oddrt, namespace: bm, "
                     "annotations: {netbay.io/runtime: vm}}\nspec: {containers: [{name: c, image: busybox}]}\n")
        standin.fail_patches = 2   # the API server fails the write-back twice: it is tried again
        add(standin, pod("bm", "p1"))
        wait_for(lambda: "bm/p1" in ports_of(ctrl), 20, 0.05, "p1 after the reconnect")
        assert wait_for(lambda: annotation(standin, "bm", "p1"), 10, 0.05)["id"] == ports_of(ctrl)["bm/p1"]["id"]
        assert sum("annotate bm/p1: " in e and "500" in e for e in watching.source.stats.errors) == 2
        assert any("Pod/bm/oddrt ignored: " in e and "netbay.io/runtime" in e for e in watching.source.stats.errors)
        assert "bm/oddrt" not in ports_of(ctrl)
    finally:
        watching.stop()


def test_a_silent_watch_is_renewed_from_where_it_was(ctrl: Controller, standin: StandinApiServer) -> None:
    """A connection that went quiet (no events, no end) is given up after
    ``server_timeout + grace`` and the watch renewed from its resourceVersion."""
    add(standin, pod("quiet", "p0"))
    watching = Watching(standin, ctrl, server_timeout=1, grace=1.0)
    try:
        standin.silent = True
        standin.close_watches()   # the renewals land on the silent server
        wait_for(lambda: watching.source.kinds["Pod"].renewals >= 1, 15, 0.05, "a silent watch to be renewed")
        version = watching.source.kinds["Pod"].version
        standin.silent = False
        add(standin, pod("quiet", "p1"))
        wait_for(lambda: "quiet/p1" in ports_of(ctrl), 20, 0.05, "p1 once the server speaks again")
        pods_watches = standin.watch_requests("pods")
        assert any(q.get("resourceVersion") == version for q in pods_watches[1:])
        assert watching.source.stats.relists == len(watching.source.kinds)   # renewed, never re-listed
    finally:
        standin.silent = False
        watching.stop()


def manifests(namespaces: int, pods: int) -> str:
    return k8s_docs.many([f"w{i}" for i in range(namespaces)], lambda ns: [
        *(pod(ns, f"p{j}") for j in range(pods)), k8s_docs.service(ns, "s", "web", 80)])


def test_cli_sigkill_then_restart_converges_and_sigterm_stops(
        cloud: Cloud, cluster: str, ctrl: Controller, standin: StandinApiServer) -> None:
    add(standin, manifests(3, 8))
    env = cli_env(cloud)
    cmd = [sys.executable, "-m", "netbay.cli.main", "k8s", "watch", "--kubeconfig", str(standin.kubeconfig_path),
           "--cluster", cluster, "--url", cloud.server.url, "--prefix", cloud.names.prefix, "--watch-timeout", "30"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(ports_of(ctrl)) >= 4 or proc.poll() is not None, 60, 0.02, "the first pass under way")
        assert proc.poll() is None, proc.stdout.read().decode()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    # While no controller runs: a namespace emptied, pods gone and new ones made.
    for j in range(8):
        standin.delete("Pod", "w2", f"p{j}")
    standin.delete("Service", "w2", "s")
    standin.delete("Pod", "w0", "p0")
    add(standin, pod("w1", "late"))
    want = sorted([f"w0/p{j}" for j in range(1, 8)] + [f"w1/p{j}" for j in range(8)] + ["w1/late"])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: sorted(ports_of(ctrl)) == want, 90, 0.1, "the restarted watch to converge")
        wait_for(lambda: lbs_of(ctrl) == ["w0/s", "w1/s"], 30, 0.1, "the load balancers")
        ports = ports_of(ctrl)
        for name in want:
            ns, pod_name = name.split("/")
            vif = wait_for(lambda: annotation(standin, ns, pod_name), 20, 0.05, f"{name}'s annotation")
            assert vif["id"] == ports[name]["id"]
        nets = sorted(n["name"] for n in ctrl.api.call("GET", f"{NET}/networks",
                                                       tags=f"{ctrl.refs.tag},netbay-k8s=network")["networks"])
        assert "ns/w0" in nets and "ns/w1" in nets
        assert ctrl.sandboxes.existing() == {p["id"] for p in ports.values()}   # nothing leaked
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out.decode()
        assert "stopped:" in out.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
