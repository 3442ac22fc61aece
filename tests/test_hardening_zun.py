"""Issue 25, defect 8: the Zun container API checks its input as Zun does and refuses,
in Zun's format and naming the field, what it would otherwise drop: bad names, memory
and cpu; ``privileged``, Cinder mounts and the other fields netbay does not honour; netbay's
own labels (``netbay.*``), which the Kubernetes controller trusts. Nothing is created
by a refused request. Driven through python-zunclient against a real ``netbay serve``."""

from __future__ import annotations

import pytest

from conftest import unique
from zunhelp import network, zun_error, zun_http, zunclient

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


@pytest.fixture(scope="module")
def member(server):
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    net, _ = network(server.http(token), unique("hz"), "10.89.0.0/24")
    return {"zun": zun_http(server, token), "neutron": server.http(token), "net": net,
            "zc": zunclient(server, user, password, project), "admin": zunclient(server)}


def _refused(member, field: str, **body) -> str:
    """Create through python-zunclient: a 400 whose title names ``field`` and nothing made
    (no container, no port). The detail."""
    from zunclient import exceptions

    zc, neutron = member["zc"], member["neutron"]
    before = ([c.uuid for c in zc.containers.list()], [p["id"] for p in neutron.get("/ports").json()["ports"]])
    with pytest.raises(exceptions.BadRequest) as caught:
        zc.containers.create(**{"image": "busybox", "nets": [{"network": member["net"]["id"]}], **body})
    err = caught.value
    assert err.http_status == 400 and err.message == f"Invalid input for field '{field}'", err
    after = ([c.uuid for c in zc.containers.list()], [p["id"] for p in neutron.get("/ports").json()["ports"]])
    assert after == before
    return err.details


def _made(member, **body):
    """Create through python-zunclient (accepted: 202, Creating); then delete it (force: an
    admin's, as Zun's ``container:delete_force``)."""
    c = member["zc"].containers.create(**{"image": "busybox", "nets": [{"network": member["net"]["id"]}], **body})
    assert c.status == "Creating"
    member["admin"].containers.delete(c.uuid, force=True)
    return c


@pytest.mark.parametrize("name", ["a/b", "../../etc", "x", "-lead", "sp ace", "n" * 256])
def test_bad_names_are_refused(member, name):
    detail = _refused(member, "name", name=name)
    assert detail.startswith(f"Invalid input for field 'name'. Value: '{name}'. ")


def test_the_error_is_zuns_format(member):
    r = member["zun"].post("/containers", json={"image": "busybox", "name": "a/b"})
    detail = zun_error(r, 400)
    (err,) = r.json()["errors"]
    assert err["title"] == "Invalid input for field 'name'"
    assert detail == "Invalid input for field 'name'. Value: 'a/b'. 'a/b' does not match '^[a-zA-Z0-9][a-zA-Z0-9_.-]+$'"


@pytest.mark.parametrize(("field", "value", "why"), [
    ("memory", "-5", "does not match '^[0-9]+$'"),
    ("memory", "512M", "does not match '^[0-9]+$'"),          # Zun's API takes MiB as digits
    ("memory", 3, "3 is less than the minimum of 4"),
    ("memory", "9000", "9000 is greater than the maximum of 8192"),
    ("cpu", -1, "-1 is less than the minimum of 0.1"),
    ("cpu", "0", "0 is less than the minimum of 0.1"),
    ("cpu", 17, "17 is greater than the maximum of 16.0"),
    ("cpu", "lots", "does not match"),
])
def test_bad_memory_and_cpu_are_refused(member, field, value, why):
    detail = _refused(member, field, **{field: value})
    assert why in detail, detail


@pytest.mark.parametrize(("field", "value", "shown"), [("memory", "512", "512"), ("memory", 4, "4"), ("cpu", 0.5, 0.5),
                                                      ("cpu", "2", 2.0)])
def test_valid_memory_and_cpu_are_kept_as_zun_shows_them(member, field, value, shown):
    """Zun's schema takes them; Docker is given them (memory MiB as a string, cpu a number)."""
    assert getattr(_made(member, **{field: value}), field) == shown


@pytest.mark.parametrize("name", ["ab", "web-1", "a.b_c-D9", "n" * 255])
def test_valid_names_are_accepted(member, name):
    assert _made(member, name=name).name == name


def test_privileged_and_cinder_mounts_are_refused_not_ignored(member):
    assert "netbay does not run containers with 'privileged'" in _refused(member, "privileged", privileged=True)
    # A volume by source is Cinder's: netbay has none, and says so by name.
    zun_error(member["zun"].post("/containers", json={
        "image": "busybox", "mounts": [{"source": "vol-a", "destination": "/host"}]}), 400,
        contains="Volume vol-a could not be found: netbay has no block storage (Cinder)")
    # A bind mount's source is the file's contents, base64 (python-zunclient encodes it): the raw body.
    zun_error(member["zun"].post("/containers", json={
        "image": "busybox", "mounts": [{"type": "bind", "source": "/", "destination": "/host"}]}), 400,
        contains="Invalid input for field 'mounts/0/source'")
    # Said false (as the CLI sends them), they ask for nothing: accepted.
    _made(member, privileged=False, interactive=False, tty=False, mounts=[])


@pytest.mark.parametrize(("field", "value"), [
    ("auto_remove", True), ("interactive", True), ("tty", True), ("auto_heal", True),
    ("image_pull_policy", "always"), ("image_driver", "glance"),
    ("runtime", "runsc"), ("disk", 10), ("availability_zone", "az2"),
    ("healthcheck", {"cmd": "true"}), ("registry", "myregistry"),
])
def test_other_dropped_fields_are_refused(member, field, value):
    assert "netbay" in _refused(member, field, **{field: value})


def test_a_dedicated_cpu_policy_is_refused(member):
    """(python-zunclient does not send ``cpu_policy``: the raw body.)"""
    zun_error(member["zun"].post("/containers", json={"image": "busybox", "cpu_policy": "dedicated"}), 400,
              "Invalid input for field 'cpu_policy'. Value: 'dedicated'. "
              "netbay runs containers with the 'shared' CPU policy only.")


def test_entrypoint_and_host_follow_zuns_versions_and_rules(server, member):
    zun = member["zun"]
    zun_error(zun.post("/containers", json={"image": "busybox", "entrypoint": ["sh"]}), 400,
              contains="Invalid input for field 'entrypoint'")
    old = zun_http(server, server.token(), version="container 1.38")
    zun_error(old.post("/containers", json={"image": "busybox", "host": "anywhere"}), 400,
              "Additional properties are not allowed ('host' was unexpected)")
    zun_error(zun.post("/containers", json={"image": "busybox", "host": "anywhere"}), 403)
    admin = zun_http(server, server.token())
    zun_error(admin.post("/containers", json={"image": "busybox", "host": "not-this-machine"}), 400,
              contains="Invalid input for field 'host'")
    zun_error(zun.post("/containers", json={"image": "busybox", "run": True}), 400,
              "Additional properties are not allowed ('run' was unexpected)")
    zun_error(zun.post("/containers", json={"image": "busybox", "nets": [
        {"network": member["net"]["id"], "preserve_on_delete": True}]}), 400, contains="'preserve_on_delete'")


@pytest.mark.parametrize("key", ["netbay.k8s.cluster", "netbay.k8s.role", "netbay.container", "netbay.anything"])
def test_netbays_own_labels_are_refused(member, key):
    detail = _refused(member, "labels", labels={"app": "web", key: "x"})
    assert detail == (f"Invalid input for field 'labels'. Value: '{key}'. "
                      "Labels starting with 'netbay.' are netbay's own.")


def test_other_labels_are_kept(member):
    c = _made(member, labels={"app": "web", "io.netbay": "fine", "netbay": "fine"})
    assert c.labels == {"app": "web", "io.netbay": "fine", "netbay": "fine"}


def test_the_labels_netbay_trusts_are_the_reserved_ones():
    """The Kubernetes controller's and the runner's label names come from the one list."""
    from netbay.containers import runner
    from netbay.k8s import dockerpods
    from netbay.runtime import labels

    for name in (dockerpods.CLUSTER, dockerpods.POD, dockerpods.PORT, dockerpods.ROLE, dockerpods.SPEC,
                 dockerpods.CONTAINER, labels.K8S_ATTEMPT,
                 runner.LABEL, runner.SANDBOX_LABEL):
        assert labels.reserved(name), name
    assert not labels.reserved("app") and not labels.reserved("io.netbay.x")


def test_network_bodies_are_checked_as_zuns(member):
    zun, net = member["zun"], member["net"]
    before = zun.get("/networks").json()["networks"]
    zun_error(zun.post("/networks", json={"name": "x", "neutron_net_id": net["id"]}), 400,
              "Invalid input for field 'name'. Value: 'x'. 'x' is too short")
    zun_error(zun.post("/networks", json={"neutron_net_id": net["id"], "neutron_subnet": 5}), 400,
              "Invalid input for field 'neutron_subnet'. Value: '5'. 5 is not of type 'string', 'null'")
    assert zun.get("/networks").json()["networks"] == before
