"""A throwaway PKI for the lab's etcd: a CA, etcd's server certificate and client certificates (openssl CLI).

etcd runs with --client-cert-auth: only a client holding a certificate this CA
signed may talk to it. The keys are EC P-256, valid for two days, written
0600 into the folder.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lamplighter.bare.etcd_store import Tls


@dataclass(frozen=True)
class Pki:
    folder: Path
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path

    def client(self, name: str, common_name: bool = True) -> Tls:
        """A client certificate for `name` (a host daemon, a submitter, an admin), signed by this CA.

        common_name=False: `name` only as its organisational unit. With etcd's auth on, its gateway refuses
        every certificate with a common name (it cannot pass it on as the user): clients then carry one
        without, and name their user by password."""
        subject = f"/CN={name}" if common_name else f"/O=lamplighter-lab/OU={name}"
        cert, key = _signed(self.folder, name, self.ca, self.ca_key, "clientAuth", None, subject)
        return Tls(str(self.ca), str(cert), str(key))


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def _key_and_csr(folder: Path, name: str, subject: str) -> tuple[Path, Path]:
    key, csr = folder / f"{name}.key", folder / f"{name}.csr"
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(csr), "-subj", subject)  # fmt: skip
    os.chmod(key, 0o600)
    return key, csr


def _signed(
    folder: Path, name: str, ca: Path, ca_key: Path, usage: str, san: str | None, subject: str | None = None
) -> tuple[Path, Path]:
    key, csr = _key_and_csr(folder, name, subject or f"/CN={name}")
    ext = folder / f"{name}.ext"
    ext.write_text(f"extendedKeyUsage={usage}\n" + (f"subjectAltName={san}\n" if san else ""))
    cert = folder / f"{name}.crt"
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return cert, key


def make_pki(folder: Path, ca_name: str = "lamplighter-lab-ca", ips: tuple[str, ...] = ("127.0.0.1",)) -> Pki:
    """A CA, and etcd's server certificate for `ips` (the addresses clients dial)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / f"{ca_name}.crt", folder / f"{ca_name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(ca_key), "-out", str(ca), "-subj", f"/CN={ca_name}", "-days", "2")  # fmt: skip
    os.chmod(ca_key, 0o600)
    # clientAuth too: etcd's own gateway dials its gRPC server with this certificate.
    cert, key = _signed(folder, "etcd-server", ca, ca_key, "serverAuth,clientAuth", ",".join(f"IP:{ip}" for ip in ips))
    return Pki(folder, ca, ca_key, cert, key)
