"""Certificates made in the test: one authority (trustme) and a server certificate for
127.0.0.1 and localhost, written as PEM files the server and the clients read."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

from acp_agent.remote.serve import Tls

__all__ = ["Certs", "make_certs"]


@dataclass(frozen=True)
class Certs:
    tls: Tls  # the server's chain and key
    ca_file: str  # the authority that signed it

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


def make_certs(directory: Path) -> Certs:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, ca_file = directory / "cert.pem", directory / "key.pem", directory / "ca.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    ca.cert_pem.write_to_path(str(ca_file))
    return Certs(Tls(str(cert), str(key)), str(ca_file))
