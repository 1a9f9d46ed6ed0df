"""Start, inspect and stop KRaft clusters on loopback, of one node or `brokers` nodes: the
public face of the local clusters (import this module; the others are its parts).

Each cluster lives in `<dir>/<alias>/`: `server.properties`, `data/`, `broker.log` and
`cluster.json` (alias, ports, pid); nodes 2..n of a multi-node cluster in `node-<k>/`
beside them. With three nodes every internal and default topic has replication factor 3
and `min.insync.replicas=2`; `bounce_node` (or `stop_node`, `start_node` and
`under_replicated`) makes a rolling restart, one node at a time. Stopping signals only a
pid recorded there, and only after checking that the process is the broker started from
that very directory (never a broad kill). `<dir>/bootstrap.properties` lists
`<alias>.bootstrap.servers=...` for every cluster, ready for a `${file:...}` reference in
an mm2.properties.

The secure profile (`up(..., secure=True)`) runs each broker with SASL + ACLs:

- `SASL_SSL` on the client port (`ClusterState.port`, what `bootstrap.properties` lists),
  `SASL_PLAINTEXT` on a second client port (`sasl_plaintext_port`, also the inter-broker
  listener), both offering PLAIN and SCRAM-SHA-512; the controller listener stays PLAINTEXT
  (its principal, `User:ANONYMOUS`, is therefore a super user, as KRaft needs);
- `StandardAuthorizer` with `allow.everyone.if.no.acl.found=false`: only `admin` (the super
  user) may do anything until ACLs say otherwise;
- TLS from a private CA in `<dir>/tls/` (`ca.pem` trusts every secure cluster of `<dir>`);
- the test principals `admin`, `ferry` (the mirror), `alice` (a reader) and `mallory` (no
  rights), each a PLAIN user (JAAS) and a SCRAM-SHA-512 user (added when the storage is
  formatted), with random passwords kept in `<dir>/credentials.properties` (mode 0600):
  `credentials(dir)` reads them, `client_settings` / `admin_client_settings` build
  librdkafka settings from them.

The parts: `layout` (the directory, `ClusterState`, `cluster.json`, `bootstrap.properties`),
`broker_config` (the `server.properties` text), `credentials` (the principals, their
passwords, JAAS and client settings, `SecureClusters`) and `process` (`up`, `status`,
`down`: the brokers' processes, pids and ports).
"""

from __future__ import annotations

from ferry.local.broker_config import AUTHORIZER, FAST_FAILURE_DETECTION, server_properties
from ferry.local.credentials import (
    CREDENTIALS_FILE,
    MECHANISMS,
    SUPER_USER,
    USERS,
    SecureClusters,
    admin_client_settings,
    client_settings,
    credentials,
)
from ferry.local.layout import TLS_DIR, ClusterState, Node, default_dir, states_in
from ferry.local.probe import under_replicated
from ferry.local.process import (
    DEFAULT_ALIASES,
    READY_TIMEOUT_S,
    all_running,
    bounce_node,
    down,
    is_our_broker,
    proxy_of,
    start_node,
    status,
    stop_node,
    up,
)

__all__ = [
    "AUTHORIZER",
    "CREDENTIALS_FILE",
    "DEFAULT_ALIASES",
    "FAST_FAILURE_DETECTION",
    "MECHANISMS",
    "READY_TIMEOUT_S",
    "SUPER_USER",
    "TLS_DIR",
    "USERS",
    "ClusterState",
    "Node",
    "SecureClusters",
    "admin_client_settings",
    "all_running",
    "bounce_node",
    "client_settings",
    "credentials",
    "default_dir",
    "down",
    "is_our_broker",
    "proxy_of",
    "server_properties",
    "start_node",
    "states_in",
    "status",
    "stop_node",
    "under_replicated",
    "up",
]
