"""A Kubernetes Service on OVN's load balancing: the Kubernetes mapping (``netbay k8s
apply --backend openstack``, the controller as a user runs it) maps a kuryr cluster's
Deployment and its ``LoadBalancer`` Service onto the lab's real Neutron (ML2/OVN) and
Octavia with ovn-octavia-provider, the cluster naming that provider with its label
``kuryr_octavia_provider=ovn`` (the pools then ask for SOURCE_IP_PORT, its one algorithm).

As kuryr splits it, the controller makes each pod's port and the nodes' CNI plugs it:
here the kubelet's part is played by ``netbay-cni`` ADD against ``netbay cni-daemon`` on
two chassis (the pod's port found by the cluster's convention, bound to that chassis,
plugged with os-vif). Then, with packets:

- a client pod in another namespace (its own network, across the cluster's router) is
  answered at the Service's cluster IP (the load balancer's VIP) by both pods, one on
  each chassis; the outside namespace likewise at the floating IP the mapping put on
  the VIP (a ``LoadBalancer`` Service);
- scaling the Deployment up adds the new pod to the members and it answers too; scaling
  it down leaves only the pod that is left answering;
- deleting the objects leaves Neutron's port list and Octavia's load balancers as they
  were, and OVN's NB without the load balancer.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from netbay.dataplane import netns
from netbay.plugins.cni.launcher import install
from tests.dataplane.cni_fixtures import Daemon, invoke, netbay_conf

from .lab import OUTSIDE, PHYSNET, OvnLab
from .cloudhelp import LB_TIMEOUT, wait_lb, wait_status
from .cni import start_daemon
from .probes import MEMBER_PORT, VIP_PORT, Answering, ask, diagnose
from tests import zygote

pytestmark = [pytest.mark.ovn, pytest.mark.peers]

BUILD_TIMEOUT = 600
LB_GONE = 120
FOLLOW = 60     # seconds the answers may take to follow a change of the members

MANIFEST = """
apiVersion: v1
kind: Namespace
metadata: {{name: shop}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: clients}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: c, image: busybox, ports: [{{name: http, containerPort: {member}}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec:
  type: LoadBalancer
  selector: {{app: web}}
  ports: [{{name: http, port: {vip}, targetPort: http}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: clients}}
spec: {{containers: [{{name: c, image: busybox}}]}}
"""


def manifest(path: Path, replicas: int) -> Path:
    path.write_text(MANIFEST.format(replicas=replicas, member=MEMBER_PORT, vip=VIP_PORT))
    return path


@pytest.fixture(scope="module")
def cloud_env(ovn_cloud, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The ``OS_*`` of the user's ``netbay`` on the lab's cloud (clouds.yaml entry ``peer``,
    the name ``netbay up --backend openstack`` is started with in tests/backendfix.py)."""
    path = tmp_path_factory.mktemp("k8s-clouds") / "clouds.yaml"
    path.write_text(json.dumps({"clouds": {"peer": {"auth": ovn_cloud.auth(), "region_name": "RegionOne",
                                                    "identity_api_version": 3}}}))
    return {"OS_CLIENT_CONFIG_FILE": str(path), "OS_CLOUD": "peer"}


@pytest.fixture(scope="module")
def public(ovn_lab: OvnLab, conn) -> Iterator[str]:
    """The external network ``public`` (flat, physnet1), bridged on chassis 2 (the gateway
    chassis) to the outside namespace, which is returned."""
    outside = ovn_lab.add_outside(ovn_lab.hvs[1])
    ext = conn.network.create_network(name="public", is_router_external=True, provider_network_type="flat",
                                      provider_physical_network=PHYSNET)
    conn.network.create_subnet(network_id=ext.id, cidr="172.24.4.0/24", ip_version=4,
                               gateway_ip=OUTSIDE.split("/")[0], is_dhcp_enabled=False, name="public-subnet")
    yield outside
    conn.network.delete_network(ext)


@pytest.fixture(scope="module")
def cluster(cloud_env: dict[str, str], conn, lb_conn, public: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, str]]:
    """netbay on the lab's cloud and a kuryr cluster built there whose Services ask for the
    ``ovn`` provider; (the netbay server, the cluster's uuid)."""
    from coehelp import ci_client, create_cluster, delete_cluster, make_template
    from coehelp import wait_status as cluster_status

    from tests.backendfix import netbay_on_cloud

    with netbay_on_cloud(cloud_env, tmp_path_factory.mktemp("k8s-netbay")) as srv:
        ci = ci_client(srv, conn.auth_token)
        template = make_template(ci, name=f"ovn-k8s-{uuid.uuid4().hex[:8]}", network_driver="kuryr",
                                 external_network_id="public", floating_ip_enabled=False, master_lb_enabled=False,
                                 labels={"kuryr_pod_subnet_pool": "10.30.0.0/16", "kuryr_octavia_provider": "ovn"})
        cid = create_cluster(ci, template["uuid"], node_count=1)
        try:
            built = cluster_status(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"), BUILD_TIMEOUT)
            assert built["status"] == "CREATE_COMPLETE", built["status_reason"]
            yield srv, cid
        finally:
            delete_cluster(ci, cid, BUILD_TIMEOUT)
            ci.delete(f"/clustertemplates/{template['uuid']}")


@pytest.fixture(scope="module")
def kubelets(ovn_lab: OvnLab, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Path, list[Daemon]]]:
    """The nodes' CNI: the ``netbay-cni`` launcher and ``netbay cni-daemon`` on chassis 1 and 2."""
    root = tmp_path_factory.mktemp("k8s-cni")
    plugin = install(root / "bin")
    made: list[Daemon] = []
    try:
        for hv in ovn_lab.hvs[:2]:
            made.append(start_daemon(ovn_lab, hv, env, root / hv.ns))
        yield plugin, made
    finally:
        for d in made:
            d.stop()


@dataclass
class Kubelet:
    """Runs pods as a kubelet would: a namespace, then ``netbay-cni`` ADD on the pod's node
    (the cluster's pods' ports, found by ``K8S_POD_NAMESPACE``/``K8S_POD_NAME``); DEL and the
    namespace's delete when the pod goes."""

    lab: OvnLab
    plugin: Path
    daemons: list[Daemon]
    cluster: str
    pods: dict[str, tuple[int, str]] = field(default_factory=dict)   # "ns/name" → (chassis index, namespace)

    def _call(self, verb: str, key: str, node: int, ns: str) -> dict:
        daemon = self.daemons[node]
        namespace, name = key.split("/")
        r = invoke(self.plugin, verb, netbay_conf("k8s", None, daemon.sock, cluster=self.cluster),
                   container=f"ctr-{namespace}-{name}", netns=netns.path(ns),
                   args=f"K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}", timeout=120)
        assert r.rc == 0, (verb, key, r, daemon.log.read_text()[-3000:])
        return r.json if verb == "ADD" else {}

    def run(self, key: str, node: int) -> None:
        ns = f"{self.lab.prefix}k8s-{key.replace('/', '-')}"
        netns.create(ns)
        self.pods[key] = (node, ns)
        self._call("ADD", key, node, ns)

    def ns(self, key: str) -> str:
        return self.pods[key][1]

    def stop(self, key: str) -> None:
        node, ns = self.pods.pop(key)
        try:
            self._call("DEL", key, node, ns)
        finally:
            netns.delete(ns)

    def stop_all(self) -> None:
        for key in list(self.pods):
            self.stop(key)


def netbay_k8s(srv, env: dict[str, str], verb: str, *args: str) -> str:
    """``netbay k8s VERB --backend openstack`` as the cluster's user runs it; its stdout."""
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", verb, "--backend", "openstack",
                    "--os-cloud", "peer", "--database-url", srv.database_url, "--data-dir", str(srv.data_dir),
                    *args], env={**env, "NETBAY_URL": srv.url}, capture_output=True, text=True,
                   timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def heard(src_ns: str, address: str, want: set[str], tries: int = 12) -> set[str]:
    """Who answers connections from ``src_ns`` to ``address``:VIP_PORT: rounds of ``tries``
    connections (new source ports each: the 5-tuple hash spreads them), until one round's
    answers are exactly ``want`` or FOLLOW seconds pass (OVN follows a change of members a
    little later). A connection that times out on this loaded machine answers nobody."""
    deadline = time.monotonic() + FOLLOW
    while True:
        got = {name for name in (ask(src_ns, address, VIP_PORT) for _ in range(tries)) if name}
        if got == want or time.monotonic() > deadline:
            return got


def port_of(conn, key: str):
    (port,) = conn.network.ports(name=key, device_owner="compute:kuryr")
    return port


def the_lb(lb_conn):
    (lb,) = [lb for lb in lb_conn.load_balancer.load_balancers() if lb.name == "shop/web"]
    return lb


def members(lb_conn, lb, want: set[str]) -> set[str]:
    """The load balancer's members' addresses, once they are ``want`` or after LB_TIMEOUT:
    the provider reports a batch's deleted members after the load balancer is ACTIVE again."""
    deadline = time.monotonic() + LB_TIMEOUT
    while True:
        pools = list(lb_conn.load_balancer.pools(loadbalancer_id=lb.id))
        got = {m.address for pool in pools for m in lb_conn.load_balancer.members(pool)}
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_a_service_on_ovn_answers_from_its_pods_on_two_chassis_and_follows_them(
        ovn_lab: OvnLab, conn, lb_conn, cluster: tuple, env: dict[str, str], cloud_env: dict[str, str],
        kubelets: tuple, public: str, tmp_path: Path) -> None:
    srv, cid = cluster
    user = {**env, **cloud_env}
    plugin, daemons = kubelets
    ports_before = {p.id for p in conn.network.ports()}
    lbs_before = {lb.id for lb in lb_conn.load_balancer.load_balancers()}
    kubelet = Kubelet(ovn_lab, plugin, daemons, cid)
    servers: dict[str, Answering] = {}
    app = tmp_path / "app.yaml"
    try:
        out = netbay_k8s(srv, user, "apply", "-f", str(manifest(app, 2)), "--cluster", cid)
        assert "made service shop/web" in out and "made floating IP" in out, out

        # The kubelets: web-0 on chassis 1, web-1 and the client on chassis 2.
        for key, node in (("shop/web-0", 0), ("shop/web-1", 1), ("clients/client", 1)):
            kubelet.run(key, node)
        for key, (node, _) in kubelet.pods.items():
            port = port_of(conn, key)
            hv = ovn_lab.hvs[node]
            assert (port.binding_host_id, port.binding_vif_type) == (hv.chassis, "ovs"), key
            assert wait_status(conn, port.id, "ACTIVE") == "ACTIVE", key
            assert ovn_lab.bound_chassis(port.id) == hv.chassis, key
        ip = {key: port_of(conn, key).fixed_ips[0]["ip_address"] for key in kubelet.pods}
        for key in ("shop/web-0", "shop/web-1"):
            servers[key] = Answering(kubelet.ns(key), ip[key], key.split("/")[1])

        # The mapping's load balancer: the ovn provider, SOURCE_IP_PORT, the two pods as members.
        lb = the_lb(lb_conn)
        assert wait_lb(lb_conn, lb.id) == "ACTIVE"
        lb = lb_conn.load_balancer.get_load_balancer(lb.id)
        assert lb.provider == "ovn"
        assert [p.lb_algorithm for p in lb_conn.load_balancer.pools(loadbalancer_id=lb.id)] == ["SOURCE_IP_PORT"]
        assert members(lb_conn, lb, two := {ip["shop/web-0"], ip["shop/web-1"]}) == two
        row = ovn_lab.nbctl("--bare", "--columns=_uuid", "find", "Load_Balancer", f"name={lb.id}")
        assert row and f"{lb.vip_address}:{VIP_PORT}" in ovn_lab.nbctl("--bare", "--columns=vips", "list",
                                                                        "Load_Balancer", row)
        # on the switch of the client's network too (behind the cluster's router, as the members')
        client_net = port_of(conn, "clients/client").network_id
        assert row in ovn_lab.nbctl("--bare", "--columns=load_balancer", "list", "Logical_Switch",
                                    f"neutron-{client_net}").split()
        (fip,) = conn.network.ips(port_id=lb.vip_port_id)
        ovn_lab.sync()
        # No step about the VIP port's owner (test_octavia_ovn.py clears it): the VIP is on the
        # cluster's service network, and the provider puts the load balancer on every switch
        # behind the cluster's router, so a client's own switch turns the VIP into a member.

        both = {"web-0", "web-1"}
        client = kubelet.ns("clients/client")
        got = heard(client, lb.vip_address, both)
        assert got == both, (got, diagnose(ovn_lab, client, lb.vip_address))
        got = heard(public, fip.floating_ip_address, both)
        assert got == both, (got, diagnose(ovn_lab, public, fip.floating_ip_address))

        # Scaled up: the third pod (chassis 1) joins the members and answers too.
        out = netbay_k8s(srv, user, "apply", "-f", str(manifest(app, 3)), "--cluster", cid)
        assert "made pod shop/web-2" in out, out
        kubelet.run("shop/web-2", 0)
        ip["shop/web-2"] = port_of(conn, "shop/web-2").fixed_ips[0]["ip_address"]
        servers["shop/web-2"] = Answering(kubelet.ns("shop/web-2"), ip["shop/web-2"], "web-2")
        assert wait_lb(lb_conn, lb.id) == "ACTIVE"
        web = {address for key, address in ip.items() if key.startswith("shop/")}
        assert members(lb_conn, lb, web) == web
        three = {"web-0", "web-1", "web-2"}
        assert heard(client, lb.vip_address, three) == three

        # Scaled down to one: the pods that go stop (the kubelet's DEL), then the mapping drops them.
        for key in ("shop/web-1", "shop/web-2"):
            servers.pop(key).close()
            kubelet.stop(key)
        out = netbay_k8s(srv, user, "apply", "-f", str(manifest(app, 1)), "--cluster", cid)
        assert "deleted pod shop/web-1" in out and "deleted pod shop/web-2" in out, out
        assert wait_lb(lb_conn, lb.id) == "ACTIVE"
        assert members(lb_conn, lb, {ip["shop/web-0"]}) == {ip["shop/web-0"]}
        assert heard(client, lb.vip_address, {"web-0"}) == {"web-0"}
        assert heard(public, fip.floating_ip_address, {"web-0"}) == {"web-0"}
    finally:
        for server in servers.values():
            server.close()
        kubelet.stop_all()
        netbay_k8s(srv, user, "delete", "-f", str(manifest(app, 1)), "--cluster", cid)
    deadline = time.monotonic() + LB_GONE
    while {lb.id for lb in lb_conn.load_balancer.load_balancers()} != lbs_before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {lb.id for lb in lb_conn.load_balancer.load_balancers()} == lbs_before
    while {p.id for p in conn.network.ports()} != ports_before and time.monotonic() < deadline:
        time.sleep(0.5)   # the provider releases the VIP's port once its load balancer is gone
    assert {p.id for p in conn.network.ports()} == ports_before
    assert ovn_lab.nbctl("--bare", "--columns=_uuid", "find", "Load_Balancer", f"name={lb.id}") == ""

