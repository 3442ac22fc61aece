"""Each cluster's certificate authority, as Magnum's ``/v1/certificates`` serves it.

A CA (ECDSA P-256, self-signed, CN = the cluster's name) is made with the
cluster, in the same transaction: P-256 because an RSA 2048 key costs 50–250 ms
of the create request here, an EC key well under 1 ms (Kubernetes takes either). ``GET`` returns its certificate, ``POST`` signs a CSR
into a client certificate (what ``openstack coe cluster config`` asks for: CN
``admin``, O ``system:masters``), ``PATCH`` replaces the CA, after which
certificates it signed before no longer verify. Magnum keeps the CA's key in
its certificate manager (Barbican, or its own table); netbay keeps it in the
store, next to the token signing key. The CA served (and so ``cluster config``'s
``ca.pem`` and kubeconfig) opens with a few lines of RFC 7468 explanatory text, which
PEM readers skip: the API server behind the cluster's address is netbay's stand-in.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from sqlalchemy.orm import Session

from netbay.errors import BadRequest
from netbay.store.models import Cluster, ClusterCA, utcnow

CA_DAYS = 3650
CERT_DAYS = 1825  # Magnum's x509 term_of_validity
CA_CERT_TYPES = (None, "", "kubernetes")


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def new_ca(common_name: str) -> tuple[str, str]:
    """A fresh self-signed CA: (certificate PEM, private key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64] or "netbay-cluster-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return _pem(cert), key_pem


def sign(ca_pem: str, ca_key_pem: str, csr_pem: str) -> str:
    """A client certificate for ``csr_pem``'s subject and key, signed by the CA."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
    except (ValueError, TypeError):
        raise BadRequest("Invalid CSR: not a PEM certificate signing request.") from None
    try:
        valid = csr.is_signature_valid
    except (ValueError, InvalidSignature):
        valid = False
    if not valid:
        raise BadRequest("Invalid CSR: its signature does not match its key.")
    ca = x509.load_pem_x509_certificate(ca_pem.encode())
    # netbay made the CA and its key itself: EC (``new_ca``), a key type that can sign.
    key = cast(ec.EllipticCurvePrivateKey, serialization.load_pem_private_key(ca_key_pem.encode(), password=None))
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(csr.subject).issuer_name(ca.subject)
            .public_key(csr.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(cast(ec.EllipticCurvePublicKey, ca.public_key())), critical=False)
            .sign(key, hashes.SHA256()))
    return _pem(cert)


# --- per cluster --------------------------------------------------------------------------


def issue_ca(session: Session, cluster: Cluster) -> ClusterCA:
    """Make (or, on rotation, replace) the cluster's CA."""
    cert_pem, key_pem = new_ca(cluster.name)
    row = session.get(ClusterCA, cluster.id, with_for_update=True)
    if row is None:
        row = ClusterCA(cluster_id=cluster.id, cert_pem=cert_pem, key_pem=key_pem, created_at=utcnow())
        session.add(row)
    else:
        row.cert_pem, row.key_pem, row.updated_at = cert_pem, key_pem, utcnow()
    session.flush()
    return row


def ca_of(session: Session, cluster: Cluster) -> ClusterCA:
    """The cluster's CA; clusters made before CAs existed get theirs on first use."""
    return session.get(ClusterCA, cluster.id) or issue_ca(session, cluster)


def check_type(ca_cert_type: str | None) -> None:
    if ca_cert_type not in CA_CERT_TYPES:
        raise BadRequest(f"ca_cert_type {ca_cert_type} is not offered: netbay's clusters have one CA, "
                         "'kubernetes'.")


def explained(cluster: Cluster, coe: str | None, pem: str) -> str:
    """``pem`` after a plain statement that the COE's API server is a stand-in (RFC 7468
    explanatory text: OpenSSL, Go's ``encoding/pem`` and ``cryptography`` skip it)."""
    from netbay.coe.fragments import standins

    api = next(iter(standins(coe).values()))
    where = cluster.api_address or "the cluster's API address"
    lines = [f"netbay cluster {cluster.name}: the API server behind {where} is a stand-in.",
             f"netbay runs no {api} here: its masters answer the health checks and load balancers",
             "on the COE's ports with HTTP 200 and nothing more."]
    if (coe or "kubernetes") == "kubernetes":
        lines.append(f"Kubernetes objects go through `netbay k8s apply --cluster {cluster.name}`.")
    return "".join(f"{line}\n" for line in lines) + pem


def shown(cluster: Cluster, pem: str, csr: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster_uuid": cluster.id, "pem": pem}
    if csr is not None:
        out["csr"] = csr
    return out
