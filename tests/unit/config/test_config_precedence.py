"""MM2's precedence and defaults (MirrorMakerConfig, MirrorConnectorConfig)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.mm2.policy import IdentityReplicationPolicy
from tests.unit.conftest import BASE, Loader


def test_defaults_match_mm2(load: Loader) -> None:
    flow = load(BASE).flow("A->B")
    assert flow.enabled
    assert flow.topics.include == ".*"
    assert flow.topics.exclude == r".*[\-\.]internal, .*\.replica, __.*"
    assert flow.groups.exclude == "console-consumer-.*, connect-.*, __.*"
    assert flow.replication_factor == 2
    assert flow.policy.separator == "."
    assert (flow.refresh_topics.seconds, flow.sync_topic_configs.seconds,
            flow.sync_topic_acls.seconds, flow.emit_heartbeats.seconds,
            flow.emit_checkpoints.seconds, flow.sync_group_offsets.seconds) == (
        600, 600, 600, 1, 60, 60)
    assert flow.sync_topic_acls.active and flow.emit_checkpoints.active
    assert not flow.sync_group_offsets.active
    assert flow.offset_lag_max == 100
    assert flow.use_defaults_from == "target"
    assert flow.use_incremental_alter_configs == "requested"
    assert flow.tasks_max is None
    assert flow.dag_id == "ferry_A_to_B"


def test_flow_setting_overrides_top_level(load: Loader) -> None:
    config = load(BASE + "topics = a.*\nA->B.topics = orders\nreplication.factor = 3\n")
    flow = config.flow("A->B")
    assert flow.topics.include == "orders"
    assert flow.replication_factor == 3


def test_cluster_prefixed_connector_key_is_not_a_filter_and_warns(load: Loader) -> None:
    config = load(BASE + "A.topics = orders\n")
    assert config.flow("A->B").topics.include == ".*"
    assert any("A.topics has no effect" in w for w in config.warnings)


def test_flows_are_disabled_unless_enabled_but_heartbeat_pairs_exist(load: Loader) -> None:
    config = load(BASE)
    assert [f.name for f in config.enabled_flows] == ["A->B"]
    assert not config.flow("B->A").enabled  # heartbeats-only pair, as in MM2


def test_no_heartbeat_pairs_when_heartbeats_are_off(load: Loader) -> None:
    config = load(BASE + "emit.heartbeats.enabled = false\n")
    assert [f.name for f in config.flows] == ["A->B"]


def test_negative_mm2_interval_means_disabled_not_an_error(load: Loader) -> None:
    flow = load(BASE + "A->B.sync.topic.acls.interval.seconds = -1\n").flow("A->B")
    assert flow.sync_topic_acls.enabled and not flow.sync_topic_acls.active
    assert flow.sync_topic_acls.describe() == "off (negative interval)"


def test_cluster_client_keys_reach_every_client_of_that_cluster(load: Loader) -> None:
    flow = load(BASE + "A.client.dns.lookup = use_all_dns_ips\n").flow("A->B")
    assert flow.consumer.settings["bootstrap.servers"] == "a1:9092,a2:9092"
    assert flow.consumer.settings["client.dns.lookup"] == "use_all_dns_ips"
    assert flow.source_admin.settings["client.dns.lookup"] == "use_all_dns_ips"
    assert "client.dns.lookup" not in flow.producer.settings  # the producer writes to B


def test_top_level_client_keys_are_fallbacks(load: Loader) -> None:
    text = BASE + "security.protocol = SSL\nB.security.protocol = PLAINTEXT\n"
    flow = load(text).flow("A->B")
    assert flow.consumer.settings["security.protocol"] == "SSL"
    assert flow.producer.settings["security.protocol"] == "PLAINTEXT"


def test_role_prefixed_settings_and_their_precedence(load: Loader) -> None:
    # MM2: consumer.* (from A->B.consumer.*) < source.consumer.* (from A.consumer.*)
    #      < A->B.source.consumer.* (flow keys are applied last).
    text = BASE + (
        "A->B.consumer.fetch.min.bytes = 1\n"
        "A.consumer.fetch.min.bytes = 2\n"
        "A->B.consumer.fetch.max.wait.ms = 7\n"
        "B.producer.linger.ms = 50\n"
        "A->B.producer.batch.size = 1000000\n"
    )
    flow = load(text).flow("A->B")
    assert flow.consumer.settings["fetch.min.bytes"] == "2"
    assert flow.consumer.settings["fetch.wait.max.ms"] == "7"
    assert flow.producer.settings["linger.ms"] == "50"
    assert flow.producer.settings["batch.size"] == "1000000"
    flow = load(text + "A->B.source.consumer.fetch.min.bytes = 3\n").flow("A->B")
    assert flow.consumer.settings["fetch.min.bytes"] == "3"


def test_top_level_consumer_keys_are_ignored_with_a_warning(load: Loader) -> None:
    config = load(BASE + "consumer.isolation.level = read_uncommitted\n")
    assert config.flow("A->B").consumer.settings["isolation.level"] == "read_committed"
    assert any("consumer.isolation.level is ignored" in w for w in config.warnings)


def test_source_consumer_reads_committed_without_auto_commit_from_earliest(
    load: Loader,
) -> None:
    settings = load(BASE).flow("A->B").consumer.settings
    assert settings["isolation.level"] == "read_committed"
    assert settings["enable.auto.commit"] == "false"
    assert settings["auto.offset.reset"] == "earliest"


def test_read_uncommitted_is_honoured_with_a_warning(load: Loader) -> None:
    config = load(BASE + "A.consumer.isolation.level = read_uncommitted\n"
                  "A.consumer.auto.offset.reset = latest\n")
    settings = config.flow("A->B").consumer.settings
    assert settings["isolation.level"] == "read_uncommitted"
    assert settings["auto.offset.reset"] == "latest"
    assert any("aborted transactions" in w for w in config.warnings)


def test_identity_policy_knows_its_source(load: Loader) -> None:
    text = BASE + ("replication.policy.class = "
                   "org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n")
    flow = load(text).flow("A->B")
    assert isinstance(flow.policy, IdentityReplicationPolicy)
    assert flow.remote_topic("orders") == "orders"
    assert flow.policy.topic_source("orders") == "A"


def test_custom_separator(load: Loader) -> None:
    flow = load(BASE + "replication.policy.separator = _\n").flow("A->B")
    assert flow.remote_topic("orders") == "A_orders"
    assert flow.policy.checkpoints_topic("A") == "A_checkpoints_internal"


def test_deprecated_blacklist_keys_still_work_with_a_warning(load: Loader) -> None:
    config = load(BASE + "topics.blacklist = secret.*\n")
    assert not config.flow("A->B").topics.accepts("secret1")
    assert any("deprecated" in w for w in config.warnings)


def test_ferry_settings_default_and_override_per_flow(load: Loader) -> None:
    text = BASE + "ferry.schedule = @hourly\nA->B.ferry.range.max.records = 5000\n"
    config = load(text)
    ferry = config.flow("A->B").ferry
    assert ferry.schedule == "@hourly"
    assert ferry.range_max_records == 5000
    assert ferry.delivery == "exactly_once"
    assert ferry.spark_master == "local[*]"
    assert ferry.state_dir.endswith("/ferry-state")
    assert config.flow("B->A").ferry.range_max_records == 1_000_000


@pytest.mark.parametrize("key", ["tasks.max", "A->B.tasks.max"])
def test_tasks_max_sets_the_lane_count(load: Loader, key: str) -> None:
    assert load(BASE + f"{key} = 4\n").flow("A->B").tasks_max == 4


def test_unknown_top_level_key_warns(load: Loader) -> None:
    config = load(BASE + "topic.exclude = x\noffset.storage.replication.factor = 1\n")
    assert any(w.startswith("topic.exclude is not an MM2") for w in config.warnings)
    assert not any("offset.storage" in w for w in config.warnings)


def test_event_hubs_behind_another_host_name_with_exactly_once_warns(load: Loader) -> None:
    # A namespace by its own host name gets the Event Hubs profile (at-least-once, no
    # warning: test_eventhubs.py); one behind a private DNS name is known by its login.
    namespace = load(BASE.replace("b1:9092", "ns.servicebus.windows.net:9093"))
    assert namespace.flow("A->B").ferry.delivery == "at_least_once"
    assert not any("Event Hubs" in w for w in namespace.warnings)
    private = load(BASE + "B.security.protocol = SASL_SSL\nB.sasl.mechanism = PLAIN\n"
                   "B.sasl.jaas.config = org.apache.kafka.common.security.plain."
                   'PlainLoginModule required username="$ConnectionString" password="x";\n')
    assert any("Event Hubs" in w for w in private.warnings)


def test_use_defaults_from_is_a_flow_setting_only(load: Loader) -> None:
    config = load(BASE + "use.defaults.from = source\n")
    assert config.flow("A->B").use_defaults_from == "target"
    assert any("use.defaults.from is ignored at the top level" in w for w in config.warnings)
    flow = load(BASE + "A->B.use.defaults.from = source\n").flow("A->B")
    assert flow.use_defaults_from == "source"


def test_mm2_connector_timeouts_are_not_client_settings(load: Loader) -> None:
    config = load(BASE + "consumer.poll.timeout.ms = 500\nA->B.admin.timeout.ms = 9000\n")
    flow = config.flow("A->B")
    assert "poll.timeout.ms" not in flow.consumer.settings
    assert "timeout.ms" not in flow.source_admin.settings
    assert not any("consumer.poll.timeout.ms" in w for w in config.warnings)


def test_minus_one_socket_buffers_mean_the_os_default(load: Loader) -> None:
    flow = load(BASE + "A.consumer.receive.buffer.bytes = -1\n").flow("A->B")
    assert flow.consumer.settings["socket.receive.buffer.bytes"] == "0"


def test_latin1_config_files_are_read_like_java(load: Loader, tmp_path: Path) -> None:
    path = tmp_path / "latin1.properties"
    path.write_bytes((BASE + "# caf\xe9\n").encode("iso-8859-1"))
    from ferry.config import load_config

    assert load_config(path).flow("A->B").enabled


@pytest.mark.parametrize(("extra", "topic", "group"), [
    ("", "mm2-offsets.A.internal", "A-mm2"),
    ("B.offset.storage.topic = b-offsets\nB.group.id = b-workers\n", "b-offsets", "b-workers"),
    # the top-level storage settings go over the target's (MirrorMakerConfig.workerConfig)
    ("offset.storage.topic = all-offsets\nB.offset.storage.topic = b-offsets\n",
     "all-offsets", "A-mm2"),
    ("group.id = ignored\n", "mm2-offsets.A.internal", "A-mm2"),  # not a worker setting
])
def test_where_mm2_in_dedicated_mode_keeps_a_flows_progress(
        load: Loader, extra: str, topic: str, group: str) -> None:
    flow = load(BASE + extra).flow("A->B")
    assert (flow.mm2_offsets_topic, flow.mm2_worker_group) == (topic, group)


@pytest.mark.parametrize(("extra", "cluster_s", "flow_s"), [
    ("", 120.0, 120.0),
    ("ferry.kafka.retry.seconds = 3\n", 3.0, 3.0),
    ("A->B.ferry.kafka.retry.seconds = 5\n", 120.0, 5.0),
    ("ferry.kafka.retry.seconds = 3\nA->B.ferry.kafka.retry.seconds = 5\n", 3.0, 5.0),
], ids=["default", "top-level", "flow-only", "both"])
def test_the_retry_budget_bounds_the_clusters_own_clients_as_well_as_the_flows(
    load: Loader, extra: str, cluster_s: float, flow_s: float
) -> None:
    # the clusters' own admin clients read heartbeats and the topology for status and
    # metrics: a top-level budget holds there too
    config = load(BASE + extra)
    flow = config.flow("A->B")

    assert {c.admin.retry_seconds for c in config.clusters.values()} == {cluster_s}
    assert {flow.source_admin.retry_seconds, flow.target_admin.retry_seconds,
            flow.producer.retry_seconds, flow.consumer.retry_seconds} == {flow_s}


def test_a_teams_dag_settings_are_read_and_a_callback_must_name_module_and_function(
    load: Loader
) -> None:
    from ferry.errors import ConfigError

    flow = load(BASE + "ferry.dag.owner = kafka-platform\nferry.dag.tags = dr, , tier-1\n"
                       "ferry.dag.on.failure.callback = my_team.alerts:page\n").flow("A->B")
    assert (flow.ferry.dag_owner, flow.ferry.dag_tags, flow.ferry.dag_on_failure_callback) == (
        "kafka-platform", ("dr", "tier-1"), "my_team.alerts:page")

    with pytest.raises(ConfigError) as refused:
        load(BASE + "ferry.dag.on.failure.callback = page_someone\n")
    (problem,) = refused.value.problems
    assert problem.key == "ferry.dag.on.failure.callback" and "module:function" in problem.message


@pytest.mark.parametrize(("value", "read"), [
    ("", ""),
    ('{"priority_weight": 10, "depends_on_past": true}',
     '{"depends_on_past": true, "priority_weight": 10}'),
    ('{"on_retry_callback": "my_team.alerts:note"}',
     '{"on_retry_callback": "my_team.alerts:note"}'),
])
def test_a_teams_default_args_are_read_as_canonical_json(load: Loader, value: str,
                                                         read: str) -> None:
    flow = load(BASE + f"ferry.dag.default.args = {value}\n").flow("A->B")
    assert flow.ferry.dag_default_args == read


@pytest.mark.parametrize(("value", "says"), [
    ("backoff=x", "must be a JSON object (Expecting value at character 0)"),
    ('["priority_weight"]', "must be a JSON object, e.g."),
    ('{"retries": 5}', "retries is set by ferry.task.retries"),
    ('{"pool": "p"}', "pool is set by ferry.task.pool: use that key"),
    ('{"owner": "me"}', "owner is set by ferry.dag.owner"),
    ('{"on_success_callback": "page_someone"}', "must be module:function"),
])
def test_default_args_that_are_not_an_object_or_that_ferry_sets_itself_are_refused(
        load: Loader, value: str, says: str) -> None:
    from ferry.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        load(BASE + f"ferry.dag.default.args = {value}\n")
    (problem,) = refused.value.problems
    assert problem.key == "ferry.dag.default.args" and says in problem.message, problem.message
