"""Secrets never print: Secret masks itself, the redactor scrubs log lines."""

from __future__ import annotations

import logging

import pytest

from ferry.secrets import MASK, REDACTOR, RedactingFilter, Secret, is_secret_key


def test_secret_masks_str_and_repr() -> None:
    secret = Secret("p4ssw0rd-xyz")
    assert str(secret) == MASK and "p4ssw0rd" not in repr(secret)
    assert f"{secret}" == MASK
    assert secret.reveal() == "p4ssw0rd-xyz"


def test_redactor_masks_known_secrets_in_log_records(caplog: pytest.LogCaptureFixture) -> None:
    Secret("leaky-value-123")
    logger = logging.getLogger("test.redaction")
    logger.addFilter(RedactingFilter())
    with caplog.at_level(logging.INFO):
        logger.info("connecting with %s", "leaky-value-123")
    assert "leaky-value-123" not in caplog.text
    assert MASK in caplog.text
    assert REDACTOR.redact("x leaky-value-123 y") == f"x {MASK} y"


@pytest.mark.parametrize(
    ("key", "secret"),
    [("sasl.jaas.config", True), ("ssl.truststore.password", True), ("ssl.key.password", True),
     ("ssl.keystore.key", True), ("sasl.password", True), ("sasl.oauthbearer.client.secret", True),
     ("bootstrap.servers", False), ("ssl.truststore.location", False), ("topics", False)],
)
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret
