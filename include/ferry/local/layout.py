"""Where the local clusters live on disk, and what `cluster.json` records about each.

A clusters directory (`default_dir()` unless given) holds one directory per alias,
`<dir>/<alias>/`, with `cluster.json` (a `ClusterState`), and next to them
`bootstrap.properties` (`<alias>.bootstrap.servers=...` for every cluster) and, for the
secure profile, `tls/`. A missing or unreadable `cluster.json` means "no cluster there":
`load_state` returns None and `states_in` skips it.

A cluster of several KRaft nodes (`ferry local up --brokers 3`) keeps node 1 where a
single-node cluster lives (`<dir>/<alias>/`) and node k in `<dir>/<alias>/node-<k>/`; its
`cluster.json` records node 1 in its own fields and the others in `peers`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

STATE_FILE = "cluster.json"
BOOTSTRAP_FILE = "bootstrap.properties"
TLS_DIR = "tls"


@dataclass(frozen=True)
class NodeState:
    """A node of a multi-node cluster other than node 1 (whose ports and pid are the
    cluster's own fields)."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None = None


@dataclass(frozen=True)
class Node:
    """Any node of a cluster, node 1 included: where it lives, its ports and pid."""

    node_id: int
    dir: Path
    port: int
    controller_port: int
    pid: int | None


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
    peers: tuple[NodeState, ...] = ()  # nodes 2..n of a multi-node cluster
    proxied_port: int | None = None
    """A cluster behind a proxy (`up(..., behind_proxy=True)`): the broker's second client
    listener, the proxy's upstream. It advertises `proxy_port`, so a client that bootstraps
    through the proxy keeps every later connection going through it too."""
    proxy_port: int | None = None
    """Where the proxy in front of `proxied_port` is to listen (reserved, not bound)."""

    @property
    def brokers(self) -> int:
        """How many KRaft nodes (each a broker and a controller) the cluster has."""
        return 1 + len(self.peers)

    @property
    def nodes(self) -> list[Node]:
        """Every node, node 1 first."""
        first = Node(1, Path(self.dir), self.port, self.controller_port, self.pid)
        return [first, *(Node(p.node_id, node_dir(Path(self.dir), p.node_id), p.port,
                              p.controller_port, p.pid) for p in self.peers)]

    def node(self, node_id: int) -> Node:
        """The node `node_id` (1..brokers); KeyError for another."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"cluster {self.alias} has no node {node_id}")

    def with_pid(self, node_id: int, pid: int | None) -> ClusterState:
        """This state with node `node_id`'s pid replaced."""
        if node_id == 1:
            return replace(self, pid=pid)
        return replace(self, peers=tuple(replace(p, pid=pid) if p.node_id == node_id else p
                                         for p in self.peers))

    @property
    def bootstrap(self) -> str:
        """The client listener of every node: PLAINTEXT, or SASL_SSL for a secure cluster."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def proxy_bootstrap(self) -> str | None:
        """Bootstrap servers through the proxy (None: not behind one)."""
        return None if self.proxy_port is None else f"127.0.0.1:{self.proxy_port}"

    @property
    def proxy_upstream(self) -> str | None:
        """What the proxy forwards to: the broker's listener for proxied clients."""
        return None if self.proxied_port is None else f"127.0.0.1:{self.proxied_port}"

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


def node_dir(cluster_dir: Path, node_id: int) -> Path:
    """Where node `node_id` of the cluster in `cluster_dir` keeps its files."""
    return cluster_dir if node_id == 1 else cluster_dir / f"node-{node_id}"


def default_dir() -> Path:
    """`$FERRY_HOME/local`, or `~/.ferry/local` when FERRY_HOME is unset or empty."""
    return Path(os.environ.get("FERRY_HOME") or Path.home() / ".ferry") / "local"


def load_state(cluster_dir: Path) -> ClusterState | None:
    """The state recorded in `cluster_dir`; None when there is none or it is unreadable."""
    try:
        fields = json.loads((cluster_dir / STATE_FILE).read_text())
        peers = tuple(NodeState(**p) for p in fields.pop("peers", ()))
        return ClusterState(**fields, peers=peers)
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
