"""A cluster's client settings from an Airflow connection (`<alias>.ferry.connection`):
Airflow's two forms in the environment, how the settings join the config, masking, and
the snapshot the copy job's lanes read them from."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from ferry.config import load_config
from ferry.config.connections import (
    Connection,
    client_settings,
    from_environment,
    placed,
    remove_snapshot,
    snapshot_lookup,
    snapshot_path,
    write_snapshot,
)
from ferry.errors import ConfigError
from ferry.secrets import Secret
from tests.unit.conftest import Loader

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
KAFKA_JSON = json.dumps({"conn_type": "kafka", "extra": {
    "bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN", "sasl.username": "mirror", "sasl.password": "pw-from-conn",
    "ssl.ca.location": "/etc/ca.pem", "group.id": "airflow-consumers"}})
CONFIG = """
clusters = A, B
A.bootstrap.servers = a1:9092
B.ferry.connection = kafka_b
A->B.enabled = true
"""


@pytest.mark.parametrize(("value", "expected"), [
    ('{"conn_type": "kafka", "extra": {"bootstrap.servers": "b:9092"}}',
     Connection("c", "kafka", extra={"bootstrap.servers": "b:9092"})),
    ('{"conn_type": "kafka", "extra": "{\\"bootstrap.servers\\": \\"b:9092\\"}"}',
     Connection("c", "kafka", extra={"bootstrap.servers": "b:9092"})),
    ('{"conn_type": "generic", "host": "b", "port": 9092, "login": "u", "password": "p"}',
     Connection("c", "generic", "b", 9092, "u", "p")),
    ("kafka://u:p%40ss@b:9093/?security.protocol=SASL_SSL",
     Connection("c", "kafka", "b", 9093, "u", "p@ss", {"security.protocol": "SASL_SSL"})),
    ('kafka://b:9093/?__extra__={"sasl.mechanism": "PLAIN"}',
     Connection("c", "kafka", "b", 9093, extra={"sasl.mechanism": "PLAIN"})),
], ids=["json", "json-extra-as-text", "json-fields", "uri", "uri-extra-json"])
def test_a_connection_is_read_from_airflows_environment_variable_in_either_form(
        value: str, expected: Connection) -> None:
    assert from_environment("c", {"AIRFLOW_CONN_C": value}) == expected
    assert from_environment("c", {}) is None


@pytest.mark.parametrize(("value", "message"), [
    ('{"conn_type": "kafka", "password": "s3cret"', "AIRFLOW_CONN_C is not valid JSON"),
    ('["s3cret"]', "AIRFLOW_CONN_C is neither Airflow's JSON form"),
    ('{"extra": "s3cret"}', "AIRFLOW_CONN_C: its extra is not a JSON object"),
    ('{"extra": ["s3cret"]}', "its extra must be a JSON object of client settings"),
    ("kafka://u:s3cret@b:port/", "AIRFLOW_CONN_C: its port is not a number"),
], ids=["broken-json", "not-an-object", "extra-not-json", "extra-not-an-object", "bad-port"])
def test_a_broken_connection_is_named_and_its_secret_never_shown(value: str,
                                                                  message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        from_environment("c", {"AIRFLOW_CONN_C": value})
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(("conn", "settings", "skipped"), [
    (Connection("c", "kafka", extra={"bootstrap.servers": "b:9092", "enable.idempotence": True,
                                     "linger.ms": 5, "group.id": "g"}),
     {"bootstrap.servers": "b:9092", "enable.idempotence": "true", "linger.ms": "5"},
     ["group.id (Ferry names its own consumer groups)"]),
    (Connection("c", "generic", "b1,b2:9094", 9093, "u", "p"),
     {"bootstrap.servers": "b1:9093,b2:9094", "sasl.username": "u", "sasl.password": "p"}, []),
    (Connection("c", "kafka", "ignored", 1, "u", "p",
                {"bootstrap.servers": "b:9092", "sasl.username": "x", "sasl.password": "y"}),
     {"bootstrap.servers": "b:9092", "sasl.username": "x", "sasl.password": "y"}, []),
], ids=["kafka-provider-extra", "host-port-login-password", "extra-wins-over-fields"])
def test_a_connection_gives_client_settings(conn: Connection, settings: dict[str, str],
                                            skipped: list[str]) -> None:
    assert client_settings(conn) == (settings, skipped)


def test_a_nested_extra_value_is_refused() -> None:
    with pytest.raises(ValueError, match="extra 'sasl' must be a single value"):
        client_settings(Connection("c", "kafka", extra={"sasl": {"password": "x"}}))


@pytest.mark.parametrize(("settings", "mechanism", "keys"), [
    ({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.username": "u", "sasl.password": "p"}, "",
     {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN} required username="u" password="p";'}),
    ({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": 'p"\\q'}, "",
     {"sasl.mechanism": "SCRAM-SHA-512",
      "sasl.jaas.config": f'{SCRAM} required username="u" password="p\\"\\\\q";'}),
    ({"sasl.username": "u", "sasl.password": "p"}, "scram-sha-256",
     {"sasl.jaas.config": f'{SCRAM} required username="u" password="p";'}),
    ({"ssl.ca.location": "/ca.pem", "queue.buffering.max.ms": "5", "linger.ms": "5",
      "ssl.truststore.location": "/t.pem"}, "",
     {"ferry.librdkafka.ssl.ca.location": "/ca.pem",
      "ferry.librdkafka.queue.buffering.max.ms": "5", "ferry.librdkafka.linger.ms": "5",
      "ssl.truststore.location": "/t.pem"}),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}, "SCRAM-SHA-512",
     {"sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{SCRAM} required username="u" password="p";'}),
], ids=["plain-as-jaas", "scram-escaped-librdkafka-name", "mechanism-from-the-config",
        "non-cluster-keys-pass-through", "the-configs-mechanism-wins"])
def test_settings_join_the_config_under_the_names_mm2_reads(
        settings: dict[str, str], mechanism: str, keys: dict[str, str]) -> None:
    assert placed(settings, mechanism) == keys


def test_a_clusters_settings_come_from_its_connection_masked_and_the_config_wins(
        load: Loader) -> None:
    config = load(CONFIG.replace("B.ferry", "B.sasl.mechanism = SCRAM-SHA-512\nB.ferry"),
                  env={"AIRFLOW_CONN_KAFKA_B": KAFKA_JSON})
    producer = config.flow("A->B").producer.settings
    assert config.clusters["B"].bootstrap_servers == "b1:9093,b2:9093"
    assert config.clusters["B"].connection == "kafka_b"
    # the config's own B.sasl.mechanism wins over the connection's PLAIN
    assert (producer["security.protocol"], producer["sasl.mechanism"],
            producer["sasl.username"]) == ("SASL_SSL", "SCRAM-SHA-512", "mirror")
    assert isinstance(producer["sasl.password"], Secret)
    assert producer["sasl.password"].reveal() == "pw-from-conn"
    assert producer["ssl.ca.location"] == "/etc/ca.pem"
    assert "pw-from-conn" not in repr(config) + str(config.flow("A->B").producer.shown())
    assert list(config.connections) == ["kafka_b"]
    assert any("group.id" in w and "not used" in w for w in config.warnings)


def test_a_missing_connection_is_one_problem_naming_the_key_and_where_it_was_looked_for(
        load: Loader) -> None:
    with pytest.raises(ConfigError) as raised:
        load(CONFIG)
    lines = [p.line() for p in raised.value.problems]
    assert lines[0] == ("B.ferry.connection = 'kafka_b': no Airflow connection 'kafka_b' "
                        "(looked in AIRFLOW_CONN_KAFKA_B); create the connection, or write "
                        "the cluster's client settings in the config")


def test_a_handed_lookup_comes_first_then_the_environment(tmp_path: Path) -> None:
    asked: list[str] = []

    def airflow(conn_id: str) -> Connection | None:
        asked.append(conn_id)
        return None

    path = tmp_path / "mm2.properties"
    path.write_text(CONFIG)
    config = load_config(path, env={"AIRFLOW_CONN_KAFKA_B": KAFKA_JSON},
                         connection_lookup=airflow)
    assert asked == ["kafka_b"] and config.clusters["B"].bootstrap_servers == "b1:9093,b2:9093"
    with pytest.raises(ConfigError, match="looked in AIRFLOW_CONN_KAFKA_B, or Airflow's"):
        load_config(path, env={}, connection_lookup=airflow)


def test_a_lookup_serves_the_load_it_is_handed_to_not_the_next(tmp_path: Path) -> None:
    # given: Airflow's lookup handed to one load (a task's, the Ferry page's)
    path = tmp_path / "mm2.properties"
    path.write_text(CONFIG)
    airflow = {"kafka_b": Connection("kafka_b", "kafka", "b.example.com", 9093)}
    assert load_config(path, env={}, connection_lookup=airflow.get) \
        .clusters["B"].bootstrap_servers == "b.example.com:9093"

    # then: a load in the same process without one reads the environment only (the CLI)
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    assert "(looked in AIRFLOW_CONN_KAFKA_B)" in raised.value.problems[0].line()


def test_the_copy_jobs_snapshot_is_private_read_back_and_removed(tmp_path: Path) -> None:
    plan = str(tmp_path / "run-1.json")
    conn = from_environment("kafka_b", {"AIRFLOW_CONN_KAFKA_B": KAFKA_JSON})
    assert conn is not None
    assert write_snapshot(plan, {}) is None and not snapshot_path(plan).exists()
    written = write_snapshot(plan, {"kafka_b": conn})
    assert written == snapshot_path(plan)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    found = snapshot_lookup(plan)
    assert found is not None
    assert found("kafka_b") == conn
    assert found("other") is None
    remove_snapshot(plan)
    remove_snapshot(plan)  # gone already: fine
    assert not written.exists()


def test_snapshots_left_over_a_day_are_removed_with_the_next(tmp_path: Path) -> None:
    import os

    conn = Connection("c", "kafka", extra={"bootstrap.servers": "b:9092"})
    old = write_snapshot(str(tmp_path / "old.json"), {"c": conn})
    recent = write_snapshot(str(tmp_path / "recent.json"), {"c": conn})
    assert old is not None and recent is not None
    os.utime(old, (0, 0))
    write_snapshot(str(tmp_path / "new.json"), {"c": conn})
    assert not old.exists() and recent.exists()


def test_tuning_settings_of_a_connection_reach_the_clients(load: Loader) -> None:
    conn = json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "b:9092", "linger.ms": 7, "queue.buffering.max.ms": 9}})
    producer = load(CONFIG, env={"AIRFLOW_CONN_KAFKA_B": conn}).flow("A->B").producer.settings
    assert (producer["linger.ms"], producer["queue.buffering.max.ms"]) == ("7", "9")


def test_top_level_client_settings_of_the_config_win_over_the_connections(
        load: Loader) -> None:
    conn = json.dumps({"conn_type": "generic", "host": "b", "port": 9093, "login": "m",
                       "password": "pw", "extra": {"security.protocol": "PLAINTEXT",
                                                   "sasl.mechanism": "PLAIN"}})
    config = load(CONFIG + "security.protocol = SASL_SSL\nsasl.mechanism = SCRAM-SHA-512\n"
                  "A.security.protocol = PLAINTEXT\n", env={"AIRFLOW_CONN_KAFKA_B": conn})
    producer = config.flow("A->B").producer.settings
    assert (producer["security.protocol"], producer["sasl.mechanism"]) == (
        "SASL_SSL", "SCRAM-SHA-512")
    assert producer["sasl.username"] == "m"  # a SCRAM login, from the config's mechanism


def test_a_setting_ferry_refuses_is_a_problem_naming_the_connection(load: Loader) -> None:
    conn = json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "b:9092", "transactional.id": "shared"}})
    with pytest.raises(ConfigError) as raised:
        load(CONFIG, env={"AIRFLOW_CONN_KAFKA_B": conn})
    assert any(p.line().startswith("B.ferry.connection = 'kafka_b': connection 'kafka_b' sets "
                                   "transactional.id: Ferry assigns transactional ids itself")
               for p in raised.value.problems)


def test_a_secrets_backend_error_is_one_problem_without_its_text(tmp_path: Path) -> None:
    def failing(conn_id: str) -> Connection | None:
        raise PermissionError("denied for token s3cret-token")

    path = tmp_path / "mm2.properties"
    path.write_text(CONFIG)
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={}, connection_lookup=failing)
    lines = [p.line() for p in raised.value.problems]
    assert "looking up Airflow connection 'kafka_b' failed (PermissionError)" in lines[0]
    assert "s3cret" not in " ".join(lines)


def test_a_connection_never_shows_its_password_or_extra() -> None:
    conn = Connection("c", "kafka", "b", 9092, "u", "pw-secret", {"sasl.password": "x-secret"})
    assert "secret" not in repr(conn)


def test_a_copy_jobs_loads_read_its_snapshot_and_not_an_earlier_jobs(tmp_path: Path) -> None:
    # the copy job hands its snapshot's lookup to its loads
    path = tmp_path / "mm2.properties"
    path.write_text(CONFIG)
    plan = str(tmp_path / "run-1.json")
    write_snapshot(plan, {"kafka_b": Connection("kafka_b", "kafka", "b.example.com", 9093)})
    assert load_config(path, env={}, connection_lookup=snapshot_lookup(plan)).clusters[
        "B"].bootstrap_servers == "b.example.com:9093"

    # a later job without a snapshot, in a reused worker: the environment only
    assert snapshot_lookup(str(tmp_path / "no-such-plan.json")) is None
    with pytest.raises(ConfigError, match=r"\(looked in AIRFLOW_CONN_KAFKA_B\)"):
        load_config(path, env={},
                    connection_lookup=snapshot_lookup(str(tmp_path / "no-such-plan.json")))


def test_a_dag_files_parse_looks_no_connection_up_and_tolerates_what_it_would_give(
        load: Loader, tmp_path: Path) -> None:

    asked: list[str] = []

    def airflow(conn_id: str) -> Connection | None:
        asked.append(conn_id)
        return None

    path = tmp_path / "parse.properties"
    path.write_text(CONFIG + "B.security.protocol = SASL_SSL\nB.sasl.mechanism = PLAIN\n")
    parsed = load_config(path, env={}, connections=False, connection_lookup=airflow)
    assert asked == [] and parsed.connections == {}
    assert parsed.flow("A->B").enabled and parsed.clusters["B"].connection == "kafka_b"
    with pytest.raises(ConfigError):  # a task's load looks it up, and judges it
        load_config(path, env={}, connection_lookup=airflow)
    assert asked == ["kafka_b"]
    path.write_text(CONFIG + "B.ferry.eventhubs.tier = gold\n")
    with pytest.raises(ConfigError, match=r"B\.ferry\.eventhubs\.tier"):  # still an error
        load_config(path, env={}, connections=False, connection_lookup=airflow)


def test_a_flows_load_looks_up_only_its_own_clusters_connections(
        load: Loader, tmp_path: Path) -> None:

    asked: list[str] = []

    def airflow(conn_id: str) -> Connection | None:
        asked.append(conn_id)
        return Connection(conn_id, "kafka", f"{conn_id}.example.com", 9093) \
            if conn_id == "kafka_b" else None

    # given: flows A->B and C->D, each with a target in a connection; D's does not exist
    path = tmp_path / "two-flows.properties"
    path.write_text(CONFIG.replace("clusters = A, B", "clusters = A, B, C, D")
                    + "C.bootstrap.servers = c1:9092\nD.ferry.connection = kafka_d\n"
                      "C->D.enabled = true\n")

    # when: A->B's task loads the config for its two clusters
    config = load_config(path, env={}, flow="A->B", connection_lookup=airflow)

    # then: only kafka_b was looked up, and only it is handed on (to the copy job's snapshot)
    assert asked == ["kafka_b"] and list(config.connections) == ["kafka_b"]
    assert config.clusters["B"].bootstrap_servers == "kafka_b.example.com:9093"
    # and C->D's load still finds its missing connection
    with pytest.raises(ConfigError, match="kafka_d"):
        load_config(path, env={}, flow="ferry_C_to_D", connection_lookup=airflow)


@pytest.mark.parametrize("name", ["A->B", "ferry_A_to_B", "A_to_B"])
def test_a_flows_load_builds_only_that_flow_and_its_reverse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # a config of N clusters has N*(N-1) pairs (420 for 21), each built and validated: a
    # task of one flow paid for all of them, twice, and at a DAG run's turn that was most of
    # the new task's start
    import ferry.config.mm2 as mm2

    built: list[tuple[str, str]] = []
    build = mm2._flow

    def counted(props: Any, source: str, target: str, *args: Any) -> Any:
        built.append((source, target))
        return build(props, source, target, *args)

    monkeypatch.setattr(mm2, "_flow", counted)
    path = tmp_path / "flow.properties"
    path.write_text(FOUR_CLUSTERS)

    config = load_config(path, env={}, flow=name)

    # the flow, and its reverse (whose offset map serves fail-back) as a heartbeat pair
    assert config.flow(name).name == "A->B"
    assert sorted(built) == [("A", "B"), ("B", "A")]
    assert [(f.name, f.enabled) for f in config.flows] == [("A->B", True), ("B->A", False)]
    # a whole load still builds every pair
    built.clear()
    assert len(load_config(path, env={}).flows) == len(built) == 12
    with pytest.raises(KeyError, match="no flow 'A->Z'"):
        load_config(path, env={}, flow="A->Z")


FOUR_CLUSTERS = """clusters = A, B, C, D
A.bootstrap.servers = a1:9092
B.bootstrap.servers = b1:9092
C.bootstrap.servers = c1:9092
D.bootstrap.servers = d1:9092
A->B.enabled = true
C->D.enabled = true
"""


def test_a_flows_load_is_not_failed_by_another_flows_setting(tmp_path: Path) -> None:
    # given: C->D's topic filter is not a valid pattern
    path = tmp_path / "flow.properties"
    path.write_text(FOUR_CLUSTERS + "C->D.topics = orders[\n")

    # then: A->B's task loads its flow; the whole config (the DAG file's parse, `ferry
    # validate`) still names the problem
    assert load_config(path, env={}, flow="A->B").flow("A->B").enabled
    with pytest.raises(ConfigError, match=r"C->D\.topics"):
        load_config(path, env={})
