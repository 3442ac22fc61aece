"""On a cloud whose catalog lists a compute service, a cluster's nodes are servers of
that cloud's Nova, each booted on the node's port in the cloud's Neutron.

No Nova can run on this machine: the compute service here is a STAND-IN for Nova
(``tests/peers/nova_standin.py``, the ``nova`` fixture of ``tests/backendfix.py``),
registered in the peers' real Keystone as ``compute``. It does to the real Neutron
what Nova does — binds each port a server boots on (``device_id`` = the server,
``device_owner=compute:nova``, ``binding:host_id``) and unbinds it on delete — so
these tests read the outcome from the real Neutron (its API, and the cloud's own
``openstack port list``): ports bound to the servers, and after a delete or a failed
boot everything gone.
A cloud without compute (port claims) is ``tests/test_cluster_backends.py``'s.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest
from coehelp import ci_client, create_cluster, delete_cluster, make_template, wait_status
from conftest import unique

from netbay.backends.novacloud import CloudServers
from netbay.backends.openstack import OpenStackBackend
from netbay.coe.compose import build
from netbay.coe.executor import Interrupted, Stack
from netbay.store.db import Store
from tests.backendfix import netbay_on_cloud, openstack, snapshot
from tests.peers.nova_standin import FLAVORS, HOST, IMAGES, OWNER, NovaStandin
from tests.peers.openstack_cloud import Cloud
from tests import zygote

pytestmark = pytest.mark.peers

BUILD_TIMEOUT = 300
TEMPLATE = {"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
            "master_lb_enabled": False, "labels": {"flannel_backend": "vxlan"}, "image_id": "cirros",
            "flavor_id": "m1.tiny", "master_flavor_id": "m1.small"}


@pytest.fixture(scope="module")
def admin(nova: NovaStandin, cloud: Cloud):
    """An admin connection made after the stand-in joined the catalog (a connection reads it once)."""
    conn = cloud.connection()
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def ci(nova: NovaStandin, cloud_env: dict[str, str], admin, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[httpx.Client]:
    """netbay's Magnum API (``netbay up --backend openstack``), with a token of the cloud's Keystone."""
    with netbay_on_cloud(cloud_env, tmp_path_factory.mktemp("netbay")) as srv:
        yield ci_client(srv, admin.auth_token)


def _cli_ports(env: dict[str, str]) -> set[str]:
    """The cloud's own ``openstack port list`` (one CLI run: each costs seconds here)."""
    return {row["ID"] for row in json.loads(openstack(env, "port", "list", "-f", "json", "-c", "ID"))}


def _servers_of(nova: NovaStandin, cid: str) -> list[dict]:
    return [s for s in list(nova.servers.values()) if s["metadata"].get("netbay-cluster") == cid]


def _create(ci: httpx.Client, node_count: int, **extra) -> str:
    tpl = make_template(ci, **{**TEMPLATE, "name": unique("nova"), **extra})
    return create_cluster(ci, tpl["uuid"], node_count)


def test_nodes_are_servers_booted_on_their_ports_and_deleted_with_the_cluster(
        ci: httpx.Client, nova: NovaStandin, admin, cloud_env: dict[str, str]) -> None:
    neutron = OpenStackBackend(connection=admin)
    before, cli_ports = snapshot(neutron), _cli_ports(cloud_env)
    cid = _create(ci, node_count=2, floating_ip_enabled=True)
    cluster = wait_status(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"), BUILD_TIMEOUT)
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]

    servers = _servers_of(nova, cid)
    assert sorted(s["metadata"]["role"] for s in servers) == ["master", "minion", "minion"]
    assert {s["status"] for s in servers} == {"ACTIVE"}
    for s in servers:
        flavor = "m1.small" if s["metadata"]["role"] == "master" else "m1.tiny"
        assert (s["flavor"]["id"], s["image"]["id"]) == (FLAVORS[flavor], IMAGES["cirros"])
        assert s["name"].startswith(cluster["name"] + "-")
        # The real Neutron: the node's port, made and tagged by netbay, bound to this server.
        ports = list(admin.network.ports(device_id=s["id"]))
        assert [p.id for p in ports] == s["ports"]
        port = ports[0]
        assert (port.device_owner, port.binding_host_id) == (OWNER, HOST)
        assert f"netbay-cluster={cid}" in port.tags
    # The cloud's own client sees them through the catalog's compute service.
    listed = {s.id for s in admin.compute.servers()}
    assert {s["id"] for s in servers} <= listed

    delete_cluster(ci, cid, BUILD_TIMEOUT)
    assert _servers_of(nova, cid) == []
    assert snapshot(neutron) == before and _cli_ports(cloud_env) == cli_ports


def test_a_boot_that_goes_to_error_fails_the_create_with_novas_fault_and_rolls_back(
        ci: httpx.Client, nova: NovaStandin, admin) -> None:
    neutron = OpenStackBackend(connection=admin)
    before = snapshot(neutron)
    nova.fail_next("No valid host was found. There are not enough hosts available.")
    cid = _create(ci, node_count=1, floating_ip_enabled=False)
    cluster = wait_status(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"), BUILD_TIMEOUT)
    reason = cluster["status_reason"]
    assert cluster["status"] == "CREATE_FAILED", reason
    assert "(OS::Nova::Server)" in reason and "went to ERROR: No valid host was found." in reason, reason
    assert "rollback incomplete" not in reason
    assert _servers_of(nova, cid) == []        # the failed one and its sibling: deleted
    assert snapshot(neutron) == before   # and the ports, networks, router, groups after them
    delete_cluster(ci, cid, BUILD_TIMEOUT)


def test_a_restart_adopts_a_server_by_its_metadata_and_the_sweep_deletes_it(
        store: Store, nova: NovaStandin, admin) -> None:
    """The executor stops dead right after Nova accepted a server, before its id was
    written down: the next one finds it by the marks in its metadata instead of booting
    it twice. A delete whose rows forgot the servers finds them by those marks too (in
    dependency order: each server gone before its port is deleted)."""
    template = {**TEMPLATE, "floating_ip_enabled": False}
    c = {"name": unique("c"), "uuid": str(uuid.uuid4()), "master_count": 1, "node_count": 1}
    before = snapshot(OpenStackBackend(connection=admin))

    def stack(**kw) -> Stack:
        return Stack(store, None, cluster_id=c["uuid"], name=c["name"], project_id=admin.current_project_id,
                     net=OpenStackBackend(connection=admin), servers=CloudServers(connection=admin), **kw)

    def crash_after_made(name: str, action: str, status: str) -> None:
        if status == "MADE" and name == "kube_minion_0":
            raise Interrupted()

    with pytest.raises(Interrupted):
        stack(hook=crash_after_made).create(build(template, c), {"template": template, "cluster": c})
    outcome = stack().resume()
    assert outcome is not None and outcome.status == "CREATE_COMPLETE", outcome
    servers = _servers_of(nova, c["uuid"])
    assert sorted(s["metadata"]["netbay-resource"] for s in servers) == ["kube_master_0", "kube_minion_0"]

    st = stack()
    st.record.load()
    for name in [n for n, r in st.record.rows.items() if r.type == "OS::Nova::Server"]:
        st.record.drop_row(name)        # the rows forgot the servers: only their marks remain
    assert all(p.device_owner == OWNER for s in servers for p in admin.network.ports(device_id=s["id"]))
    deleted = stack().delete()
    assert deleted.status == "DELETE_COMPLETE", deleted.status_reason
    assert _servers_of(nova, c["uuid"]) == []
    assert snapshot(OpenStackBackend(connection=admin)) == before


def test_doctor_says_nodes_are_servers_of_the_clouds_nova(nova: NovaStandin, cloud_env: dict[str, str]) -> None:
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "doctor", "--json", "--backend", "openstack"],
                   capture_output=True, text=True, timeout=180, env={**os.environ, **cloud_env})
    seen = json.loads(r.stdout)["network_backend"]
    assert seen["compute"].startswith(nova.url) and "servers of its Nova" in seen["detail"], seen
