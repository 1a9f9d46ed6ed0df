"""The local clusters' private CA and server certificate (no brokers)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from ferry.local.tls import VALIDITY, TlsFiles, ensure_tls


def _chain(files: TlsFiles) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(files.keystore.read_bytes())


def _ca(files: TlsFiles) -> x509.Certificate:
    return x509.load_pem_x509_certificate(files.ca.read_bytes())


def test_writes_a_ca_and_a_keystore_of_key_server_cert_and_ca_cert(tmp_path: Path) -> None:
    files = ensure_tls(tmp_path / "tls")

    assert files == TlsFiles(tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "server.pem", None)
    keystore = files.keystore.read_text()
    # what Kafka's PEM keystore reads: an unencrypted PKCS#8 key, then the chain
    assert keystore.startswith("-----BEGIN PRIVATE KEY-----\n")
    assert keystore.count("-----BEGIN CERTIFICATE-----") == 2
    assert keystore.index("PRIVATE KEY") < keystore.index("CERTIFICATE")
    server, ca_copy = _chain(files)
    assert ca_copy == _ca(files)
    key = serialization.load_pem_private_key(files.keystore.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    assert key.public_key() == server.public_key()


def test_the_ca_signs_the_server_certificate(tmp_path: Path) -> None:
    files = ensure_tls(tmp_path)
    ca = _ca(files)
    server, _ = _chain(files)

    server.verify_directly_issued_by(ca)  # raises if not
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage


def test_the_server_certificate_names_localhost_and_127_0_0_1(tmp_path: Path) -> None:
    server, _ = _chain(ensure_tls(tmp_path))
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_certificates_are_valid_now_for_about_ten_days(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    files = ensure_tls(tmp_path, now=now)
    for cert in (_ca(files), _chain(files)[0]):
        assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
        # (certificates keep whole seconds)
        assert abs(cert.not_valid_after_utc - now - VALIDITY) < dt.timedelta(seconds=1)


def test_the_private_key_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    files = ensure_tls(tmp_path)
    assert stat.S_IMODE(files.keystore.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.ca.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.pem", "server.pem"]  # no temps


def test_files_present_and_valid_are_reused(tmp_path: Path) -> None:
    first = ensure_tls(tmp_path)
    ca_pem, keystore_pem = first.ca.read_bytes(), first.keystore.read_bytes()

    again = ensure_tls(tmp_path)

    assert again == first
    assert (again.ca.read_bytes(), again.keystore.read_bytes()) == (ca_pem, keystore_pem)


def test_files_about_to_expire_are_replaced_by_a_new_ca(tmp_path: Path) -> None:
    first = ensure_tls(tmp_path)
    old_ca = _ca(first)

    later = dt.datetime.now(dt.UTC) + VALIDITY - dt.timedelta(hours=1)
    renewed = ensure_tls(tmp_path, now=later)

    new_ca = _ca(renewed)
    assert new_ca != old_ca
    assert new_ca.not_valid_after_utc > later + dt.timedelta(days=5)
    _chain(renewed)[0].verify_directly_issued_by(new_ca)


def test_inconsistent_or_damaged_files_are_replaced(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    ensure_tls(a)
    other = ensure_tls(b)
    (a / "ca.pem").write_bytes(other.ca.read_bytes())  # a CA that did not sign a's server

    repaired = ensure_tls(a)
    _chain(repaired)[0].verify_directly_issued_by(_ca(repaired))
    assert _ca(repaired) != _ca(other)

    repaired.keystore.write_text("garbage")
    again = ensure_tls(a)
    _chain(again)[0].verify_directly_issued_by(_ca(again))


def test_a_missing_file_regenerates_both(tmp_path: Path) -> None:
    first = ensure_tls(tmp_path)
    old_ca = _ca(first)
    first.keystore.unlink()

    again = ensure_tls(tmp_path)

    assert _ca(again) != old_ca
    _chain(again)[0].verify_directly_issued_by(_ca(again))
