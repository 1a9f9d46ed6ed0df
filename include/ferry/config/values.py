"""A configuration value together with where it came from.

MM2 moves values between keys (`A.sasl.jaas.config` becomes the source consumer's
`sasl.jaas.config`); Ferry keeps the key the user wrote with each value so that every
problem names the line to fix, and keeps whether the value is secret.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.secrets import MASK, Secret, is_secret_key


@dataclass(frozen=True)
class Value:
    """`text` is resolved (providers applied); `origin` is the key as written."""

    text: str
    origin: str
    secret: bool = False

    @classmethod
    def of(cls, origin: str, text: str, from_provider: bool = False) -> Value:
        return cls(text, origin, from_provider or is_secret_key(origin))

    def shown(self) -> str:
        return MASK if self.secret else self.text

    def setting(self) -> str | Secret:
        return Secret(self.text) if self.secret else self.text


Props = dict[str, Value]
