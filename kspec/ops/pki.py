"""Certificates for a local secured cluster and for tests, made fresh with `cryptography`: a CA,
a server certificate for localhost and 127.0.0.1 (librdkafka and Java clients check the host by
default), and client certificates for mTLS. Keys are written to the given directory only (mode
0600); nothing of this kind is ever committed."""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALIDITY = datetime.timedelta(days=2)


@dataclass
class Pki:
    directory: str
    ca_path: str  # the CA certificate (ssl.truststore.location, ssl.ca.location)
    server_pem_path: str  # key + chain in one file (ssl.keystore.location)
    server_key_pem: str  # KIP-651 inline forms
    server_chain_pem: str
    _ca: tuple = ()  # the CA's certificate and key, in memory only, to issue client certificates

    def client(self, common_name: str) -> tuple[str, str]:
        """(certificate path, key path) of a client certificate CN=<common_name>,O=kspec."""
        return _issue(self, common_name, server=False)


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_pki(directory: str, ip_addresses: tuple[str, ...] = ()) -> Pki:
    """ip_addresses: more SubjectAltNames for the server certificate (e.g. nodes' namespace IPs)."""
    os.makedirs(directory, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kspec test CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - VALIDITY)
               .not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .sign(ca_key, hashes.SHA256()))
    ca_path = os.path.join(directory, "ca.pem")
    with open(ca_path, "wb") as f:
        f.write(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki = Pki(directory, ca_path, "", "", "", (ca_cert, ca_key))
    cert_path, key_path = _issue(pki, "localhost", server=True, ip_addresses=ip_addresses)
    with open(key_path) as k, open(cert_path) as c:
        pki.server_key_pem, pki.server_chain_pem = k.read(), c.read()
    pki.server_pem_path = os.path.join(directory, "server.pem")
    with open(os.open(pki.server_pem_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(pki.server_key_pem + pki.server_chain_pem)
    return pki


def _issue(pki: Pki, common_name: str, server: bool, ip_addresses: tuple[str, ...] = ()) -> tuple[str, str]:
    ca_cert, ca_key = pki._ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kspec"),
                                        x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - VALIDITY)
               .not_valid_after(now + VALIDITY))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost")] + [x509.IPAddress(ipaddress.ip_address(a))
                                          for a in dict.fromkeys(("127.0.0.1", *ip_addresses))]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path = os.path.join(pki.directory, f"{common_name}.crt")
    key_path = os.path.join(pki.directory, f"{common_name}.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
                if server else cert.public_bytes(serialization.Encoding.PEM))
    with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(_pem_key(key))
    return cert_path, key_path
