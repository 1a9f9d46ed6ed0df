"""The secure profile of the local cluster launcher: SASL (PLAIN, SCRAM-SHA-512) over TLS and
plaintext, with KRaft's StandardAuthorizer and nobody but `admin` allowed without ACLs."""

from __future__ import annotations

import json
import socket
import ssl
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from ferry.errors import TerminalError
from ferry.local import cluster
from ferry.local.cluster import SecureClusters
from ferry.local.tls import ensure_tls

pytestmark = pytest.mark.integration

ALIASES = ("ssource", "starget")
T = TypeVar("T")


# -- helpers -------------------------------------------------------------------------------

def _conf(settings: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    """A librdkafka config: client `settings` plus `extra` (numbers, callbacks)."""
    return {**settings, **extra}


def _create_topic(settings: dict[str, str], topic: str) -> None:
    admin = AdminClient(_conf(settings))
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(timeout=15)


def _error_code(exc: KafkaException) -> int:
    return int(exc.args[0].code())


def _allow(secure: SecureClusters, alias: str, principal: str,
           *grants: tuple[ResourceType, str, AclOperation]) -> None:
    """As admin, allow `principal` each (resource type, literal name, operation)."""
    bindings = [AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*",
                           operation, AclPermissionType.ALLOW)
                for rtype, name, operation in grants]
    admin = AdminClient(_conf(secure.client(alias)))
    for future in admin.create_acls(bindings).values():
        future.result(timeout=15)


def _eventually(attempt: Callable[[], T], seconds: float = 15.0) -> T:
    """`attempt()` until it stops raising an authorization error (ACLs reach the broker's
    authorizer through the metadata log, just after `create_acls` returns)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return attempt()
        except KafkaException as exc:
            denied = _error_code(exc) in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                          KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                          KafkaError.GROUP_AUTHORIZATION_FAILED)
            if not denied or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _produce(settings: dict[str, str], topic: str, values: list[bytes]) -> None:
    producer = Producer(_conf(settings, acks="all", **{"message.timeout.ms": 15000}))
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(20) == 0


def _read(settings: dict[str, str], topic: str, count: int, group: str | None = None,
          seconds: float = 15.0) -> list[bytes]:
    """`count` values of partition 0 from the start: subscribed in `group`, or assigned.
    Raises the first error a poll returns."""
    consumer = Consumer(_conf(settings, **{"group.id": group or topic,
                                           "auto.offset.reset": "earliest",
                                           "enable.auto.commit": False}))
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    try:
        if group:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, 0, 0)])
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            got.append(msg.value() or b"")
    finally:
        consumer.close()
    return got


def _client_errors(settings: dict[str, str], seconds: float = 10.0) -> list[KafkaError]:
    """The errors librdkafka reports (error_cb) for a client with `settings`, waiting at most
    `seconds` for the first one."""
    errors: list[KafkaError] = []
    admin = AdminClient(_conf(settings, error_cb=errors.append, log_level=0))
    deadline = time.monotonic() + seconds
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    return errors


# -- authentication and authorization ------------------------------------------------------

@pytest.mark.parametrize("alias", ALIASES)
def test_admin_over_sasl_ssl_plain_creates_a_topic_and_round_trips_a_record(
        secure_clusters: SecureClusters, topic_name: str, alias: str) -> None:
    admin = secure_clusters.client(alias, "admin", "PLAIN")
    assert admin["security.protocol"] == "SASL_SSL"
    assert admin["bootstrap.servers"] == secure_clusters.bootstrap[alias]

    _create_topic(admin, topic_name)
    _produce(admin, topic_name, [b"one", b"two"])

    assert topic_name in AdminClient(_conf(admin)).list_topics(timeout=10).topics
    assert _read(admin, topic_name, 2) == [b"one", b"two"]


def test_ferry_over_scram_may_create_a_topic_only_once_an_acl_allows_it(
        secure_clusters: SecureClusters, topic_name: str) -> None:
    ferry = secure_clusters.client("starget", "ferry", "SCRAM-SHA-512")

    # without ACLs the mirror principal authenticates but is refused
    with pytest.raises(KafkaException) as refused:
        _create_topic(ferry, topic_name)
    assert _error_code(refused.value) in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                          KafkaError.CLUSTER_AUTHORIZATION_FAILED)

    # once admin allows CREATE on that topic, the same call succeeds
    _allow(secure_clusters, "starget", "User:ferry",
           (ResourceType.TOPIC, topic_name, AclOperation.CREATE))
    _eventually(lambda: _create_topic(ferry, topic_name))
    admin = AdminClient(_conf(secure_clusters.client("starget")))
    assert topic_name in admin.list_topics(timeout=10).topics


def test_acls_of_one_cluster_do_not_apply_to_the_other(
        secure_clusters: SecureClusters, topic_name: str) -> None:
    _allow(secure_clusters, "ssource", "User:ferry",
           (ResourceType.TOPIC, topic_name, AclOperation.CREATE))
    with pytest.raises(KafkaException) as refused:
        _create_topic(secure_clusters.client("starget", "ferry", "SCRAM-SHA-512"), topic_name)
    assert _error_code(refused.value) in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                          KafkaError.CLUSTER_AUTHORIZATION_FAILED)


def test_a_reader_reads_with_topic_and_group_acls_and_a_user_without_rights_cannot(
        secure_clusters: SecureClusters, topic_name: str) -> None:
    admin = secure_clusters.client("ssource")
    _create_topic(admin, topic_name)
    _produce(admin, topic_name, [b"r1", b"r2", b"r3"])
    group = f"{topic_name}-alice"
    _allow(secure_clusters, "ssource", "User:alice",
           (ResourceType.TOPIC, topic_name, AclOperation.READ),
           (ResourceType.GROUP, group, AclOperation.READ))

    alice = secure_clusters.client("ssource", "alice", "SCRAM-SHA-512")
    assert _eventually(lambda: _read(alice, topic_name, 3, group=group)) == [b"r1", b"r2", b"r3"]

    mallory = secure_clusters.client("ssource", "mallory", "PLAIN")
    with pytest.raises(KafkaException) as refused:
        _read(mallory, topic_name, 1)  # refused at its group, or else at the topic
    assert _error_code(refused.value) in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                          KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException) as refused:
        _produce_or_raise(mallory, topic_name)
    assert _error_code(refused.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _produce_or_raise(settings: dict[str, str], topic: str) -> None:
    """Produce one record; raise its delivery error."""
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer(_conf(settings, **{"message.timeout.ms": 10000}))
    producer.produce(topic, value=b"x", on_delivery=delivered)
    producer.flush(15)
    if failures:
        raise KafkaException(failures[0])


@pytest.mark.parametrize(("mechanism", "tls"), [("PLAIN", True), ("SCRAM-SHA-512", True),
                                                ("PLAIN", False), ("SCRAM-SHA-512", False)])
def test_a_wrong_password_fails_authentication_quickly(
        secure_clusters: SecureClusters, mechanism: str, tls: bool) -> None:
    settings = secure_clusters.client("ssource", "ferry", mechanism, tls=tls)
    settings["sasl.password"] = "not-" + settings["sasl.password"]

    started = time.monotonic()
    errors = _client_errors(settings, seconds=10)

    assert time.monotonic() - started < 10, "no error reported: the client hangs"
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "SASL authentication error" in errors[0].str()


def test_an_unknown_user_fails_authentication(secure_clusters: SecureClusters) -> None:
    settings = secure_clusters.client("starget", "admin", "SCRAM-SHA-512")
    settings["sasl.username"] = "eve"
    errors = _client_errors(settings)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors


def test_the_sasl_plaintext_port_works_with_scram(
        secure_clusters: SecureClusters, topic_name: str) -> None:
    admin_plain = secure_clusters.client("starget", "admin", "SCRAM-SHA-512", tls=False)
    assert admin_plain["security.protocol"] == "SASL_PLAINTEXT"
    assert "ssl.ca.location" not in admin_plain
    assert admin_plain["bootstrap.servers"] == secure_clusters.plaintext_bootstrap["starget"]

    _create_topic(admin_plain, topic_name)
    _produce(admin_plain, topic_name, [b"over-plaintext"])

    # the same broker, seen through its SASL_SSL listener
    assert _read(secure_clusters.client("starget"), topic_name, 1) == [b"over-plaintext"]


def test_the_ssl_port_does_not_speak_sasl_plaintext(secure_clusters: SecureClusters) -> None:
    settings = secure_clusters.client("ssource", "admin", "PLAIN", tls=False)
    settings["bootstrap.servers"] = secure_clusters.bootstrap["ssource"]
    with pytest.raises(KafkaException):
        AdminClient(_conf(settings, log_level=0)).list_topics(timeout=3)


# -- TLS -----------------------------------------------------------------------------------

def test_a_client_that_does_not_trust_the_ca_fails_tls_verification(
        secure_clusters: SecureClusters, tmp_path: Path) -> None:
    untrusting = secure_clusters.client("ssource")
    del untrusting["ssl.ca.location"]  # the system's trust store only
    other_ca = secure_clusters.client("ssource")
    other_ca["ssl.ca.location"] = str(ensure_tls(tmp_path / "other").ca)

    for settings in (untrusting, other_ca):
        errors = _client_errors(settings)
        # librdkafka reports it as _SSL or, on some runs, as _TRANSPORT with the SSL reason
        assert errors and errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT), errors
        assert "certificate verify failed" in errors[0].str()


@pytest.mark.parametrize("alias", ALIASES)
def test_the_ca_file_verifies_the_server_as_127_0_0_1(
        secure_clusters: SecureClusters, alias: str) -> None:
    host, port = secure_clusters.bootstrap[alias].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(secure_clusters.ca))
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED

    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        cert = tls.getpeercert()
    assert cert is not None
    assert ("IP Address", "127.0.0.1") in cert["subjectAltName"]
    assert ("DNS", "localhost") in cert["subjectAltName"]

    # a name the certificate does not carry is refused
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        context.wrap_socket(raw, server_hostname="kafka.example.com")


# -- the launcher's bookkeeping ------------------------------------------------------------

def test_passwords_are_private_and_stay_out_of_bootstrap_properties(
        secure_clusters: SecureClusters) -> None:
    root = secure_clusters.root
    assert set(secure_clusters.passwords) == {"admin", "ferry", "alice", "mallory"}
    assert len(set(secure_clusters.passwords.values())) == 4
    assert cluster.credentials(root) == secure_clusters.passwords

    credentials_file = root / "credentials.properties"
    assert stat.S_IMODE(credentials_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "tls" / "server.pem").stat().st_mode) == 0o600
    for alias in ALIASES:
        assert stat.S_IMODE((root / alias / "server.properties").stat().st_mode) == 0o600

    bootstrap = (root / "bootstrap.properties").read_text()
    assert bootstrap == "".join(f"{alias}.bootstrap.servers={secure_clusters.bootstrap[alias]}\n"
                                for alias in ALIASES)
    assert not any(pw in bootstrap for pw in secure_clusters.passwords.values())


def test_cluster_json_records_the_secure_profile(secure_clusters: SecureClusters) -> None:
    for alias in ALIASES:
        recorded = json.loads((secure_clusters.root / alias / "cluster.json").read_text())
        assert recorded["secure"] is True
        assert f"127.0.0.1:{recorded['port']}" == secure_clusters.bootstrap[alias]
        assert f"127.0.0.1:{recorded['sasl_plaintext_port']}" == \
            secure_clusters.plaintext_bootstrap[alias]
        assert not any(pw in json.dumps(recorded) for pw in secure_clusters.passwords.values())


def test_status_and_admin_settings_reach_the_secure_clusters(
        secure_clusters: SecureClusters) -> None:
    rows = {row["alias"]: row for row in cluster.status(secure_clusters.root)}
    assert set(rows) == set(ALIASES)
    assert all(row["running"] and row["answering"] for row in rows.values()), rows

    for state in cluster.states_in(secure_clusters.root):
        settings = cluster.admin_client_settings(state)
        assert settings == secure_clusters.client(state.alias, "admin", "PLAIN")
        AdminClient(_conf(settings)).list_topics(timeout=10)


def test_up_again_keeps_the_running_brokers_and_refuses_to_change_their_profile(
        secure_clusters: SecureClusters) -> None:
    before = {s.alias: s.pid for s in cluster.states_in(secure_clusters.root)}
    again = cluster.up(ALIASES, secure_clusters.root, secure=True, timeout=30)
    assert {s.alias: s.pid for s in again} == before
    assert cluster.credentials(secure_clusters.root) == secure_clusters.passwords

    with pytest.raises(TerminalError, match="stop it first"):
        cluster.up(ALIASES, secure_clusters.root, secure=False, timeout=30)


def test_an_old_cluster_json_without_the_new_fields_still_loads(tmp_path: Path) -> None:
    old = tmp_path / "legacy"
    old.mkdir()
    (old / "cluster.json").write_text(json.dumps(
        {"alias": "legacy", "dir": str(old), "port": 1, "controller_port": 2, "pid": None}))
    [state] = cluster.states_in(tmp_path)
    assert (state.secure, state.sasl_plaintext_port, state.plaintext_bootstrap) == \
        (False, None, None)
    assert cluster.admin_client_settings(state) == {"bootstrap.servers": "127.0.0.1:1"}
