"""Magnum's remaining endpoints through python-magnumclient: the conductors
(``openstack coe service list``), each cluster's CA (``openstack coe cluster config``
writes a kubeconfig whose CA and client certificate verify against it; ``coe ca
rotate``), keypair names, and the ``node_count`` rule at each microversion.

The server runs its conductor (it builds the cluster, no dataplane agent) with a
half-second heartbeat.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from coehelp import ci_client, magnum_error, make_keypair, make_template, wait_status
from conftest import ADMIN_PASSWORD, Server, start_server, stop_server, unique
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from netbay.coe import mservices
from netbay.store.models import MService
from tests.osc import openstack as run_openstack


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    os.environ["NETBAY_CONDUCTOR_REPORT_INTERVAL"] = "0.5"
    try:
        srv = start_server(database_url, tmp_path_factory.mktemp("netbay"))
    finally:
        del os.environ["NETBAY_CONDUCTOR_REPORT_INTERVAL"]
    try:
        yield srv
    finally:
        stop_server(srv)


def osc(server: Server, *args: str, user: tuple[str, str, str] = ("admin", ADMIN_PASSWORD, "admin"),
        json_out: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME=user[0], OS_PASSWORD=user[1], OS_PROJECT_NAME=user[2],
               OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
    # magnumclient's ``cluster config`` reads $SHELL to pick export syntax and raises KeyError
    # without it; a login shell always sets it, a CI runner may not.
    env.setdefault("SHELL", "/bin/sh")
    return run_openstack(*args, *(["-f", "json"] if json_out else []), env=env)


def ok(r: subprocess.CompletedProcess) -> object:
    assert r.returncode == 0, f"{' '.join(r.args)}:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout) if r.stdout.strip().startswith(("[", "{")) else r.stdout


@pytest.fixture(scope="module")
def owner(server: Server) -> tuple[str, str, str]:
    return server.make_user()


@pytest.fixture(scope="module")
def ci(server: Server, owner) -> httpx.Client:
    return ci_client(server, server.token(*owner))


@pytest.fixture(scope="module")
def cluster(server: Server, owner, ci: httpx.Client) -> dict:
    make_keypair(server, server.token(*owner), "owner-key")
    template = make_template(ci, name=unique("k8s"), external_network_id="public", network_driver="flannel",
                             floating_ip_enabled=True, master_lb_enabled=False, keypair_id="owner-key")
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template["uuid"], "node_count": 1})
    assert r.status_code == 202, r.text
    built = wait_status(ci, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"), timeout=180)
    assert built["status"] == "CREATE_COMPLETE", built["status_reason"]
    return built


# --- conductors ----------------------------------------------------------------------------------


def test_coe_service_list_shows_the_running_conductor(server: Server) -> None:
    first = ok(osc(server, "coe", "service", "list"))
    assert len(first) == 1, first
    [row] = first
    assert row["binary"] == "magnum-conductor" and row["state"] == "up" and row["disabled"] is False
    assert row["host"] and row["id"] >= 1 and row["created_at"].endswith("+00:00")
    # The heartbeat goes on: report_count grows.
    ci = ci_client(server, server.token())
    before = ci.get("/mservices").json()["mservices"][0]["report_count"]
    for _ in range(60):
        again = ci.get("/mservices").json()["mservices"][0]
        if again["report_count"] > before:
            break
        import time
        time.sleep(0.1)
    assert again["report_count"] > before and again["updated_at"] is not None


def test_a_silent_conductor_is_down() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 0)
    row = MService(id=1, host="h", binary="magnum-conductor", report_count=3, disabled=False, forced_down=False,
                   created_at=now - dt.timedelta(hours=1), last_seen_up=now - dt.timedelta(seconds=181))
    assert mservices.render(row, now, 180)["state"] == "down"
    row.last_seen_up = now - dt.timedelta(seconds=179)
    assert mservices.render(row, now, 180)["state"] == "up"
    row.forced_down = True
    assert mservices.render(row, now, 180)["state"] == "down"


def test_only_the_admin_lists_conductors(server: Server, owner) -> None:
    r = osc(server, "coe", "service", "list", user=owner)
    assert r.returncode != 0 and "magnum-service:get_all" in r.stderr, r.stderr


# --- certificates ----------------------------------------------------------------------------------


def _verifies(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except Exception:  # noqa: BLE001 - InvalidSignature or a name/kind mismatch
        return False


def test_cluster_config_writes_a_kubeconfig_that_verifies(server: Server, owner, cluster: dict,
                                                          tmp_path: Path) -> None:
    r = osc(server, "coe", "cluster", "config", cluster["name"], "--dir", str(tmp_path), "--output-certs",
            user=owner, json_out=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # What it writes says plainly that the API server is a stand-in (text PEM readers skip).
    said = (tmp_path / "ca.pem").read_text().split("-----BEGIN")[0]
    assert f"the API server behind {cluster['api_address']} is a stand-in" in said, said
    assert "no kube-apiserver" in said and f"netbay k8s apply --cluster {cluster['name']}" in said
    config = yaml.safe_load((tmp_path / "config").read_text())
    [entry] = config["clusters"]
    assert entry["cluster"]["server"] == cluster["api_address"]
    assert entry["cluster"]["server"].startswith("https://")
    ca_data = base64.b64decode(entry["cluster"]["certificate-authority-data"])
    assert b"is a stand-in" in ca_data
    ca = x509.load_pem_x509_certificate(ca_data)
    [user] = config["users"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(user["user"]["client-certificate-data"]))
    key = serialization.load_pem_private_key(base64.b64decode(user["user"]["client-key-data"]), None)
    assert _verifies(ca, ca) and ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert _verifies(cert, ca)
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    # The CA served is the one the cluster keeps.
    shown = ok(osc(server, "coe", "ca", "show", cluster["uuid"], user=owner, json_out=False))
    assert ca.public_bytes(serialization.Encoding.PEM).decode().strip() in shown


def test_ca_rotation_replaces_the_ca(server: Server, owner, ci: httpx.Client, cluster: dict,
                                     tmp_path: Path) -> None:
    old = x509.load_pem_x509_certificate(ci.get(f"/certificates/{cluster['uuid']}").json()["pem"].encode())
    ok(osc(server, "coe", "ca", "rotate", cluster["uuid"], user=owner, json_out=False))
    body = ci.get(f"/certificates/{cluster['name']}").json()
    assert body["cluster_uuid"] == cluster["uuid"]
    assert body["links"][0]["href"].endswith(f"/v1/certificates/{cluster['uuid']}")
    new = x509.load_pem_x509_certificate(body["pem"].encode())
    assert new.serial_number != old.serial_number and not _verifies(new, old)
    r = osc(server, "coe", "cluster", "config", cluster["name"], "--dir", str(tmp_path), user=owner,
            json_out=False)
    assert r.returncode == 0, r.stderr
    user = yaml.safe_load((tmp_path / "config").read_text())["users"][0]["user"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
    assert _verifies(cert, new) and not _verifies(cert, old)


def test_certificate_errors(ci: httpx.Client, cluster: dict, server: Server) -> None:
    magnum_error(ci.post("/certificates", json={"cluster_uuid": cluster["uuid"], "csr": "not a csr"}), 400,
                 contains="Invalid CSR")
    magnum_error(ci.post("/certificates", json={"cluster_uuid": "nope", "csr": "x"}), 400,
                 "Cluster nope could not be found.")
    magnum_error(ci.post("/certificates", json={"csr": "x"}), 400, contains="cluster_uuid")
    magnum_error(ci.get("/certificates/nope"), 404, "Cluster nope could not be found.")
    magnum_error(ci.get(f"/certificates/{cluster['uuid']}", params={"ca_cert_type": "etcd"}), 400,
                 contains="ca_cert_type etcd is not offered")
    other = ci_client(server, server.token(*server.make_user()))
    magnum_error(other.get(f"/certificates/{cluster['uuid']}"), 404)
    magnum_error(other.patch(f"/certificates/{cluster['uuid']}"), 404)


# --- keypairs: Nova's os-keypairs, which clusters are checked against --------------------


@pytest.mark.slow
def test_openstack_keypair_commands(server: Server, owner, tmp_path: Path) -> None:
    name = unique("kp")
    made = ok(osc(server, "keypair", "create", "--private-key", str(tmp_path / "id"), name, user=owner))
    assert made["name"] == name and made["fingerprint"].count(":") == 15
    private = serialization.load_pem_private_key((tmp_path / "id").read_bytes(), None) \
        if (tmp_path / "id").read_bytes().startswith(b"-----BEGIN RSA") else \
        serialization.load_ssh_private_key((tmp_path / "id").read_bytes(), None)
    shown = ok(osc(server, "keypair", "show", name, user=owner))
    raw = ok(osc(server, "keypair", "show", "--public-key", name, user=owner, json_out=False))
    public = serialization.load_ssh_public_key(raw.strip().encode())
    assert public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) == \
        private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert shown["fingerprint"] == made["fingerprint"] and shown["type"] == "ssh"
    assert name in [row["Name"] for row in ok(osc(server, "keypair", "list", user=owner))]
    assert name not in [row["Name"] for row in ok(osc(server, "keypair", "list"))]  # keypairs are per user
    r = osc(server, "keypair", "create", "--public-key", str(tmp_path / "nope"), name, user=owner)
    assert r.returncode != 0
    (tmp_path / "bad.pub").write_text("ssh-rsa not-a-key\n")
    r = osc(server, "keypair", "create", "--public-key", str(tmp_path / "bad.pub"), unique("bad"), user=owner)
    assert r.returncode != 0 and "Keypair data is invalid" in r.stderr, r.stderr
    ok(osc(server, "keypair", "delete", name, user=owner, json_out=False))
    r = osc(server, "keypair", "show", name, user=owner)
    assert r.returncode != 0 and f"No Keypair found for {name}" in r.stderr, r.stderr


def test_nova_error_bodies(server: Server, owner) -> None:
    token = server.token(*owner)
    api = httpx.Client(base_url=f"{server.url}/compute/v2.1", headers={"X-Auth-Token": token}, timeout=30)
    server._clients.append(api)
    user_id = _user_id(server, token)
    assert api.get("/os-keypairs/nope").json() == {"itemNotFound": {
        "code": 404, "message": f"Keypair nope not found for user {user_id}"}}
    name = unique("dup")
    assert api.post("/os-keypairs", json={"keypair": {"name": name}}).status_code == 200  # 2.1: 200
    r = api.post("/os-keypairs", json={"keypair": {"name": name}})
    assert r.status_code == 409 and r.json()["conflictingRequest"]["message"] == f"Key pair '{name}' already exists."
    r = api.post("/os-keypairs", json={"keypair": {"name": "a/b"}})
    assert r.status_code == 400 and "unsafe characters" in r.json()["badRequest"]["message"]
    r = api.get("/os-keypairs", headers={"OpenStack-API-Version": "compute 2.99"})
    assert r.status_code == 406 and "maximum is 2.10" in r.json()["notAcceptable"]["message"]
    r = api.delete(f"/os-keypairs/{name}", headers={"OpenStack-API-Version": "compute 2.2"})
    assert r.status_code == 204 and r.headers["OpenStack-API-Version"] == "compute 2.2"


def _user_id(server: Server, token: str) -> str:
    r = httpx.get(f"{server.auth_url}/auth/tokens", headers={"X-Auth-Token": token, "X-Subject-Token": token},
                  timeout=10)
    return r.json()["token"]["user"]["id"]


def test_keypairs_are_checked_where_magnum_checks_them(server: Server, owner, cluster: dict,
                                                       ci: httpx.Client) -> None:
    """Magnum's ``validate_os_resources``: a template's ``keypair_id`` is not checked (a
    template naming a keypair Nova does not know is made, shown, patched); a cluster's
    keypair — its own, else its template's — is, at cluster create (404)."""
    assert cluster["keypair"] == "owner-key"  # from the template
    name = unique("kp")
    ok(osc(server, "coe", "cluster", "template", "create", name, "--coe", "kubernetes", "--image",
           "fedora-coreos", "--external-network", "public", "--keypair", "never-seen", user=owner, json_out=False))
    assert ci.get(f"/clustertemplates/{name}").json()["keypair_id"] == "never-seen"
    ok(osc(server, "coe", "cluster", "template", "update", name, "--keypair", "still-unknown",
           user=owner, json_out=False))
    assert ci.get(f"/clustertemplates/{name}").json()["keypair_id"] == "still-unknown"
    r = osc(server, "coe", "cluster", "create", "--cluster-template", name, unique("c"), user=owner,
            json_out=False)
    assert r.returncode != 0 and "Unable to find keypair still-unknown (HTTP 404)" in r.stderr, r.stderr
    r = osc(server, "coe", "cluster", "create", "--cluster-template", name, "--keypair", "owner-key",
            "--node-count", "1", unique("c"), user=owner, json_out=False)
    assert r.returncode == 0, r.stderr   # the cluster's own keypair replaces the template's
    template = make_template(ci, name=unique("kp"), keypair_id="owner-key")
    magnum_error(ci.post("/clusters", json={"cluster_template_id": template["uuid"], "keypair": "never-seen"}),
                 404, "Unable to find keypair never-seen.")
    # Keypairs are the user's: another user's template names one it does not have — made;
    # its cluster from that template is refused.
    other = ci_client(server, server.token(*server.make_user()))
    theirs = other.post("/clustertemplates", json={"coe": "kubernetes", "keypair_id": "owner-key",
                                                   "image_id": "fedora-coreos"})
    assert theirs.status_code == 201, theirs.text
    magnum_error(other.post("/clusters", json={"cluster_template_id": theirs.json()["uuid"]}), 404,
                 "Unable to find keypair owner-key.")


# --- node_count per microversion ----------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.1", "1.5", "1.9", "latest"])
def test_zero_nodes_are_refused_below_1_10(server: Server, ci: httpx.Client, version: str) -> None:
    client = ci_client(server, server.token(), version)
    template = make_template(client, name=unique("nc"))
    for legacy, body in ((False, {"cluster_template_id": template["uuid"], "node_count": 0}),
                         (True, {"baymodel_id": template["uuid"], "node_count": 0})):
        r = client.post("/bays" if legacy else "/clusters", json=body)
        magnum_error(r, 400, "Resizing a nodegroup to zero is not supported in the provided microversion.")
    magnum_error(client.post("/clusters", json={"cluster_template_id": template["uuid"], "node_count": -1}), 400,
                 contains="Value should be greater or equal to 0")
    assert client.post("/clusters", json={"cluster_template_id": template["uuid"], "node_count": 1,
                                          "name": unique("one")}).status_code == 202
    # 1.10, where Magnum takes zero, is not served.
    r = ci_client(server, server.token(), "1.10").post("/clusters", json={"cluster_template_id": template["uuid"]})
    magnum_error(r, 406)
