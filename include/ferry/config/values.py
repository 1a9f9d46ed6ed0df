"""A configuration value together with where it came from.

MM2 moves values between keys (`A.sasl.jaas.config` becomes the source consumer's
`sasl.jaas.config`); Ferry keeps the key the user wrote with each value so that every
problem names the line to fix, and keeps whether the value is secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ferry.secrets import MASK, Secret, is_secret_key

# Keys whose values are never sensitive, even when they come from a config provider
# (a bootstrap list in ${env:...} should still show in `ferry validate`).
_PUBLIC = re.compile(
    r"(^|\.)(bootstrap\.servers|security\.protocol|sasl\.mechanism|ssl\.[a-z]+\.location|"
    r"ssl\.[a-z]+\.type|ssl\.endpoint\.identification\.algorithm|client\.id|group\.id)$"
)


@dataclass(frozen=True)
class Value:
    """`text` is resolved (providers applied); `origin` is the key as written."""

    text: str
    origin: str
    secret: bool = False

    @classmethod
    def of(cls, origin: str, text: str, from_provider: bool = False) -> Value:
        """A value is secret if its key says so, or if a provider supplied it (unless the
        key is one that never holds a secret)."""
        secret = is_secret_key(origin) or (from_provider and not _PUBLIC.search(origin))
        return cls(text, origin, secret)

    def shown(self) -> str:
        return MASK if self.secret else self.text

    def setting(self) -> str | Secret:
        return Secret(self.text) if self.secret else self.text


Props = dict[str, Value]
