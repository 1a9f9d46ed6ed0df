"""Translate Java Kafka client settings (as MM2 builds them) into librdkafka settings.

Ferry's clients are confluent-kafka (librdkafka). Each Java setting either has a librdkafka
meaning (translated, units and names adjusted), is harmless to drop (Java-only tuning,
serializers, metrics reporters: dropped with a debug log), or changes behaviour that Ferry
cannot reproduce (interceptors, custom callback handlers, JKS stores, Kerberos): an error
naming the key and the fix. Raw librdkafka properties can always be set per cluster with
`<alias>.ferry.librdkafka.<property>`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.config.findings import Findings
from ferry.config.jaas import KERBEROS, OAUTHBEARER, PLAIN, SCRAM, JaasError, parse_jaas
from ferry.config.stores import StoreError, read_truststore_pem, sniff_store
from ferry.config.values import Props
from ferry.logs import CLIENT_LOGGER, ClientLog
from ferry.secrets import MASK, Secret, shown

log = logging.getLogger(__name__)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OIDC_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
PASSTHROUGH_PREFIX = "ferry.librdkafka."

Setting = str | Secret
RdValue = str | int | float | bool


LIBRDKAFKA_LOG = logging.getLogger(CLIENT_LOGGER)
"""Where every Ferry client's librdkafka log lines go (`ClientConfig.confluent`)."""

RETRY_SECONDS = 120.0
"""The default of `ferry.kafka.retry.seconds`."""

CLIENT_DEFAULTS: dict[str, RdValue] = {"reconnect.backoff.ms": 10}
"""librdkafka settings of every Ferry client unless the config sets them. A new client's
first connection to a broker it learned from the bootstrap answer waits out
`reconnect.backoff.ms` first (librdkafka's 100 ms, with jitter): measured here, a new
client's first metadata or committed-offsets answer took 55-60 ms with it and 15-20 ms
with 10 ms, and a cycle makes a few new clients per writer. The backoff still doubles up
to `reconnect.backoff.max.ms` (10 s) for a broker that stays down."""


@dataclass(frozen=True)
class ClientConfig:
    """librdkafka settings for one client (role) of one cluster. Secrets stay wrapped.

    `retry_seconds` is the flow's `ferry.kafka.retry.seconds`: how long calls made with this
    client wait out transient broker states before they fail (`ferry.kafka.retry`).
    """

    cluster: str
    role: str
    settings: Mapping[str, Setting] = field(default_factory=dict)
    retry_seconds: float = RETRY_SECONDS

    def confluent(self, extra: Mapping[str, RdValue] | None = None,
                  **overrides: RdValue) -> dict[str, Any]:
        """The dict to hand to confluent-kafka, secrets revealed, `extra` and `overrides`
        applied on top. Never log it.

        librdkafka's own log lines go to the `ferry.kafka.librdkafka` logger, naming the
        cluster, at their own level up to WARNING, each distinct line at most once a minute
        (`ferry.logs.ClientLog`; instead of raw lines on stderr, which an Airflow task logs
        as errors). The client forwards them when it is polled: consuming and flushing do,
        an `Admin` does after each call."""
        conf: dict[str, Any] = dict(CLIENT_DEFAULTS)
        conf.update({k: v.reveal() if isinstance(v, Secret) else v
                     for k, v in self.settings.items()})
        conf.update(extra or {})
        conf.update(overrides)
        conf["logger"] = ClientLog(self.cluster, LIBRDKAFKA_LOG)
        return conf

    @property
    def principal(self) -> str:
        """The principal the brokers see (for error messages): `User:<sasl.username>`, the
        TLS certificate's, or `User:ANONYMOUS`."""
        username = self.settings.get("sasl.username")
        if username is not None:  # a user name is not a secret, even when read from one
            return f"User:{username.reveal() if isinstance(username, Secret) else username}"
        protocol = str(self.settings.get("security.protocol", "plaintext")).lower()
        if protocol == "ssl":
            return "the principal of the client's TLS certificate"
        return "User:ANONYMOUS"

    def shown(self) -> dict[str, str]:
        """The settings for display: every secret masked, PEM blocks summarised."""
        return {k: _pem_summary(shown(v)) for k, v in sorted(self.settings.items())}


def _pem_summary(text: str) -> str:
    if "-----BEGIN" not in text:
        return text
    count = text.count("-----BEGIN")
    return f"<PEM, {count} block{'s' if count > 1 else ''}>"


# Same meaning, maybe another name. (java name, librdkafka name, roles or None for all)
_RENAMED: dict[str, tuple[str, frozenset[str] | None]] = {
    "bootstrap.servers": ("bootstrap.servers", None),
    "client.id": ("client.id", None),
    "client.rack": ("client.rack", None),
    "client.dns.lookup": ("client.dns.lookup", None),
    "metadata.max.age.ms": ("metadata.max.age.ms", None),
    "connections.max.idle.ms": ("connections.max.idle.ms", None),
    "reconnect.backoff.ms": ("reconnect.backoff.ms", None),
    "reconnect.backoff.max.ms": ("reconnect.backoff.max.ms", None),
    "retry.backoff.ms": ("retry.backoff.ms", None),
    "retry.backoff.max.ms": ("retry.backoff.max.ms", None),
    "socket.connection.setup.timeout.ms": ("socket.connection.setup.timeout.ms", None),
    "send.buffer.bytes": ("socket.send.buffer.bytes", None),
    "receive.buffer.bytes": ("socket.receive.buffer.bytes", None),
    "sasl.kerberos.service.name": ("sasl.kerberos.service.name", None),
    # consumer
    "group.id": ("group.id", frozenset({"consumer"})),
    "group.instance.id": ("group.instance.id", frozenset({"consumer"})),
    "session.timeout.ms": ("session.timeout.ms", frozenset({"consumer"})),
    "heartbeat.interval.ms": ("heartbeat.interval.ms", frozenset({"consumer"})),
    "max.poll.interval.ms": ("max.poll.interval.ms", frozenset({"consumer"})),
    "isolation.level": ("isolation.level", frozenset({"consumer"})),
    "enable.auto.commit": ("enable.auto.commit", frozenset({"consumer"})),
    "auto.commit.interval.ms": ("auto.commit.interval.ms", frozenset({"consumer"})),
    "fetch.min.bytes": ("fetch.min.bytes", frozenset({"consumer"})),
    "fetch.max.bytes": ("fetch.max.bytes", frozenset({"consumer"})),
    "fetch.max.wait.ms": ("fetch.wait.max.ms", frozenset({"consumer"})),
    "max.partition.fetch.bytes": ("max.partition.fetch.bytes", frozenset({"consumer"})),
    "check.crcs": ("check.crcs", frozenset({"consumer"})),
    "allow.auto.create.topics": ("allow.auto.create.topics", frozenset({"consumer"})),
    # producer
    "acks": ("acks", frozenset({"producer"})),
    "linger.ms": ("linger.ms", frozenset({"producer"})),
    "batch.size": ("batch.size", frozenset({"producer"})),
    "compression.type": ("compression.type", frozenset({"producer"})),
    "compression.gzip.level": ("compression.level", frozenset({"producer"})),
    "compression.lz4.level": ("compression.level", frozenset({"producer"})),
    "compression.zstd.level": ("compression.level", frozenset({"producer"})),
    "enable.idempotence": ("enable.idempotence", frozenset({"producer"})),
    "max.in.flight.requests.per.connection": ("max.in.flight", frozenset({"producer"})),
    "max.request.size": ("message.max.bytes", frozenset({"producer"})),
    "delivery.timeout.ms": ("delivery.timeout.ms", frozenset({"producer"})),
    "request.timeout.ms": ("request.timeout.ms", frozenset({"producer"})),
    "retries": ("retries", frozenset({"producer"})),
    "transaction.timeout.ms": ("transaction.timeout.ms", frozenset({"producer"})),
}

# Java-only knobs that change nothing Ferry guarantees: dropped with a debug log.
_HARMLESS = {
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
    "partitioner.class", "partitioner.ignore.keys", "partitioner.adaptive.partitioning.enable",
    "partitioner.availability.timeout.ms", "max.block.ms", "metadata.max.idle.ms",
    "max.poll.records", "exclude.internal.topics", "partition.assignment.strategy",
    "group.protocol", "group.remote.assignor", "default.api.timeout.ms", "buffer.memory",
    "metric.reporters", "metrics.num.samples", "metrics.sample.window.ms",
    "metrics.recording.level", "auto.include.jmx.reporter", "enable.metrics.push",
    "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.provider",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.ms", "sasl.login.retry.backoff.max.ms",
    "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.clock.skew.seconds",
    "security.providers", "auto.offset.reset.by_duration",
}

# Settings Ferry must refuse: they change behaviour it cannot reproduce. key -> fix
_REFUSED = {
    "interceptor.classes": "Java interceptors cannot run in Ferry's clients; remove it",
    "ssl.engine.factory.class": "custom SSL engines are Java-only; configure TLS with "
                                "ssl.truststore.*/ssl.keystore.* (PEM or PKCS12)",
    "ssl.cipher.suites": "Java cipher-suite names differ from OpenSSL's; remove it or set "
                         "<alias>.ferry.librdkafka.ssl.cipher.suites with OpenSSL names",
    "sasl.client.callback.handler.class": "custom SASL callback handlers are Java-only; "
                                          "use PLAIN, SCRAM or OAUTHBEARER (OIDC)",
    "sasl.login.class": "custom SASL login classes are Java-only; use PLAIN, SCRAM or "
                        "OAUTHBEARER (OIDC)",
    "transactional.id": "Ferry assigns transactional ids itself (one per flow and lane); "
                        "remove it",
    "sasl.kerberos.kinit.cmd": "Kerberos (GSSAPI) is not supported by Ferry's clients",
}

_SECURITY_HANDLED = {
    "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "sasl.login.callback.handler.class", "sasl.oauthbearer.token.endpoint.url",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.type",
    "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin",
    "auto.offset.reset",
}


@dataclass
class _Translation:
    cluster: str
    role: str
    java: Props
    findings: Findings
    out: dict[str, Setting] = field(default_factory=dict)

    def problem(self, key: str, message: str, fix: str = "", shown_value: bool = True) -> None:
        value = self.java.get(key)
        origin = value.origin if value else f"{self.cluster}.{key}"
        text = value.shown() if (value and shown_value) else (MASK if value else None)
        self.findings.problem(origin, message, fix, text)

    def text(self, key: str, default: str = "") -> str:
        value = self.java.get(key)
        return value.text.strip() if value else default

    def fixkey(self, key: str) -> str:
        """The key a user should write to change `key` for this cluster."""
        return f"{self.cluster}.{key}"


def is_translated(key: str) -> bool:
    """Whether Ferry reads `key` as a Java client setting (MM2's name) and translates it."""
    return key in _RENAMED or key in _SECURITY_HANDLED or key in _HARMLESS


def refusal(key: str) -> str | None:
    """Why Ferry refuses client setting `key` (and the fix), or None."""
    return _REFUSED.get(key)


def translate_client(
    cluster: str, role: str, java: Props, passthrough: Props, findings: Findings
) -> ClientConfig:
    """librdkafka settings for `role` (consumer|producer|admin) from its Java settings."""
    t = _Translation(cluster, role, java, findings)
    for key, value in java.items():
        if key in _SECURITY_HANDLED:
            continue
        if key in _RENAMED:
            name, roles = _RENAMED[key]
            if roles is None or role in roles:
                t.out[name] = value.setting()
                if name.startswith("socket.") and name.endswith("buffer.bytes") \
                        and value.text.strip() == "-1":
                    t.out[name] = "0"  # Java's -1 (OS default) is librdkafka's 0
            else:
                log.debug("dropping %s for the %s of %s: not a %s setting",
                          value.origin, role, cluster, role)
        elif key in _HARMLESS:
            log.debug("dropping %s: no librdkafka meaning, harmless", value.origin)
        elif key in _REFUSED:
            t.problem(key, "is not supported", _REFUSED[key])
        else:
            t.problem(key, "has no librdkafka equivalent that Ferry knows",
                      f"remove it, or set the librdkafka property as "
                      f"{cluster}.{PASSTHROUGH_PREFIX}<property>")
    if role == "consumer":
        _offset_reset(t)
    _security(t)
    for key, value in passthrough.items():
        t.out[key[len(PASSTHROUGH_PREFIX):]] = value.setting()
    return ClientConfig(cluster, role, dict(t.out))


def _offset_reset(t: _Translation) -> None:
    reset = t.text("auto.offset.reset")
    if not reset:
        return
    mapped = {"earliest": "earliest", "latest": "latest", "none": "error"}.get(reset.lower())
    if mapped is None:
        t.problem("auto.offset.reset", "must be earliest, latest or none",
                  f"set {t.fixkey('consumer.auto.offset.reset')}=earliest")
    else:
        t.out["auto.offset.reset"] = mapped


def _security(t: _Translation) -> None:
    protocol = t.text("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        t.problem("security.protocol", f"must be one of {', '.join(PROTOCOLS)}",
                  f"set {t.fixkey('security.protocol')}=SASL_SSL (or another of them)")
        return
    t.out["security.protocol"] = protocol
    if protocol.startswith("SASL"):
        _sasl(t)
    if protocol.endswith("SSL"):
        _tls(t)


def _sasl(t: _Translation) -> None:
    mechanism = t.text("sasl.mechanism").upper()
    if not mechanism:
        t.problem("sasl.mechanism", "is not set, and Java's default GSSAPI (Kerberos) is not "
                  "supported", f"set {t.fixkey('sasl.mechanism')}=SCRAM-SHA-512 (or PLAIN)")
        return
    if mechanism == "GSSAPI":
        t.problem("sasl.mechanism", "GSSAPI (Kerberos) is not supported by Ferry's clients",
                  "use SCRAM-SHA-512, PLAIN or OAUTHBEARER")
        return
    if mechanism not in MECHANISMS:
        t.problem("sasl.mechanism", f"must be one of {', '.join(MECHANISMS)}",
                  f"set {t.fixkey('sasl.mechanism')}=SCRAM-SHA-512")
        return
    t.out["sasl.mechanism"] = mechanism
    jaas_text = t.text("sasl.jaas.config")
    if not jaas_text:
        t.problem("sasl.jaas.config", f"is required for {mechanism}",
                  f"set {t.fixkey('sasl.jaas.config')}=<LoginModule> required "
                  f'username="..." password="...";')
        return
    try:
        entry = parse_jaas(jaas_text)
    except JaasError as exc:
        t.problem("sasl.jaas.config", f"cannot be parsed: {exc}",
                  "write it as <LoginModule class> required key=\"value\" ...;",
                  shown_value=False)
        return
    expected = {"PLAIN": PLAIN, "SCRAM-SHA-256": SCRAM, "SCRAM-SHA-512": SCRAM,
                "OAUTHBEARER": OAUTHBEARER}[mechanism]
    if entry.kind == KERBEROS:
        t.problem("sasl.jaas.config", "Kerberos (Krb5LoginModule) is not supported",
                  "use SCRAM-SHA-512, PLAIN or OAUTHBEARER", shown_value=False)
        return
    if entry.kind != expected:
        t.problem("sasl.jaas.config", f"uses {entry.kind}, but sasl.mechanism={mechanism} "
                  f"needs {expected}", f"use org.apache.kafka.common.security."
                  f"{'scram' if expected == SCRAM else expected.lower().replace('loginmodule', '')}"
                  f".{expected}", shown_value=False)
        return
    if mechanism == "OAUTHBEARER":
        _oidc(t, entry.options)
        return
    username, password = entry.options.get("username"), entry.options.get("password")
    if username is None or password is None:
        t.problem("sasl.jaas.config", "needs both username and password options",
                  'add username="..." password="..."', shown_value=False)
        return
    # Azure Event Hubs: username "$ConnectionString", password the connection string; the
    # same pair works in librdkafka unchanged.
    t.out["sasl.username"] = username
    t.out["sasl.password"] = Secret(password)


def _oidc(t: _Translation, options: Mapping[str, str]) -> None:
    handler = t.text("sasl.login.callback.handler.class")
    endpoint = t.text("sasl.oauthbearer.token.endpoint.url")
    if handler not in OIDC_HANDLERS or not endpoint:
        t.problem("sasl.login.callback.handler.class",
                  "OAUTHBEARER is supported only as OIDC client credentials",
                  "set it to org.apache.kafka.common.security.oauthbearer."
                  "OAuthBearerLoginCallbackHandler and sasl.oauthbearer.token.endpoint.url")
        return
    if "clientId" not in options or "clientSecret" not in options:
        t.problem("sasl.jaas.config", "OIDC needs clientId and clientSecret options",
                  'add clientId="..." clientSecret="..."', shown_value=False)
        return
    t.out["sasl.oauthbearer.method"] = "oidc"
    t.out["sasl.oauthbearer.token.endpoint.url"] = endpoint
    t.out["sasl.oauthbearer.client.id"] = options["clientId"]
    t.out["sasl.oauthbearer.client.secret"] = Secret(options["clientSecret"])
    if "scope" in options:
        t.out["sasl.oauthbearer.scope"] = options["scope"]


def _tls(t: _Translation) -> None:
    algorithm = t.java.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        name = algorithm.text.strip().lower()
        if name not in ("", "https"):
            t.problem("ssl.endpoint.identification.algorithm", "must be https or empty",
                      f"set {t.fixkey('ssl.endpoint.identification.algorithm')}=https")
        t.out["ssl.endpoint.identification.algorithm"] = name or "none"
    _truststore(t)
    _keystore(t)


def _store_path(t: _Translation, key: str) -> Path | None:
    path = Path(t.text(key))
    if not path.is_file():
        t.problem(key, "file not found", "correct the path or create the file")
        return None
    return path


def _store_type(t: _Translation, key: str, path: Path) -> str | None:
    """The store's real format; a declared type that contradicts the file is a problem."""
    try:
        actual = sniff_store(path)
    except StoreError as exc:
        t.problem(key, str(exc), "use a PEM or PKCS12 file")
        return None
    declared_key = key.replace(".location", ".type")
    declared = t.text(declared_key).upper()
    # The JDK opens a PKCS12 file declared as JKS (keystore.type.compat), so that is fine.
    if declared and declared != actual and not (declared == "JKS" and actual == "PKCS12"):
        t.problem(declared_key, f"says {declared}, but {path} is {actual}",
                  f"set {t.fixkey(declared_key)}={actual}")
        return None
    if actual in ("JKS", "JCEKS"):
        kind = "truststore" if "truststore" in key else "keystore"
        t.problem(key, f"{actual} stores are Java-only and librdkafka cannot read them",
                  f"convert it: keytool -importkeystore -srckeystore {path} -destkeystore "
                  f"{path.with_suffix('.p12')} -deststoretype PKCS12, then set "
                  f"{t.fixkey(f'ssl.{kind}.location')}={path.with_suffix('.p12')} and "
                  f"{t.fixkey(f'ssl.{kind}.type')}=PKCS12")
        return None
    return actual


def _truststore(t: _Translation) -> None:
    inline = t.java.get("ssl.truststore.certificates")
    if inline is not None:
        t.out["ssl.ca.pem"] = inline.text
        return
    if not t.text("ssl.truststore.location"):
        return  # the system CA bundle, as Java's default truststore
    path = _store_path(t, "ssl.truststore.location")
    kind = _store_type(t, "ssl.truststore.location", path) if path else None
    if path is None or kind is None:
        return
    if kind == "PEM":
        t.out["ssl.ca.location"] = str(path)
        return
    password = t.text("ssl.truststore.password") or None
    try:
        t.out["ssl.ca.pem"] = read_truststore_pem(path, password)
    except StoreError as exc:
        t.problem("ssl.truststore.location", str(exc),
                  f"check {t.fixkey('ssl.truststore.password')} or export the CA as PEM")


def _keystore(t: _Translation) -> None:
    chain, key = t.java.get("ssl.keystore.certificate.chain"), t.java.get("ssl.keystore.key")
    key_password = t.java.get("ssl.key.password")
    if chain is not None or key is not None:
        if chain is None or key is None:
            t.problem("ssl.keystore.key" if key is None else "ssl.keystore.certificate.chain",
                      "PEM keystores need both ssl.keystore.certificate.chain and "
                      "ssl.keystore.key", "set the missing one")
            return
        t.out["ssl.certificate.pem"] = chain.text
        t.out["ssl.key.pem"] = Secret(key.text)
        if key_password is not None:
            t.out["ssl.key.password"] = Secret(key_password.text)
        return
    if not t.text("ssl.keystore.location"):
        return
    path = _store_path(t, "ssl.keystore.location")
    kind = _store_type(t, "ssl.keystore.location", path) if path else None
    if path is None or kind is None:
        return
    if kind == "PEM":
        # One PEM file holding both the certificate chain and the private key.
        t.out["ssl.certificate.location"] = str(path)
        t.out["ssl.key.location"] = str(path)
        if key_password is not None:
            t.out["ssl.key.password"] = Secret(key_password.text)
        return
    t.out["ssl.keystore.location"] = str(path)
    store_password = t.java.get("ssl.keystore.password")
    if store_password is not None:
        t.out["ssl.keystore.password"] = Secret(store_password.text)

