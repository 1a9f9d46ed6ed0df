"""librdkafka errors become one Ferry message naming the cluster and what was attempted;
terminal ones (retrying cannot help) fail tasks without retries."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from ferry.errors import TerminalError, TransientError
from ferry.kafka.errors import kafka_error


@pytest.mark.parametrize(
    ("code", "kind", "says"),
    [
        (KafkaError.SASL_AUTHENTICATION_FAILED, TerminalError, "Authentication failed"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, TerminalError, "Topic authorization failed"),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, TerminalError, "Unknown topic or partition"),
        (KafkaError.MSG_SIZE_TOO_LARGE, TerminalError, "Message size too large"),
        (KafkaError._TRANSPORT, TransientError, "is the cluster reachable"),
        (KafkaError._ALL_BROKERS_DOWN, TransientError, "is the cluster reachable"),
        (KafkaError.NOT_LEADER_FOR_PARTITION, TransientError, "failed"),
    ],
    ids=["auth", "acl", "missing-topic", "too-large", "transport", "all-down", "leader-moved"],
)
def test_errors_name_the_cluster_and_the_action(code: int, kind: type, says: str) -> None:
    error = kafka_error(KafkaException(KafkaError(code)), "dr-site", "reading orders-3")
    assert isinstance(error, kind)
    assert str(error).startswith("cluster dr-site: reading orders-3 failed: ")
    assert says.lower() in str(error).lower()
