"""Azure Event Hubs by profile: a namespace's known limits apply unless the config says
otherwise, `ferry validate` shows each, and what the service cannot take is refused by
key."""

from __future__ import annotations

import pytest

from ferry.config.eventhubs import is_namespace
from ferry.errors import ConfigError
from tests.unit.conftest import Loader

HUB = """
clusters = kafka, hub
kafka.bootstrap.servers = kafka-1:9092
hub.bootstrap.servers = my-ns.servicebus.windows.net:9093
hub.security.protocol = SASL_SSL
hub.sasl.mechanism = PLAIN
hub.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required \\
    username="$ConnectionString" password="Endpoint=sb://my-ns/;SharedAccessKey=k";
kafka->hub.enabled = true
emit.heartbeats.enabled = false
"""


@pytest.mark.parametrize(("servers", "hub"), [
    ("my-ns.servicebus.windows.net:9093", True),
    ("SASL_SSL://MY-NS.ServiceBus.Windows.Net:9093", True),
    ("kafka-1:9092,my-ns.servicebus.windows.net:9093", True),
    ("my-ns.servicebus.chinacloudapi.cn:9093", True),
    ("my-ns.servicebus.usgovcloudapi.net:9093", True),
    ("servicebus.windows.net.example.com:9093", False),
    ("kafka-1:9092", False),
], ids=["namespace", "prefix-and-case", "in-a-list", "china", "us-gov", "look-alike",
        "kafka"])
def test_an_event_hubs_namespace_is_known_by_its_bootstrap_host(servers: str,
                                                                 hub: bool) -> None:
    assert is_namespace(servers) is hub


def test_the_profile_sets_the_services_limits_on_its_clients_and_flows(load: Loader) -> None:
    config = load(HUB)
    flow = config.flow("kafka->hub")
    producer, admin = flow.producer.settings, flow.target_admin.settings
    assert (producer["connections.max.idle.ms"], producer["metadata.max.age.ms"],
            producer["request.timeout.ms"]) == ("180000", "180000", "60000")
    assert (admin["connections.max.idle.ms"], admin["metadata.max.age.ms"]) == (
        "180000", "180000")
    assert "connections.max.idle.ms" not in flow.consumer.settings  # the source is Kafka
    assert flow.ferry.delivery == "at_least_once"
    assert not flow.sync_topic_acls.enabled and not flow.sync_topic_configs.enabled
    assert flow.target_partition_limit == 32
    assert "hub producer: connections.max.idle.ms=180000 (Event Hubs profile)" in \
        config.profiles
    assert any(line.startswith("kafka->hub: ferry.delivery=at_least_once (Event Hubs profile")
               for line in config.profiles)
    assert not any("Event Hubs" in w for w in config.warnings)  # the profile says it


def test_what_the_config_says_wins_and_validate_says_so(load: Loader) -> None:
    config = load(HUB + "hub.producer.metadata.max.age.ms = 60000\n"
                  "kafka->hub.ferry.delivery = exactly_once\n"
                  "sync.topic.configs.enabled = true\nhub.ferry.eventhubs.tier = Premium\n")
    flow = config.flow("kafka->hub")
    assert flow.producer.settings["metadata.max.age.ms"] == "60000"
    assert flow.ferry.delivery == "exactly_once"  # transactions opted into: Premium
    assert flow.sync_topic_configs.enabled and not flow.sync_topic_acls.enabled
    assert flow.target_partition_limit == 100
    assert "hub producer: metadata.max.age.ms=60000 as the config sets it (profile: 180000)" \
        in config.profiles
    assert flow.target_admin.settings["metadata.max.age.ms"] == "180000"  # not set there
    assert any(line.startswith("kafka->hub: ferry.delivery=exactly_once as the config sets")
               for line in config.profiles)


def test_a_kafka_only_config_has_no_profile(load: Loader) -> None:
    config = load(HUB.replace("my-ns.servicebus.windows.net", "kafka-2"))
    assert config.profiles == () and config.flow("kafka->hub").target_partition_limit is None
    assert config.flow("kafka->hub").ferry.delivery == "exactly_once"


@pytest.mark.parametrize(("extra", "line"), [
    ("hub.producer.compression.type = zstd\n",
     "hub.producer.compression.type = 'zstd': Event Hubs takes gzip as its only "
     "compression; set hub.producer.compression.type=gzip (or none)"),
    ("kafka->hub.producer.compression.type = lz4\n",
     "hub.producer.compression.type = 'lz4': Event Hubs takes gzip as its only compression"),
    ("hub.ferry.librdkafka.compression.codec = snappy\n",
     "hub.producer.compression.codec = 'snappy': Event Hubs takes gzip as its only"),
    ("kafka->hub.producer.max.request.size = 2000000\n",
     "hub.producer.max.request.size = '2000000': Event Hubs takes requests of at most "
     "1,046,528 bytes; set hub.producer.max.request.size=1046528"),
    ("hub.ferry.eventhubs.tier = gold\n",
     "hub.ferry.eventhubs.tier = 'gold': must be one of basic, standard, premium, dedicated"),
], ids=["zstd", "flow-level-lz4", "librdkafka-snappy", "flow-request-too-large",
        "unknown-tier"])
def test_what_the_service_cannot_take_is_refused_by_key(load: Loader, extra: str,
                                                        line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(HUB + extra)
    assert any(p.line().startswith(line) for p in raised.value.problems), [
        p.line() for p in raised.value.problems]


def test_gzip_passes(load: Loader) -> None:
    config = load(HUB + "hub.producer.compression.type = gzip\n")
    assert config.flow("kafka->hub").producer.settings["compression.type"] == "gzip"


def test_a_namespace_behind_its_own_dns_name_opts_in_by_naming_its_tier(load: Loader) -> None:
    config = load(HUB.replace("my-ns.servicebus.windows.net", "hub.corp.internal")
                  + "hub.ferry.eventhubs.tier = dedicated\n")
    flow = config.flow("kafka->hub")
    assert flow.target_partition_limit == 1024 and flow.ferry.delivery == "at_least_once"
    assert flow.producer.settings["connections.max.idle.ms"] == "180000"


def test_with_event_hubs_as_the_source_validate_shows_only_the_flows_declared(
    load: Loader
) -> None:
    # given: the hub is the source, and heartbeats are on (MM2 then has a heartbeat-only
    # pair kafka->hub the config never declares)
    config = load(HUB.replace("kafka->hub.enabled = true", "hub->kafka.enabled = true")
                  .replace("emit.heartbeats.enabled = false\n", ""))

    assert [(f.name, f.enabled) for f in config.flows] == [("kafka->hub", False),
                                                          ("hub->kafka", True)]
    assert not any("kafka->hub" in line or "hub producer" in line for line in config.profiles)
    assert "hub consumer: connections.max.idle.ms=180000 (Event Hubs profile)" in \
        config.profiles
