"""Where the local clusters live on disk, and what `cluster.json` records about each.

A clusters directory (`default_dir()` unless given) holds one directory per alias,
`<dir>/<alias>/`, with `cluster.json` (a `ClusterState`), and next to them
`bootstrap.properties` (`<alias>.bootstrap.servers=...` for every cluster) and, for the
secure profile, `tls/`. A missing or unreadable `cluster.json` means "no cluster there":
`load_state` returns None and `states_in` skips it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

STATE_FILE = "cluster.json"
BOOTSTRAP_FILE = "bootstrap.properties"
TLS_DIR = "tls"


@dataclass(frozen=True)
class ClusterState:
    """What `cluster.json` records about one local cluster."""

    alias: str
    dir: str
    port: int
    controller_port: int
    pid: int | None = None
    secure: bool = False
    sasl_plaintext_port: int | None = None  # secure clusters only

    @property
    def bootstrap(self) -> str:
        """The client listener: PLAINTEXT, or SASL_SSL for a secure cluster."""
        return f"127.0.0.1:{self.port}"

    @property
    def plaintext_bootstrap(self) -> str | None:
        """A secure cluster's SASL_PLAINTEXT listener (None for a PLAINTEXT cluster)."""
        if self.sasl_plaintext_port is None:
            return None
        return f"127.0.0.1:{self.sasl_plaintext_port}"

    @property
    def root(self) -> Path:
        """The directory `up` was given: it holds this cluster's directory."""
        return Path(self.dir).parent


def default_dir() -> Path:
    """`$FERRY_HOME/local`, or `~/.ferry/local` when FERRY_HOME is unset or empty."""
    return Path(os.environ.get("FERRY_HOME") or Path.home() / ".ferry") / "local"


def load_state(cluster_dir: Path) -> ClusterState | None:
    """The state recorded in `cluster_dir`; None when there is none or it is unreadable."""
    try:
        return ClusterState(**json.loads((cluster_dir / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def save_state(state: ClusterState) -> None:
    """Record `state` in its directory's `cluster.json` (replaced whole, never half-written)."""
    path = Path(state.dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    tmp.replace(path)


def states_in(root: Path | None = None) -> list[ClusterState]:
    """The recorded clusters of `root` (default: `default_dir()`), by directory name; empty
    when `root` does not exist."""
    root = (root or default_dir()).resolve()
    if not root.is_dir():
        return []
    found = (load_state(d) for d in sorted(root.iterdir()) if d.is_dir())
    return [s for s in found if s is not None]


def write_bootstrap(root: Path) -> None:
    """(Re)write `<root>/bootstrap.properties` from every cluster recorded in `root`."""
    lines = [f"{s.alias}.bootstrap.servers={s.bootstrap}" for s in states_in(root)]
    (root / BOOTSTRAP_FILE).write_text("\n".join(lines) + "\n")
