"""The cluster builder on a real cloud, where it differs from the embedded backend:
its load balancers in the cloud's Octavia (made, refused by quota, adopted and swept
by tag), a cloud without Octavia refusing a master load balancer by name, and ``netbay
up --backend openstack`` refusing a cloud it cannot log in to. What must be the same on
both backends — networks, router, security groups, ports and floating IPs made and
tagged, rollback, the delete-by-tag sweep — is in ``tests/test_cluster_backends.py``
(one parametrized fixture, ``cluster_api``).

That Neutron runs API-only — ML2 without mechanism drivers, no agents — so its ports
stay DOWN and nothing carries packets: these tests assert API effects (the objects,
their tags, owners and addresses, quotas, error messages) as the cloud's own
API lists them (:func:`tests.backendfix.cloud_snapshot`), never traffic. The cloud has no Nova here: nodes are
claims on their ports (``device_owner=compute:netbay``). Its Octavia
(``tests/peers/octavia_peer.py``: the API with the noop provider driver, a stand-in
reporting the statuses a provider would) is started for the tests that ask for it;
a cloud without one refuses a master load balancer by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from coehelp import ci_client, create_cluster, delete_cluster, make_template, wait_status
from conftest import unique

from netbay.backends.openstack import OpenStackBackend
from netbay.coe.compose import build
from netbay.coe.executor import Interrupted, Stack
from netbay.coe.handlers import NO_OCTAVIA
from netbay.store.db import Store
from tests.peers.openstack_cloud import Cloud
from tests.backendfix import cloud_snapshot, netbay_on_cloud
from tests.backendfix import octavia_snapshot as lb_snapshot
from tests import zygote

pytestmark = pytest.mark.peers

BUILD_TIMEOUT = 300


@pytest.fixture(scope="module")
def env(cloud_env: dict[str, str]) -> dict[str, str]:
    """The cloud as ``peer`` (``tests/backendfix.py``), which has an external network ``public``."""
    return cloud_env


@pytest.fixture(scope="module")
def server(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with netbay_on_cloud(env, tmp_path_factory.mktemp("netbay")) as srv:
        yield srv


@pytest.fixture(scope="module")
def admin(cloud: Cloud):
    conn = cloud.connection()
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def ci(server, admin) -> httpx.Client:
    """The Magnum API of netbay, called with a token of the cloud's Keystone."""
    return ci_client(server, admin.auth_token)


def test_a_master_load_balancer_is_refused_by_name_without_octavia(
        store: Store, admin, env: dict[str, str]) -> None:
    """The executor on the cloud's Neutron with no load-balancer backend beside it, as the
    conductor builds it for a catalog without ``load-balancer`` (the session's cloud may
    have Octavia by now, so no catalog is asked here)."""
    c = {"name": unique("c"), "uuid": str(uuid.uuid4()), "master_count": 1, "node_count": 1}
    template = {**LB_TEMPLATE, "master_lb_enabled": True}
    before = cloud_snapshot(env)
    stack = Stack(store, None, cluster_id=c["uuid"], name=c["name"], project_id=admin.current_project_id,
                  net=OpenStackBackend(connection=admin))
    outcome = stack.create(build(template, c), {"template": template, "cluster": c})
    assert outcome.status == "CREATE_FAILED"
    assert "(OS::Octavia::" in outcome.status_reason and NO_OCTAVIA in outcome.status_reason
    assert cloud_snapshot(env) == before
    assert stack.delete().status == "DELETE_COMPLETE"


@pytest.fixture
def lb_admin(octavia, cloud: Cloud):
    """An admin connection made after Octavia joined the catalog (a connection reads it once)."""
    conn = cloud.connection()
    yield conn
    conn.close()


def test_doctor_reports_the_clouds_octavia(octavia, env: dict[str, str]) -> None:
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "doctor", "--json", "--backend", "openstack"],
                   capture_output=True, text=True, timeout=180, env={**os.environ, **env})
    seen = json.loads(r.stdout)["network_backend"]
    assert seen["load_balancer"].startswith(octavia.url) and "Octavia at" in seen["detail"], seen


def test_an_octavia_quota_midway_rolls_back_and_names_octavias_error(
        ci: httpx.Client, lb_admin, env: dict[str, str]) -> None:
    """A master load balancer and an etcd one, where Octavia allows the project one."""
    admin = lb_admin
    project = admin.current_project_id
    before, lbs_before = cloud_snapshot(env), lb_snapshot(admin)
    admin.load_balancer.update_quota(project, load_balancers=len(lbs_before["loadbalancer"]) + 1)
    try:
        cid = create_cluster(ci, _lb_template(ci)["uuid"], node_count=1)
        cluster = wait_status(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"), BUILD_TIMEOUT)
    finally:
        admin.load_balancer.delete_quota(project)
    assert cluster["status"] == "CREATE_FAILED", cluster["status_reason"]
    assert "(OS::Octavia::LoadBalancer)" in cluster["status_reason"]
    assert "Quota has been met" in cluster["status_reason"], cluster["status_reason"]
    assert "rollback incomplete" not in cluster["status_reason"]
    assert lb_snapshot(admin) == lbs_before and cloud_snapshot(env) == before
    delete_cluster(ci, cid, BUILD_TIMEOUT)


LB_TEMPLATE = {"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
               "floating_ip_enabled": True, "labels": {"flannel_backend": "vxlan"}}


def _lb_template(ci: httpx.Client) -> dict:
    """No floating IPs: a floating IP on the API load balancer needs its VIP port in Neutron,
    which a real provider makes and Octavia's noop provider does not (it invents its id)."""
    return make_template(ci, name=unique("cloud-lb"), external_network_id="public", network_driver="flannel",
                         floating_ip_enabled=False, master_lb_enabled=True, labels={"flannel_backend": "vxlan"})


def test_up_refuses_a_cloud_that_does_not_answer(cloud: Cloud, tmp_path: Path) -> None:
    """``netbay up --backend openstack`` checks the cloud before serving: a refused login
    (or no cloud named) stops it with the reason, before anything listens."""
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(json.dumps({"clouds": {"wrong": {"auth": cloud.auth(password="not-the-password"),
                                                       "region_name": "RegionOne", "identity_api_version": 3}}}))
    base = [sys.executable, "-m", "netbay.cli.main", "up", "--no-agent", "--port", "0", "--data-dir",
            str(tmp_path / "nb"), "--database-url", f"sqlite:///{tmp_path / 'nb.db'}", "--backend", "openstack"]
    env = {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds), "NETBAY_ADMIN_PASSWORD": "x"}
    env.pop("OS_CLOUD", None)
    r = subprocess.run([*base, "--os-cloud", "wrong"], capture_output=True, text=True, timeout=180, env=env)
    said = r.stdout + r.stderr
    assert r.returncode == 2, said
    assert "unreachable" in said and ("401" in said or "Unauthorized" in said), said
    assert "starting" not in said and not (tmp_path / "nb").exists()   # refused before anything
    r = subprocess.run(base, capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 2 and "no cloud named" in r.stdout + r.stderr, r.stdout + r.stderr


def test_a_restart_adopts_load_balancers_by_tag_and_the_sweep_takes_them(
        store: Store, lb_admin, env: dict[str, str]) -> None:
    """The executor on the cloud's Neutron and Octavia: it stops dead right after Octavia
    made a load balancer and a listener but before their ids were written down; a new
    executor finds them by tag instead of making them twice. A delete stopped half-way
    is finished by the next one, and nothing is left in either service."""
    from netbay.backends.loadbalancers import open_lb_backend

    admin = lb_admin
    template = {**LB_TEMPLATE, "master_lb_enabled": True, "floating_ip_enabled": False}
    c = {"name": unique("c"), "uuid": str(uuid.uuid4()), "master_count": 1, "node_count": 1}
    graph = build(template, c)
    lost = {"api_lb", "etcd_listener"}
    before, lbs_before = cloud_snapshot(env), lb_snapshot(admin)

    def stack(**kw) -> Stack:
        return Stack(store, None, cluster_id=c["uuid"], name=c["name"], project_id=admin.current_project_id,
                     net=OpenStackBackend(connection=admin), lb=open_lb_backend("openstack", connection=admin),
                     **kw)

    def crash_after_made(name: str, action: str, status: str) -> None:
        if status == "MADE" and name in lost:
            raise Interrupted()

    with pytest.raises(Interrupted):
        stack(hook=crash_after_made).create(graph, {"template": template, "cluster": c})
    outcome = stack().resume()
    assert outcome is not None and outcome.status == "CREATE_COMPLETE", outcome
    tag = f"netbay-cluster={c['uuid']}"
    lb = admin.load_balancer
    assert (len(list(lb.load_balancers(tags=tag))), len(list(lb.listeners(tags=tag)))) == (2, 2)  # none twice

    deleted = [0]

    def crash_midway(name: str, action: str, status: str) -> None:
        if action == "DELETE" and status == "COMPLETE":
            deleted[0] += 1
            if deleted[0] == 3:
                raise Interrupted()

    with pytest.raises(Interrupted):
        stack(hook=crash_midway).delete()
    assert stack().resume().status == "DELETE_COMPLETE"
    assert lb_snapshot(admin) == lbs_before and cloud_snapshot(env) == before
