"""A cluster's wish runs once, however many times it was queued (stop 39's CI failure).

The API queues a create as it stores ``CREATE_IN_PROGRESS`` and the conductor's scan
for unclaimed work (every second) may queue the same cluster again before a worker
takes the first: the second entry then reached a worker after the create had failed
and been rolled back, and built the cluster again — on the cloud, after the test had
lifted the quota that failed it. The conductor now runs only what the stored status
still asks for, and the scan checks and queues under one lock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from netbay.coe import worklease
from netbay.coe.conductor import EmbeddedConductor
from netbay.store import migrate
from netbay.store.db import Store
from netbay.store.models import Cluster, ClusterTemplate, WorkLease


@pytest.fixture
def conductor(tmp_path) -> Iterator[EmbeddedConductor]:
    url = f"sqlite:///{tmp_path / 'netbay.db'}"
    migrate.upgrade(url)
    store = Store(url)
    c = EmbeddedConductor(store)

    def no_backend() -> None:
        raise AssertionError("a settled cluster was built again")

    c._api_factory = no_backend   # as start() sets it, without the workers
    yield c
    store.dispose()


def _cluster(store: Store, status: str) -> str:
    def add(s) -> str:
        template = ClusterTemplate(project_id="p", name="t", coe="kubernetes", network_driver="flannel")
        s.add(template)
        s.flush()
        cluster = Cluster(project_id="p", name="c", cluster_template_id=template.id, status=status,
                          status_reason="Resource CREATE failed: port (OS::Neutron::Port): Quota exceeded")
        s.add(cluster)
        s.flush()
        return cluster.id

    return store.retrying(add)


@pytest.mark.parametrize("status", ["CREATE_FAILED", "CREATE_COMPLETE", "UPDATE_FAILED", "DELETE_FAILED"])
def test_a_settled_cluster_queued_again_is_not_run_again(conductor: EmbeddedConductor, status: str) -> None:
    cid = _cluster(conductor.store, status)
    assert worklease.claim(conductor.store, cid, conductor.owner, "create")
    assert conductor.run(cid, "create") is None
    with conductor.store.read() as s:
        cluster = s.get(Cluster, cid)
        assert cluster is not None and cluster.status == status
        assert cluster.status_reason is not None and "Quota exceeded" in cluster.status_reason
        assert s.scalars(select(WorkLease)).all() == []   # the lease is given back


def test_the_scan_does_not_queue_what_a_worker_runs_or_the_queue_holds(conductor: EmbeddedConductor) -> None:
    running, queued, free = (_cluster(conductor.store, "CREATE_IN_PROGRESS") for _ in range(3))
    conductor._running.add(running)
    conductor.cluster_changed(queued, "create")
    conductor.resume()
    assert conductor._queue == {queued: "create", free: "create"}
    conductor.resume()
    assert conductor._queue == {queued: "create", free: "create"}


def test_a_cluster_deleted_before_its_create_began_has_no_stack_to_remove(conductor: EmbeddedConductor) -> None:
    """A delete that reaches a worker first (the create it replaced never ran) finds no
    stack row: removing none is done, not ``NoResultFound`` (test_ha saw DELETE_FAILED)."""
    from netbay.coe.stackrecord import StackRecord

    cid = _cluster(conductor.store, "DELETE_IN_PROGRESS")
    record = StackRecord(conductor.store, cluster_id=cid, name="c", project_id="p")
    record.load()
    record.set_status("DELETE", "DELETE_IN_PROGRESS", None)
    record.add_unrecorded()
    assert record.rows == {} and record.stack_id == ""
    record.remove()
