"""The text of a local cluster node's `server.properties`: a KRaft broker+controller on
loopback, alone or one of several (`ClusterState.brokers`). With three or more nodes every
internal and default topic gets replication factor 3 and `min.insync.replicas` 2, as
production clusters run; with fewer, as many replicas as there are nodes and one in sync.

`server_properties` is a pure function of the cluster's state (ports, directory, profile),
its principals' passwords and TLS files (secure profile only) and extra settings; it writes
nothing. A PLAINTEXT cluster has a PLAINTEXT client listener; a secure one has SASL_SSL
(`ClusterState.port`) and SASL_PLAINTEXT (`sasl_plaintext_port`, also the inter-broker
listener), both offering PLAIN and SCRAM-SHA-512, and `StandardAuthorizer` with
`allow.everyone.if.no.acl.found=false`. The controller listener is PLAINTEXT in both. A
PLAINTEXT cluster behind a proxy has a second client listener, PROXIED
(`proxied_port`), advertising the proxy's address (`proxy_port`): clients that bootstrap
through the proxy stay behind it, while the PLAINTEXT listener is reached directly.
"""

from __future__ import annotations

from collections.abc import Mapping

from ferry.local.credentials import MECHANISMS, SCRAM_JAAS, SUPER_USER, plain_jaas
from ferry.local.layout import ClusterState
from ferry.local.tls import TlsFiles

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

FAST_FAILURE_DETECTION = {"broker.heartbeat.interval.ms": "500",
                          "broker.session.timeout.ms": "3000"}
"""`extra` settings that let the controller fence a silent node after 3 s instead of 9 s,
so the steps of a rolling restart of local clusters take seconds (tests, benchmarks)."""


def server_properties(state: ClusterState, passwords: Mapping[str, str] | None = None,
                      tls: TlsFiles | None = None,
                      extra: Mapping[str, str] | None = None, node_id: int = 1) -> str:
    """Node `node_id`'s combined broker+controller config on loopback: PLAINTEXT, or for a
    secure (single-node) cluster SASL_SSL + SASL_PLAINTEXT with ACLs (then `passwords` and
    `tls` are needed). `extra` broker settings go last (they win): tests compress time
    with them, e.g. `offsets.retention.minutes=1`."""
    node = state.node(node_id)
    data = node.dir / "data"
    replicas, in_sync = min(state.brokers, 3), 2 if state.brokers >= 3 else 1
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in state.nodes)
    if state.secure:
        if passwords is None or tls is None:
            raise ValueError("a secure cluster's properties need its passwords and TLS files")
        listeners = _secure_listeners(state, passwords, tls)
    elif state.proxied_port is not None and state.proxy_port is not None:
        listeners = [
            f"listeners=PLAINTEXT://127.0.0.1:{node.port},"
            f"PROXIED://127.0.0.1:{state.proxied_port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port},"
            f"PROXIED://127.0.0.1:{state.proxy_port}",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "PROXIED:PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
        ]
    else:
        listeners = [
            f"listeners=PLAINTEXT://127.0.0.1:{node.port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port}",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
        ]
    return "\n".join([
        "process.roles=broker,controller",
        f"node.id={node_id}",
        f"controller.quorum.voters={voters}",
        *listeners,
        f"log.dirs={data}",
        "num.partitions=1",
        "auto.create.topics.enable=false",
        f"default.replication.factor={replicas}",
        f"min.insync.replicas={in_sync}",
        f"offsets.topic.replication.factor={replicas}",
        "offsets.topic.num.partitions=10",
        f"transaction.state.log.replication.factor={replicas}",
        f"transaction.state.log.min.isr={in_sync}",
        "transaction.state.log.num.partitions=10",
        f"share.coordinator.state.topic.replication.factor={replicas}",
        f"share.coordinator.state.topic.min.isr={in_sync}",
        "group.initial.rebalance.delay.ms=0",
        # Development clusters: let the log cleaner look for work every second (tests of
        # compacted topics would otherwise wait 15 s per pass).
        "log.cleaner.backoff.ms=1000",
        *(f"{key}={value}" for key, value in (extra or {}).items()),
        "",
    ])


def _secure_listeners(state: ClusterState, passwords: Mapping[str, str],
                      tls: TlsFiles) -> list[str]:
    jaas = plain_jaas(passwords)
    lines = [
        f"listeners=SASL_SSL://127.0.0.1:{state.port},"
        f"SASL_PLAINTEXT://127.0.0.1:{state.sasl_plaintext_port},"
        f"CONTROLLER://127.0.0.1:{state.controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{state.port},"
        f"SASL_PLAINTEXT://127.0.0.1:{state.sasl_plaintext_port}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        f"sasl.enabled.mechanisms={','.join(MECHANISMS)}",
    ]
    for listener in ("sasl_ssl", "sasl_plaintext"):
        lines += [
            f"listener.name.{listener}.sasl.enabled.mechanisms={','.join(MECHANISMS)}",
            f"listener.name.{listener}.plain.sasl.jaas.config={jaas}",
            f"listener.name.{listener}.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}",
        ]
    lines += [
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tls.keystore}",
        *([f"ssl.key.password={tls.key_password}"] if tls.key_password else []),
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls.ca}",
        "ssl.client.auth=none",
        f"authorizer.class.name={AUTHORIZER}",
        # ANONYMOUS: the principal of the PLAINTEXT controller listener, which the broker
        # half uses to talk to its controller.
        f"super.users=User:{SUPER_USER};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found=false",
    ]
    return lines
