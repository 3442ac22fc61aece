"""Whole Docker-runtime pods on flannel (vxlan) and calico clusters, with a real dockerd
(issue 27, item 1 on the node drivers).

A pod annotated ``netbay.io/runtime: docker`` runs as on a kuryr cluster: its
initContainer writes into an emptyDir the file its first container serves, its second
container fetches it over localhost (the sandbox's one namespace), and — the node
drivers' part — the sandbox's namespace has an address from its node's lease, plugged
by the cluster's driver: a network-only pod on the other minion reaches it by its
address and through a ClusterIP Service, and the sandbox was told the cluster DNS.
A Job's pod runs to completion (Succeeded); a container exiting 1 under ``Never``
fails its pod (reason Error); ``netbay k8s pods`` shows them as kubectl does. Everything goes with the objects: containers, volumes,
netbay pods.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Iterator

import pytest

from netbay.client import Api
from netbay.k8s import desired as stored, podstatus
from netbay.k8s.controllers import open_controller
from netbay.k8s.dockerpods import CLUSTER, POD, ROLE
from netbay.k8s.nodecluster import NodeController
from netbay.k8s.objects import desired, parse
from netbay.store.db import Store

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .cluster_pods import clusternet, make_cluster
from .docker_fixtures import sh
from .k8s_fixtures import cli_env, http_get, k8s_cli, k8s_cloud, node_pods

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

MODES = {
    "flannel-vxlan": ("flannel", {"flannel_backend": "vxlan"}),
    "calico-direct": ("calico", {}),
}


@pytest.fixture(scope="module")
def daemon() -> Iterator[dk.Dockerd]:
    yield from dk.running()


@pytest.fixture(scope="module")
def cloud(daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    yield from k8s_cloud(tmp_path_factory.mktemp("k8snodepods"), "kq")


@pytest.fixture(params=list(MODES))
def ctrl(request: pytest.FixtureRequest, cloud: Cloud, daemon: dk.Dockerd) -> Iterator[NodeController]:
    driver, labels = MODES[request.param]
    cid = make_cluster(cloud, f"pods-{request.param}", labels, 2, driver)
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    c = open_controller(api, store, cid, cloud.names)
    try:
        assert isinstance(c, NodeController)
        c.dockerpods.use(daemon.client)
        yield c
        c.delete_all()
        assert not daemon.client.api.containers(all=True, filters={"label": f"{CLUSTER}={cid}"}), "containers left"
        assert not daemon.client.api.volumes(filters={"label": f"{CLUSTER}={cid}"}).get("Volumes"), "volumes left"
        assert not api.call("GET", "/netbay/v1/pods", cluster_id=cid)["pods"], "netbay pods left"
    finally:
        try:
            c.delete_all()
        finally:
            c.close()
            api.close()
            store.dispose()
            cloud.http.delete(f"/container-infra/v1/clusters/{cid}")


GET_LOCAL = r"printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 127.0.0.1 8080 | tail -n 1"

APP = f"""
apiVersion: v1
kind: Pod
metadata: {{name: site, namespace: web, labels: {{app: site}}, annotations: {{netbay.io/runtime: docker}}}}
spec:
  volumes: [{{name: www, emptyDir: {{}}}}]
  initContainers:
  - name: fill
    image: {dk.IMAGE}
    command: [sh, -c, "echo written-by-init > /w/index.html"]
    volumeMounts: [{{name: www, mountPath: /w}}]
  containers:
  - name: server
    image: {dk.IMAGE}
    command: [httpd, -f, -p, "8080", -h, /w]
    ports: [{{name: http, containerPort: 8080}}]
    volumeMounts: [{{name: www, mountPath: /w, readOnly: true}}]
  - name: client
    image: {dk.IMAGE}
    command: [sleep, "600"]
---
apiVersion: v1
kind: Service
metadata: {{name: site, namespace: web}}
spec: {{selector: {{app: site}}, ports: [{{port: 80, targetPort: http}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: peer, namespace: web}}
spec: {{containers: [{{name: c, image: busybox}}]}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: once, namespace: web, annotations: {{netbay.io/runtime: docker}}}}
spec:
  template:
    metadata: {{annotations: {{netbay.io/runtime: docker}}}}
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: {dk.IMAGE}, command: [sh, -c, "exit 0"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: exits, namespace: web, annotations: {{netbay.io/runtime: docker}}}}
spec:
  restartPolicy: Never
  containers: [{{name: c, image: {dk.IMAGE}, command: [sh, -c, "exit 1"]}}]
"""


def ctr(daemon: dk.Dockerd, pod: str, name: str):  # docker.models.containers.Container
    from netbay.k8s.dockerpods import CONTAINER

    [found] = daemon.client.containers.list(all=True, filters={"label": [f"{POD}={pod}", f"{CONTAINER}={name}"]})
    return found


def statuses(ctrl: NodeController) -> dict[tuple[str, str], dict]:
    return ctrl.dockerpods.statuses(desired(stored.load(ctrl.store, ctrl.refs.cluster_id)))


def test_whole_pods_on_node_drivers(cloud: Cloud, ctrl: NodeController, daemon: dk.Dockerd) -> None:
    report = ctrl.apply(parse(APP))
    pods = node_pods(ctrl)
    site, peer = pods["web/site"], pods["web/peer"]
    assert site["runtime"] == "docker" and not peer["runtime"], report
    leases = clusternet(cloud, ctrl.refs.cluster_id)["leases"]
    assert ipaddress.ip_address(site["address"]) in ipaddress.ip_network(leases[site["node"]])
    # one namespace: the sandbox's, named as the netbay pod's and plugged into its node
    server, client = ctr(daemon, "web/site", "server"), ctr(daemon, "web/site", "client")
    [sandbox] = daemon.client.containers.list(filters={"label": [f"{POD}=web/site", f"{ROLE}=sandbox"]})
    inodes = {os.stat(f"/proc/{c.attrs['State']['Pid']}/ns/net").st_ino for c in (sandbox, server, client)}
    assert inodes == {os.stat(f"/run/netns/{cloud.names.pod(site['id'])}").st_ino}
    fill = ctr(daemon, "web/site", "fill")
    assert fill.attrs["State"]["ExitCode"] == 0, "the init container ran to completion first"
    assert wait_for(lambda: sh(client, GET_LOCAL)[1].strip() == "written-by-init", 10, 0.1)
    assert sh(client, "ip -4 -o addr show eth0")[1].split()[3].split("/")[0] == site["address"]
    assert sandbox.attrs["HostConfig"]["Dns"] == [ctrl.dns.address], "the sandbox is told the cluster DNS"
    # the network-only pod (the sandbox runtime, on a node of its own choosing) reaches it:
    # by its address and through the ClusterIP Service the nodes answer
    other = cloud.names.pod(peer["id"])
    assert wait_for(lambda: http_get(other, site["address"], 8080), 10, 0.1) == b"written-by-init"
    vip = ctrl.vips[("web", "site")]
    assert wait_for(lambda: http_get(other, vip, 80), 10, 0.1) == b"written-by-init"
    # status from the containers: Running; the Job's pod Succeeded; exit 1 under Never: Failed
    assert wait_for(lambda: statuses(ctrl).get(("web", "once-0"), {}).get("phase") == "Succeeded", 20, 0.2)
    status = statuses(ctrl)
    assert (status[("web", "site")]["phase"], podstatus.display(status[("web", "site")])) == ("Running", "Running")
    assert wait_for(lambda: statuses(ctrl)[("web", "exits")]["phase"] == "Failed", 20, 0.2)
    term = statuses(ctrl)[("web", "exits")]["containerStatuses"][0]["state"]["terminated"]
    assert (term["reason"], term["exitCode"]) == ("Error", 1)
    # ``netbay k8s pods``: kubectl's columns, on a node cluster too
    done = subprocess.run(k8s_cli(cloud, ctrl.refs.cluster_id, "pods"), capture_output=True, text=True,
                          env={**cli_env(cloud), "NETBAY_DOCKER_HOST": daemon.host}, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {tuple(line.split()[:2]): line.split()[2:4] for line in done.stdout.splitlines()[1:]}
    assert rows[("web", "site")] == ["2/2", "Running"] and rows[("web", "peer")] == ["0/0", "Running"], done.stdout
    assert ctrl.resync().made == [], "adopted as it is"
    assert ctr(daemon, "web/site", "fill").id == fill.id, "the init container is not run again"
