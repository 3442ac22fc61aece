"""Service discovery on a kuryr cluster, with real packets (issue 12, item 4).

The cluster resolver answers from its own namespace on the service range's 10th
address; pods reach it through the router. Clients are real: glibc's resolver
(``getent``, ``socket.create_connection`` by short name through resolv.conf's search
list, in a process ``ip netns exec`` started in the pod, which sees the pod's
``/etc/netns`` files), busybox ``nslookup``, and dnslib queries sent from inside the
pod's namespace for SRV and NXDOMAIN. Names outside the cluster go to the template's
``dns_nameserver``: the test's own dnslib server in the external network's namespace
(the outside world; never the host's resolver), reached through the cluster's router.
Checked too: Service variables for pods made
after a Service (not before), answers following scale and delete, a controller
restart (the process lives on and is adopted), and that nothing is left — after a
cluster's delete too, without a sweep (the agent reaps the resolver of a deleted port).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dnslib import QTYPE, RCODE

from netbay.client import LB, NET
from netbay.dataplane import netns
from netbay.k8s.controller import Controller
from netbay.k8s.dns.resolver import state_root
from netbay.k8s.objects import parse

from .agent_fixtures import Cloud, wait_for
from .dns_upstream import UPSTREAM_ADDRESS, UPSTREAM_NAME, Upstream, query, upstream_server
from .cluster_net import Listener
from .k8s_fixtures import (controller, ctrl, getent, in_pod, netbay_exec,  # noqa: F401 - ctrl: a fixture
                           pod_ips, pod_ns)
from .k8s_fixtures import keys_of as ctrl_keys
from .cluster_pods import make_cluster


CLOUD_TAG = "kd"   # the shared `cloud` fixture (conftest.py): its namespace prefix
CLOUD_K8S = True   # ... with the Kubernetes mapping's host leftovers swept


@pytest.fixture(scope="module")
def upstream(cloud: Cloud) -> Iterator[tuple[str, Upstream]]:
    with upstream_server(cloud) as found:
        yield found


@pytest.fixture(scope="module")
def cluster(cloud: Cloud, upstream: tuple[str, Upstream]) -> str:
    return make_cluster(cloud, "kdns", {"kuryr_pod_subnet_pool": "10.40.0.0/16",
                                        "kuryr_service_cidr": "10.254.0.0/16"}, 1, driver="kuryr",
                        dns_nameserver=upstream[0])


APP = """
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web-front, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: sql, port: 5432, protocol: TCP}]
"""

EARLY = """
apiVersion: v1
kind: Pod
metadata: {name: early, namespace: shop}
spec: {containers: [{name: c, image: busybox}]}
"""

LATE = EARLY.replace("early", "late")


def test_names_env_and_updates(cloud: Cloud, ctrl: Controller, upstream: tuple[str, Upstream]) -> None:
    ctrl.apply(parse(EARLY))                     # a pod made before any Service
    ctrl.apply(parse(APP + "---" + EARLY))
    ctrl.apply(parse(APP + "---" + EARLY + "---" + LATE))   # ... and one made after them
    dns = ctrl.discovery.resolver.address
    assert dns == "10.254.0.10"   # the 10th address of the service range, as kube-dns'
    client = pod_ns(ctrl, "shop", "late")
    vip = ctrl.api.call("GET", f"{LB}/loadbalancers", name="shop/web-front")["loadbalancers"][0][
        "vip_address"]
    assert ipaddress.ip_address(vip) in ipaddress.ip_network("10.254.0.0/16")
    conf = Path(f"/etc/netns/{client}/resolv.conf").read_text()
    assert "nameserver 10.254.0.10" in conf and "search shop.svc.cluster.local svc.cluster.local" in conf

    # glibc's resolver in the pod: the full name and the short search forms.
    assert wait_for(lambda: getent(client, "web-front.shop.svc.cluster.local") == [vip], 10, 0.1)
    assert getent(client, "web-front") == [vip]
    assert getent(client, "web-front.shop") == [vip]
    # busybox nslookup (resolv.conf's nameserver).
    done = in_pod(client, "busybox", "nslookup", "web-front.shop.svc.cluster.local")
    assert vip in done.stdout, done.stdout + done.stderr
    # Headless: the ready pods' addresses.
    webs = pod_ips(ctrl, "shop", ["web-0", "web-1"])
    assert getent(client, "db.shop.svc.cluster.local") == webs
    # SRV for a named port; NXDOMAIN for a name nobody has; REFUSED outside the domain.
    srv = query(client, dns, "_http._tcp.web-front.shop.svc.cluster.local", "SRV")
    assert [(r.rdata.port, str(r.rdata.target).rstrip(".")) for r in srv.rr] == \
        [(80, "web-front.shop.svc.cluster.local")]
    assert [str(r.rdata) for r in srv.ar] == [vip]
    srv = query(client, dns, "_sql._tcp.db.shop.svc.cluster.local", "SRV")
    assert sorted(r.rdata.port for r in srv.rr) == [5432, 5432] and sorted(str(r.rdata) for r in srv.ar) == webs
    nx = query(client, dns, "nope.shop.svc.cluster.local", "A")
    assert nx.header.rcode == RCODE.NXDOMAIN and nx.auth and nx.auth[0].rtype == QTYPE.SOA
    assert in_pod(client, "getent", "hosts", "nope.shop.svc.cluster.local").returncode == 2
    # Outside the cluster domain: the template's dns_nameserver answers, through the resolver.
    assert getent(client, UPSTREAM_NAME) == [UPSTREAM_ADDRESS]
    forwarded = query(client, dns, UPSTREAM_NAME, "A")
    assert [str(r.rdata) for r in forwarded.rr] == [UPSTREAM_ADDRESS] and UPSTREAM_NAME in upstream[1].asked
    nowhere = query(client, dns, "nowhere.example.test", "A")
    assert nowhere.header.rcode == RCODE.NXDOMAIN   # as the upstream says, not REFUSED
    assert in_pod(client, "getent", "hosts", "nowhere.example.test").returncode == 2
    assert not [n for n in upstream[1].asked if n.endswith("cluster.local")]   # the cluster's names stay inside
    aaaa = query(client, dns, "web-front.shop.svc.cluster.local", "AAAA")
    assert aaaa.header.rcode == RCODE.NOERROR and not aaaa.rr   # the name exists: no data, not NXDOMAIN

    servers = [Listener(pod_ns(ctrl, "shop", n), "0.0.0.0", 8080, n.encode()) for n in ("web-0", "web-1")]
    try:
        # By name, through the cluster IP, to a serving pod (a process in the pod).
        connect = ("import socket; s = socket.create_connection(('web-front', 80), 3); "
                   "print(s.recv(64).decode())")
        done = in_pod(client, "python3", "-c", connect)
        assert done.stdout.strip() in ("web-0", "web-1"), done.stdout + done.stderr
        # Service variables: the late pod has them and connects with them; the early one has none.
        env = dict(line.split("=", 1) for line in Path(f"/etc/netns/{client}/environment").read_text().splitlines())
        assert env["WEB_FRONT_SERVICE_HOST"] == vip and env["WEB_FRONT_SERVICE_PORT"] == "80"
        assert env["WEB_FRONT_SERVICE_PORT_HTTP"] == "80" and env["WEB_FRONT_PORT"] == f"tcp://{vip}:80"
        assert env["WEB_FRONT_PORT_80_TCP_ADDR"] == vip and "DB_SERVICE_HOST" not in env   # headless: none
        by_env = ("import os, socket; s = socket.create_connection((os.environ['WEB_FRONT_SERVICE_HOST'], "
                  "int(os.environ['WEB_FRONT_SERVICE_PORT'])), 3); print(s.recv(64).decode())")
        done = netbay_exec(cloud, ctrl, "shop/late", "python3", "-c", by_env, cluster="kdns")   # by name
        assert done.stdout.strip() in ("web-0", "web-1"), done.stdout + done.stderr
        early = Path(f"/etc/netns/{pod_ns(ctrl, 'shop', 'early')}/environment").read_text()
        assert "SERVICE_HOST" not in early
    finally:
        for s in servers:
            s.close()

    # Scale to 1: the headless answer follows; delete the Service: NXDOMAIN.
    ctrl.apply(parse((APP + "---" + EARLY + "---" + LATE).replace("replicas: 2", "replicas: 1")))
    web0 = pod_ips(ctrl, "shop", ["web-0"])
    assert wait_for(lambda: getent(client, "db.shop.svc.cluster.local") == web0, 10, 0.2)
    ctrl.delete([k for k in ctrl_keys(APP) if k.kind == "Service" and k.name == "web-front"])
    assert wait_for(lambda: query(client, dns, "web-front.shop.svc.cluster.local", "A").header.rcode
                    == RCODE.NXDOMAIN, 10, 0.1)
    # A pod's files go with it.
    early_ns = pod_ns(ctrl, "shop", "early")
    ctrl.delete([k for k in ctrl_keys(EARLY)])
    assert not Path(f"/etc/netns/{early_ns}").exists()


def test_resolver_survives_a_controller_restart_and_goes_with_the_objects(cloud: Cloud, cluster: str) -> None:
    with controller(cloud, cluster, delete=False) as first:
        first.apply(parse(APP))
        process = first.discovery.resolver.process
        pid, ns = process.pid(), process.ns
        assert pid is not None and netns.exists(ns)
        first.close()       # the controller goes; the resolver answers on
        client = pod_ns(first, "shop", "web-0")
        assert getent(client, "web-front") != []
        with controller(cloud, cluster, delete=False) as second:
            second.apply(parse(APP.replace("name: db", "name: db2")))   # a restart's first pass: a full one
            second.resync()
            assert second.discovery.resolver.process.pid() == pid        # adopted, not restarted
            assert wait_for(lambda: getent(client, "db2.shop.svc.cluster.local") != [], 10, 0.1)
            # A resolver killed under it is started again by the next full pass.
            os.kill(pid, 9)
            wait_for(lambda: not Path(f"/proc/{pid}").exists() or
                     Path(f"/proc/{pid}/status").read_text().find("zombie") >= 0, 5, 0.05)
            second.resync()
            assert second.discovery.resolver.process.pid() not in (None, pid)
            assert wait_for(lambda: getent(client, "web-front") != [], 10, 0.1)
            port_id = second.discovery.resolver.port["id"]
            second.delete_all()
            second.close()
            assert not netns.exists(ns) and not (state_root(cloud.names.prefix) / port_id).exists()
            assert second.api.call("GET", f"{NET}/ports", tags=f"{second.refs.tag},netbay-k8s=dns")["ports"] == []
            assert not [n for n in netns.list(f"{cloud.names.prefix}kd-")]
            assert not [p for p in Path("/etc/netns").glob(f"{cloud.names.prefix}k-*")]
            assert resolver_pids(cloud.names.prefix) == []


def resolver_pids(prefix: str) -> list[int]:
    """Processes running a resolver of this run (their command line names its state dir)."""
    mark = str(state_root(prefix)).encode()
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmdline = Path(f"/proc/{p}/cmdline").read_bytes()
            except OSError:
                continue
            if b"netbay.k8s.dns.server" in cmdline and mark in cmdline:
                out.append(int(p))
    return out


def test_cluster_delete_stops_its_resolver_without_a_sweep(cloud: Cloud) -> None:
    from netbay.k8s.dns.resolver import sweep_orphans
    from netbay.k8s.sandbox import sweep_orphans as sweep_pods

    from .cluster_pods import ci, wait_cluster

    cid = make_cluster(cloud, "kdns2", {"kuryr_pod_subnet_pool": "10.41.0.0/16",
                                        "kuryr_service_cidr": "10.99.0.0/16"}, 1, driver="kuryr")
    with controller(cloud, cid, delete=False) as c:
        try:
            c.apply(parse(EARLY))
            port_id, ns = c.discovery.resolver.port["id"], c.discovery.resolver.process.ns
            pid = c.discovery.resolver.process.pid()
            assert pid is not None
            c.close()   # the controller is gone long before its cluster
            r = ci(cloud).delete(f"/clusters/{cid}")
            assert r.status_code == 204, r.text
            wait_cluster(ci(cloud), cid, ("GONE",))
            # The cluster's delete took the resolver's port; the agent then the rest.
            assert wait_for(lambda: pid not in resolver_pids(cloud.names.prefix) and not netns.exists(ns)
                            and not (state_root(cloud.names.prefix) / port_id).exists(), 15, 0.05)
            assert sweep_orphans(c.net, c.sandboxes) == []   # nothing left for a sweep
        finally:
            sweep_pods(c.net, c.sandboxes)
