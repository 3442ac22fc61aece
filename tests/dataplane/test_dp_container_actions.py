"""Zun's container actions doing the real thing in Docker (issue 29): pause/unpause,
kill with a signal, logs, top, stats, archives both ways, execute with the command in
the body, PATCH (rename, cpu/memory into Docker's cgroup settings), the action
records, ``cpu``/``memory``/``restart_policy``/``mounts`` given to Docker at create,
an admin acting on another project's container, and a container on a subnet without
a gateway running with no default route. Through python-zunclient where it has the
call, raw HTTP else. Same fixtures as test_dp_containers.py.
"""

from __future__ import annotations

import base64
import io
import tarfile
from typing import Any

import pytest

from zunhelp import zun_error, zun_http, zunclient

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .docker_fixtures import sh
from .dp_helpers import ping
from .zun_fixtures import cloud, daemon, docker_container, plugin, wait_container, zun  # noqa: F401

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

LOOP = ["sh", "-c", "trap 'exit 0' TERM; echo started; echo oops >&2; while true; do sleep 1; done"]


def _run(zun: Any, net: dict, **body: Any) -> dict:
    r = zun.post("/containers?run=true", json={"image": dk.IMAGE, "command": LOOP,
                                                "nets": [{"network": net["id"]}], **body})
    assert r.status_code == 202, r.text
    return wait_container(zun, r.json()["uuid"], "Running")


def _cleanup(cloud: Cloud, zun: Any, uuids: list[str], net: dict) -> None:
    for uuid in uuids:
        zun.delete(f"/containers/{uuid}?force=true")
    for n in zun.get("/networks").json()["networks"]:
        if n["neutron_net_id"] == net["id"]:
            zun.delete(f"/networks/{n['uuid']}")
    wait_for(lambda: cloud.http.delete(f"/network/v2.0/networks/{net['id']}").status_code in (204, 404),
             10, 0.2, "the network to go")


def test_actions_do_the_real_thing_in_docker(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    net, _ = cloud.network("za-a", "10.72.0.0/24")
    zc = zunclient(cloud.server)
    made: list[str] = []
    try:
        c = _run(zun, net, name="za-one")
        made.append(c["uuid"])
        uuid = c["uuid"]
        # logs: stdout and stderr, or one of them; tail; timestamps.
        wait_for(lambda: "started" in zc.containers.logs(uuid, stdout=True, stderr=True), 10, 0.2, "the log")
        both = zc.containers.logs(uuid, stdout=True, stderr=True)
        assert "started" in both and "oops" in both
        assert "oops" not in zc.containers.logs(uuid, stdout=True, stderr=False)
        stamped = zun.get(f"/containers/{uuid}/logs", params={"timestamps": "True", "tail": "all"}).json()
        assert all(line.startswith("20") for line in stamped.splitlines()) and "started" in stamped, stamped
        assert len(zun.get(f"/containers/{uuid}/logs", params={"tail": "1"}).json().splitlines()) == 1
        # top and stats.
        top = zc.containers.top(uuid, ps_args="aux")
        assert "Titles" in top and any("sleep" in " ".join(p) or "sh" in " ".join(p) for p in top["Processes"])
        stats = zc.containers.stats(uuid)
        assert stats["CONTAINER"] == "za-one" and {"CPU %", "MEM USAGE(MiB)", "NET I/O(B)"} <= set(stats)
        # execute with the command in the JSON body (and in the query, as python-zunclient sends it).
        r = zun.post(f"/containers/{uuid}/execute", json={"command": "sh -c 'echo hi; exit 3'", "run": True})
        assert r.status_code == 200 and r.json()["output"] == "hi\n" and r.json()["exit_code"] == 3, r.text
        assert zc.containers.execute(uuid, command="echo query")["output"] == "query\n"
        # Archives both ways (base64 data at 1.40), checked inside the container.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("hello.txt")
            info.size = 5
            tar.addfile(info, io.BytesIO(b"hello"))
        zc.containers.put_archive(uuid, "/", buf.getvalue())
        assert sh(docker_container(daemon, c), "cat /hello.txt") == (0, "hello")
        got = zc.containers.get_archive(uuid, "/hello.txt")
        assert got["stat"]["name"] == "hello.txt" and got["stat"]["size"] == 5
        with tarfile.open(fileobj=io.BytesIO(got["data"])) as tar:
            assert tar.extractfile("hello.txt").read() == b"hello"
        raw = zun.get(f"/containers/{uuid}/get_archive", params={"path": "/hello.txt"}).json()
        assert base64.b64decode(raw["data"])[:9] == b"hello.txt"
        zun_error(zun.get(f"/containers/{uuid}/get_archive", params={"path": "/no/such"}), 400)
        # PATCH: a new name, and cpu/memory into Docker's settings.
        updated = zun.patch(f"/containers/{uuid}", json={"name": "za-renamed", "cpu": 0.5, "memory": "96"})
        assert updated.status_code == 200, updated.text
        assert (updated.json()["name"], updated.json()["cpu"], updated.json()["memory"]) == ("za-renamed", 0.5, "96")
        host = daemon.client.api.inspect_container(c["container_id"])["HostConfig"]
        assert (host["CpuShares"], host["Memory"]) == (512, 96 * 1024 * 1024)
        # pause / unpause, with Zun's state rules.
        zc.containers.pause(uuid)
        wait_container(zun, uuid, "Paused")
        assert daemon.client.api.inspect_container(c["container_id"])["State"]["Paused"]
        zun_error(zun.post(f"/containers/{uuid}/pause"), 409, f"Cannot pause container {uuid} in Paused state.")
        zun_error(zun.post(f"/containers/{uuid}/execute", params={"command": "true"}), 409)
        zc.containers.unpause(uuid)
        wait_container(zun, uuid, "Running")
        # kill with a signal: TERM is trapped (exit 0), Docker's state says so.
        zun_error(zun.post(f"/containers/{uuid}/kill", params={"signal": "SIGNOPE"}), 400)
        zc.containers.kill(uuid, "SIGTERM")
        wait_container(zun, uuid, "Stopped")
        state = wait_for(lambda: (lambda st: st if not st["Running"] else None)(
            daemon.client.api.inspect_container(c["container_id"])["State"]), 10, 0.1, "the app to end")
        assert state["ExitCode"] == 0   # the trap ran: TERM it was
        # The action records, newest first, each with its event.
        records = zc.actions.list(uuid)
        assert [a.action for a in records][:4] == ["kill", "unpause", "pause", "create"]
        one = zc.actions.get(uuid, records[0].request_id)
        (event,) = one.events
        assert event["event"] == "compute__do_container_kill" and event["result"] == "Success"
        assert one.finish_time is not None
    finally:
        _cleanup(cloud, zun, made, net)


def test_resources_restart_policy_and_mounts_given_to_docker(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    net, _ = cloud.network("za-r", "10.73.0.0/24")
    made: list[str] = []
    try:
        c = _run(zun, net, cpu=0.25, memory="64", restart_policy={"Name": "on-failure", "MaximumRetryCount": 2},
                 mounts=[{"type": "volume", "size": 1, "destination": "/data"},
                         {"type": "bind", "source": base64.b64encode(b"from zun").decode(),
                          "destination": "/etc/zun/file.txt"}])
        made.append(c["uuid"])
        assert c["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": "2"}
        assert (c["cpu"], c["memory"]) == (0.25, "64")
        inspect = daemon.client.api.inspect_container(c["container_id"])
        host = inspect["HostConfig"]
        assert (host["CpuShares"], host["Memory"]) == (256, 64 * 1024 * 1024)
        assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 2}
        volume = f"zun-{c['uuid']}-0"
        assert any(m.get("Name") == volume and m["Destination"] == "/data" for m in inspect["Mounts"])
        dc = docker_container(daemon, c)
        assert sh(dc, "cat /etc/zun/file.txt") == (0, "from zun")
        assert sh(dc, "echo kept > /data/x && cat /data/x") == (0, "kept\n")
        # A rebuild keeps the volume (and writes the file again into the new app).
        assert zun.post(f"/containers/{c['uuid']}/rebuild").status_code == 202
        rebuilt = wait_container(zun, c["uuid"], "Running")
        dc = docker_container(daemon, rebuilt)
        assert sh(dc, "cat /data/x /etc/zun/file.txt") == (0, "kept\nfrom zun")
    finally:
        _cleanup(cloud, zun, made, net)
    assert not daemon.client.volumes.list(filters={"name": f"zun-{made[0]}"})


def test_admin_acts_on_another_projects_container(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    server = cloud.server
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    member = zun_http(server, token)
    neutron = server.http(token)
    net = neutron.post("/networks", json={"network": {"name": "za-m"}}).json()["network"]
    neutron.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.74.0.0/24", "ip_version": 4}})
    c = _run(member, net, name="za-theirs", exposed_ports={"80/tcp": {}})
    try:
        assert zun.get(f"/containers/{c['uuid']}?all_projects=True").json()["project_id"] == c["project_id"]
        assert zun.post(f"/containers/{c['uuid']}/stop?all_projects=True&timeout=1").status_code == 202
        wait_container(member, c["uuid"], "Stopped")
        zun_error(member.delete(f"/containers/{c['uuid']}?all_projects=True"), 403)
        assert zun.delete(f"/containers/{c['uuid']}?all_projects=True").status_code == 204
        zun_error(member.get(f"/containers/{c['uuid']}"), 404)
        # The container's ports and its exposed-ports group (its project's) went with it.
        assert neutron.get("/ports", params={"device_id": c["uuid"]}).json()["ports"] == []
        assert neutron.get("/security-groups", params={"name": f"zun-{c['uuid']}"}).json()["security_groups"] == []
    finally:
        zun.delete(f"/containers/{c['uuid']}?force=true&all_projects=True")
        for n in member.get("/networks").json()["networks"]:
            member.delete(f"/networks/{n['uuid']}")
        wait_for(lambda: neutron.delete(f"/networks/{net['id']}").status_code in (204, 404), 10, 0.2, "net gone")


def test_a_subnet_without_a_gateway_runs_with_no_default_route(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    net, _ = cloud.network("za-g", "10.75.0.0/24", gateway_ip=None)
    sb = cloud.sandbox("za-gsb", networks=[net["id"]])
    made: list[str] = []
    try:
        c = _run(zun, net, nets=[{"network": net["id"], "v4-fixed-ip": "10.75.0.20"}])
        made.append(c["uuid"])
        dc = docker_container(daemon, c)
        code, routes = sh(dc, "ip route")
        assert code == 0 and "default" not in routes and "10.75.0.0/24" in routes, routes
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        assert ping(cloud.sandbox_ns(sb["id"]), "10.75.0.20", count=3), "sandbox -> container on its own subnet"
    finally:
        cloud.delete_sandbox(sb["id"])
        _cleanup(cloud, zun, made, net)
