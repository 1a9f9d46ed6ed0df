"""The secure profile's principals: their passwords, how the broker learns them, and the
client settings that log in as them.

The principals are `admin` (the super user), `ferry` (the mirror), `alice` (a reader) and
`mallory` (no rights). Each is a PLAIN user (declared in the broker's JAAS config,
`plain_jaas`) and a SCRAM-SHA-512 user (added when the storage is formatted,
`scram_format_args`). Their random passwords are generated once per clusters directory into
`<dir>/credentials.properties` (mode 0600, `<user>.password=...`) and read back by
`credentials`; a file without every user's password is a `TerminalError` (the SCRAM users
of the formatted storage can no longer be matched).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ferry.config.properties import parse_properties
from ferry.errors import TerminalError
from ferry.local.layout import TLS_DIR, ClusterState, default_dir
from ferry.local.tls import write_atomic

# The secure profile's principals: the super user, the mirror, a reader, a user with no rights.
SUPER_USER = "admin"
USERS = (SUPER_USER, "ferry", "alice", "mallory")
MECHANISMS = ("PLAIN", "SCRAM-SHA-512")
CREDENTIALS_FILE = "credentials.properties"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def credentials(root: Path | None = None) -> dict[str, str]:
    """user -> password of the secure clusters' principals in `root`."""
    root = (root or default_dir()).resolve()
    path = root / CREDENTIALS_FILE
    try:
        raw = parse_properties(path.read_text())
    except OSError:
        raise TerminalError(f"no {path}: start the secure clusters first "
                            "(ferry local up --secure)") from None
    missing = [user for user in USERS if not raw.get(f"{user}.password")]
    if missing:
        raise TerminalError(f"{path} has no password for {', '.join(missing)}; wipe the "
                            "local clusters (ferry local down --wipe) and start them again")
    return {user: raw[f"{user}.password"] for user in USERS}


def ensure_credentials(root: Path) -> tuple[dict[str, str], bool]:
    """The principals' passwords of `root`, generated (True) when there were none."""
    if (root / CREDENTIALS_FILE).exists():
        return credentials(root), False
    passwords = {user: secrets.token_urlsafe(18) for user in USERS}
    text = "".join(f"{user}.password={pw}\n" for user, pw in passwords.items())
    write_atomic(root / CREDENTIALS_FILE,
                 ("# Passwords of the local secure clusters' principals (generated).\n"
                  + text).encode(), 0o600)
    return passwords, True


def plain_jaas(passwords: Mapping[str, str]) -> str:
    """The broker's PLAIN login module config: its own identity (the super user, for the
    inter-broker listener) and every principal of `USERS` with its password."""
    return " ".join([
        "org.apache.kafka.common.security.plain.PlainLoginModule required",
        # The broker's own identity on the inter-broker listener (SASL_PLAINTEXT + PLAIN).
        f'username="{SUPER_USER}" password="{passwords[SUPER_USER]}"',
        *(f'user_{user}="{passwords[user]}"' for user in USERS),
    ]) + ";"


def scram_format_args(passwords: Mapping[str, str]) -> list[str]:
    """StorageTool `format` arguments adding each principal as a SCRAM-SHA-512 user."""
    return [arg for user, password in passwords.items()
            for arg in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]")]


def _sasl_settings(bootstrap: str, user: str, password: str, mechanism: str,
                   ca: Path | None) -> dict[str, str]:
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism {mechanism!r}: the local clusters offer {MECHANISMS}")
    settings = {"bootstrap.servers": bootstrap,
                "security.protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if ca:
        settings["ssl.ca.location"] = str(ca)
    return settings


def client_settings(state: ClusterState, user: str = SUPER_USER, mechanism: str = "PLAIN",
                    tls: bool = True) -> dict[str, str]:
    """librdkafka settings (with `bootstrap.servers`) for `user` on a secure cluster: over
    SASL_SSL trusting the local CA, or over SASL_PLAINTEXT when `tls` is False."""
    if not state.secure or state.plaintext_bootstrap is None:
        raise ValueError(f"cluster {state.alias} is not a secure cluster")
    password = credentials(state.root)[user]
    if tls:
        return _sasl_settings(state.bootstrap, user, password, mechanism,
                              state.root / TLS_DIR / "ca.pem")
    return _sasl_settings(state.plaintext_bootstrap, user, password, mechanism, None)


def admin_client_settings(state: ClusterState) -> dict[str, str]:
    """librdkafka settings of the super user (with `bootstrap.servers`): SASL_SSL + PLAIN as
    `admin` for a secure cluster, just `bootstrap.servers` for a PLAINTEXT one."""
    if not state.secure:
        return {"bootstrap.servers": state.bootstrap}
    return client_settings(state, SUPER_USER, "PLAIN", tls=True)


@dataclass(frozen=True)
class SecureClusters:
    """Where the secure clusters of one directory listen, and how to reach them."""

    root: Path
    bootstrap: dict[str, str]  # alias -> SASL_SSL host:port
    plaintext_bootstrap: dict[str, str]  # alias -> SASL_PLAINTEXT host:port
    ca: Path
    passwords: dict[str, str]  # user -> password

    @classmethod
    def of(cls, root: Path, states: Iterable[ClusterState]) -> SecureClusters:
        """The secure clusters `up(..., root, secure=True)` returned."""
        root = root.resolve()
        states = list(states)
        if not all(s.secure and s.plaintext_bootstrap for s in states):
            raise ValueError("SecureClusters needs clusters started with secure=True")
        return cls(root=root, bootstrap={s.alias: s.bootstrap for s in states},
                   plaintext_bootstrap={s.alias: str(s.plaintext_bootstrap) for s in states},
                   ca=root / TLS_DIR / "ca.pem", passwords=credentials(root))

    def client(self, alias: str, user: str = SUPER_USER, mechanism: str = "PLAIN",
               tls: bool = True) -> dict[str, str]:
        """librdkafka settings for `user` on cluster `alias` (SASL_SSL, or SASL_PLAINTEXT)."""
        bootstrap = self.bootstrap[alias] if tls else self.plaintext_bootstrap[alias]
        return _sasl_settings(bootstrap, user, self.passwords[user], mechanism,
                              self.ca if tls else None)
