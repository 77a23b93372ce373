"""Certificates for the TLS tests, made at test time with `cryptography`.

`make_pki(dir)` writes a self-signed CA, a server certificate for 127.0.0.1 /
localhost signed by it, a broker certificate (the same names, good both as
server and as client certificate: what a broker presents to another), a
client certificate, an expired client certificate,
and a second, unrelated CA with its own server certificate (an "untrusted"
broker certificate). Every file is PEM; keys are unencrypted PKCS#8.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Pair:
    cert: Path
    key: Path
    serial: int


@dataclass
class Pki:
    ca: Pair
    server: Pair
    broker: Pair
    client: Pair
    expired_client: Pair
    rogue_ca: Pair
    rogue_server: Pair


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, cert, key) -> Pair:
    path.parent.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = path.with_suffix(".crt"), path.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return Pair(cert_path, key_path, cert.serial_number)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(path: Path, cn: str) -> tuple[Pair, object, object]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return _write(path, cert, key), cert, key


def make_leaf(path: Path, cn: str, ca_cert, ca_key, server: bool, expired: bool = False, client_too: bool = False) -> Pair:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    if expired:
        start, end = now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)
    else:
        start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_too else [])
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return _write(path, builder.sign(ca_key, hashes.SHA256()), key)


def make_pki(directory: Path) -> Pki:
    ca, ca_cert, ca_key = make_ca(directory / "ca", "floe test CA")
    rogue_ca, rogue_cert, rogue_key = make_ca(directory / "rogue-ca", "someone else's CA")
    return Pki(
        ca=ca,
        server=make_leaf(directory / "server", "127.0.0.1", ca_cert, ca_key, server=True),
        broker=make_leaf(directory / "broker", "broker", ca_cert, ca_key, server=True, client_too=True),
        client=make_leaf(directory / "client", "alice", ca_cert, ca_key, server=False),
        expired_client=make_leaf(directory / "expired-client", "mallory", ca_cert, ca_key, server=False, expired=True),
        rogue_ca=rogue_ca,
        rogue_server=make_leaf(directory / "rogue-server", "127.0.0.1", rogue_cert, rogue_key, server=True),
    )
