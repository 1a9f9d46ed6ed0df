"""Read TLS stores: tell PEM, PKCS12 and JKS apart, and turn a PKCS12 truststore into PEM.

librdkafka reads CA certificates only as PEM, and a client keystore as PEM or PKCS12;
Java's default store format is JKS. Sniffing the file beats trusting `*.type`, which Java
users often leave at its default.
"""

from __future__ import annotations

from pathlib import Path

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"


class StoreError(ValueError):
    """The store cannot be read; the message says why."""


def sniff_store(path: Path) -> str:
    """PEM, PKCS12, JKS or JCEKS, from the file's first bytes."""
    data = path.read_bytes()
    head = data[:64]
    if head.startswith(_JKS_MAGIC):
        return "JKS"
    if head.startswith(_JCEKS_MAGIC):
        return "JCEKS"
    if b"-----BEGIN" in data:  # openssl may put "Bag Attributes" text before the block
        return "PEM"
    if head[:1] == b"\x30":
        return "PKCS12"
    raise StoreError(f"{path} is neither PEM, PKCS12 nor JKS")


def read_truststore_pem(path: Path, password: str | None) -> str:
    """The certificates of a PKCS12 truststore, as concatenated PEM."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    try:
        _key, cert, extra = pkcs12.load_key_and_certificates(
            path.read_bytes(), password.encode() if password else None
        )
    except ValueError as exc:
        raise StoreError(f"cannot open PKCS12 store {path}: {exc}") from None
    certs = ([cert] if cert is not None else []) + list(extra)
    if not certs:
        raise StoreError(f"PKCS12 store {path} holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)
