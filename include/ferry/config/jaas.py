"""Parse a Java `sasl.jaas.config` string into its login module and options.

`org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`
Values may be quoted (with `\\"` escapes) or bare. Only one login module entry is allowed,
as in Kafka's client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r'\s*(?:(?P<key>[A-Za-z0-9_.$-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"'
    r"|'(?P<single>(?:[^'\\]|\\.)*)'|(?P<bare>[^\s;\"']+))"
    r"|(?P<end>;))"
)
# Kafka parses JAAS with java.io.StreamTokenizer: both quote characters, and its escapes.
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_HEAD = re.compile(
    r"\s*(?P<module>[A-Za-z0-9_.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\b",
    re.IGNORECASE,
)

PLAIN = "PlainLoginModule"
SCRAM = "ScramLoginModule"
OAUTHBEARER = "OAuthBearerLoginModule"
KERBEROS = "Krb5LoginModule"


class JaasError(ValueError):
    """The JAAS string cannot be parsed; the message says where."""


@dataclass(frozen=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str]

    @property
    def kind(self) -> str:
        """The module's simple class name (shaded packages accepted)."""
        return self.module.rsplit(".", 1)[-1]


def parse_jaas(text: str) -> JaasEntry:
    head = _HEAD.match(text)
    if head is None:
        raise JaasError("expected '<LoginModule class> required key=\"value\" ...;'")
    options: dict[str, str] = {}
    pos = head.end()
    ended = False
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        if ended:
            raise JaasError("more than one login module; Kafka clients take exactly one")
        match = _TOKEN.match(text, pos)
        if match is None:
            raise JaasError(f"cannot parse near character {pos + 1}")
        if match.group("end"):
            ended = True
        else:
            quoted = match.group("quoted")
            if quoted is None:
                quoted = match.group("single")
            value = (re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), quoted)
                     if quoted is not None else match.group("bare"))
            options[match.group("key")] = value
        pos = match.end()
    if not ended:
        raise JaasError("missing the closing ';'")
    return JaasEntry(head.group("module"), head.group("flag").lower(), options)


def masked(entry: JaasEntry) -> str:
    """The entry as text with every secret option masked (usernames stay visible)."""
    shown = " ".join(
        f'{k}="{v}"' if k in ("username", "clientId", "scope") else f"{k}=******"
        for k, v in entry.options.items()
    )
    return f"{entry.module} {entry.flag} {shown};"
