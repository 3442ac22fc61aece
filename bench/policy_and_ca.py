"""What issue 16 adds to a request's path: the per-family policy check every API call
makes (``netbay/api/policy.py``), and the CA a cluster create makes
(``netbay/coe/certificates.py``) — ECDSA P-256 against RSA 2048 (Magnum's choice) in
the same run, and the signing of a magnumclient-style CSR.

    python bench/policy_and_ca.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from netbay.api import policy
from netbay.coe import certificates
from netbay.context import Context


def per_call(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def rsa_ca() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    reader = Context("u", "p", ("reader",))
    member = Context("u", "p", ("member", "reader"))
    checks = {
        "network GET as reader": lambda: policy.enforce("GET", "/network/v2.0/ports", reader),
        "load-balancer PUT as member": lambda: policy.enforce("PUT", "/load-balancer/v2/lbaas/pools/x", member),
        "container-infra POST as member": lambda: policy.enforce("POST", "/container-infra/v1/clusters", member),
    }
    for name, fn in checks.items():
        runs = [per_call(fn, 50_000) * 1e6 for _ in range(args.rounds)]
        print(f"policy {name:34s} median {statistics.median(runs):6.2f} µs/call")
    ca_pem, ca_key = certificates.new_ca("bench")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")])).sign(key, hashes.SHA256())
    csr_pem = csr.public_bytes(serialization.Encoding.PEM).decode()
    cases = {
        "CA: ECDSA P-256 (netbay)": lambda: certificates.new_ca("bench"),
        "CA: RSA 2048 key alone (baseline)": rsa_ca,
        "sign a client CSR": lambda: certificates.sign(ca_pem, ca_key, csr_pem),
    }
    for name, fn in cases.items():
        runs = [per_call(fn, 20) * 1e3 for _ in range(args.rounds)]
        print(f"{name:41s} median {statistics.median(runs):7.2f} ms  (min {min(runs):.2f}, max {max(runs):.2f})")
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
