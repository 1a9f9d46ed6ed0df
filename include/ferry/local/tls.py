"""A private CA and a loopback server certificate for the local secure clusters.

`ensure_tls(dir)` leaves in `dir`:

- `ca.pem`: the CA certificate (what clients trust: `ssl.ca.location`, a PEM truststore);
- `server.pem`: the server's PKCS#8 private key, then its chain (server certificate, CA
  certificate): the file Kafka reads with `ssl.keystore.type=PEM` from
  `ssl.keystore.location`. The server certificate names `DNS:localhost` and
  `IP:127.0.0.1`, so clients verifying the host name accept `127.0.0.1:<port>`.

The key is not encrypted (the file is mode 0600), and Kafka needs no `ssl.key.password`:
Kafka 4.3.1 reads an unencrypted PKCS#8 key from a PEM keystore file (some older releases
refused one: "SSL PEM key store is specified, but key password is not specified"). An
encrypted key would not do on Java 17 anyway: `cryptography` encrypts PKCS#8 with PBES2,
and the broker then fails with "PBES2 SecretKeyFactory not available" (verified).

Files already there are kept while they are consistent and valid for at least another day;
otherwise all of them are generated again (a new CA: clients must re-read `ca.pem`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=10)
RENEW_BEFORE = dt.timedelta(days=1)
CA_FILE = "ca.pem"
KEYSTORE_FILE = "server.pem"
SERVER_NAMES = ("localhost",)
SERVER_IPS = ("127.0.0.1",)


@dataclass(frozen=True)
class TlsFiles:
    """Where the PEM files are, and the server key's password (None: unencrypted key, the
    only kind `ensure_tls` writes; `ssl.key.password` is then left out)."""

    ca: Path
    keystore: Path
    key_password: str | None = None


def ensure_tls(directory: Path, now: dt.datetime | None = None) -> TlsFiles:
    """The CA and server PEM files in `directory`: reused when still valid, else made anew."""
    directory.mkdir(parents=True, exist_ok=True)
    now = now or dt.datetime.now(dt.UTC)
    existing = _reusable(directory, now)
    if existing is not None:
        return existing
    return _generate(directory, now)


def _files(directory: Path) -> TlsFiles:
    return TlsFiles(directory / CA_FILE, directory / KEYSTORE_FILE)


def _reusable(directory: Path, now: dt.datetime) -> TlsFiles | None:
    """The files in `directory` if they form a valid CA + server chain for a while yet."""
    try:
        ca_pem = (directory / CA_FILE).read_bytes()
        keystore_pem = (directory / KEYSTORE_FILE).read_bytes()
    except OSError:
        return None
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        chain = x509.load_pem_x509_certificates(keystore_pem)
        key = serialization.load_pem_private_key(keystore_pem, None)
    except (ValueError, TypeError):  # unreadable, or an encrypted key
        return None
    if len(chain) != 2 or chain[1] != ca:
        return None
    server = chain[0]
    if server.public_key() != key.public_key():
        return None
    try:
        server.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return None
    if min(ca.not_valid_after_utc, server.not_valid_after_utc) < now + RENEW_BEFORE:
        return None
    if server.not_valid_before_utc > now:
        return None
    return _files(directory)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Ferry local clusters"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _generate(directory: Path, now: dt.datetime) -> TlsFiles:
    not_before = now - dt.timedelta(minutes=5)  # tolerate small clock differences
    not_after = now + VALIDITY

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"Ferry local CA {secrets.token_hex(4)}")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in SERVER_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_IPS]
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key_pem = server_key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    server_pem = server_cert.public_bytes(serialization.Encoding.PEM)

    # Each file is replaced atomically; the CA last, so that a new ca.pem always signs the
    # server.pem beside it.
    write_atomic(directory / KEYSTORE_FILE, key_pem + server_pem + ca_pem, 0o600)
    write_atomic(directory / CA_FILE, ca_pem, 0o644)
    return _files(directory)


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write `data` to `path` atomically, the file never readable beyond `mode`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)  # exactly `mode`, whatever the umask
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
