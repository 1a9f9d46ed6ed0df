"""Secrets that never print.

A `Secret` wraps a sensitive string: `str()` and `repr()` show a mask, only `reveal()`
gives the value, and only where a client library needs it. Every revealed value is also
registered with the process-wide redactor, which the logging set-up uses to scrub
messages, so a secret that slips into a log line by another path is still masked (G8).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Final

MASK: Final = "******"

# Java property names whose values are secret, and librdkafka's.
_SECRET_KEY = re.compile(
    r"(password|secret|jaas\.config|\.key$|keystore\.key|credentials|token|"
    r"basic\.auth\.user\.info|connection\.?string|sasl\.oauthbearer\.config)",
    re.IGNORECASE,
)


def is_secret_key(key: str) -> bool:
    """True when a config key (Java or librdkafka) holds a secret value."""
    return bool(_SECRET_KEY.search(key))


class Secret:
    """A sensitive string that masks itself everywhere but `reveal()`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        REDACTOR.add(value)

    def reveal(self) -> str:
        return self._value

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))


class Redactor:
    """Remembers secret values and masks them in any text."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        # Very short values would mask innocent text ("a", "1"); they are still Secrets.
        if len(value) >= 4:
            with self._lock:
                self._values.add(value)

    def values(self) -> list[str]:
        """Every secret value known so far (to hand to another masker, e.g. Airflow's)."""
        with self._lock:
            return sorted(self._values)

    def redact(self, text: str) -> str:
        with self._lock:
            values = sorted(self._values, key=len, reverse=True)
        for value in values:
            if value in text:
                text = text.replace(value, MASK)
        return text


REDACTOR: Final = Redactor()


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record and masks every known secret in it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = REDACTOR.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def reveal(value: str | Secret) -> str:
    """The plain value of a setting that may or may not be secret."""
    return value.reveal() if isinstance(value, Secret) else value


def shown(value: str | Secret) -> str:
    """The printable form of a setting: secrets masked."""
    return MASK if isinstance(value, Secret) else value
