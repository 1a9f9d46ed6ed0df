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
        (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, TransientError, "failed"),
        (KafkaError._DESTROY_BROKER, TransientError, "Broker handle destroyed"),
    ],
    ids=["auth", "acl", "missing-topic", "too-large", "transport", "all-down", "leader-moved",
         "coordinator-loading", "broker-left-the-metadata-mid-request"],
)
def test_errors_name_the_cluster_and_the_action(code: int, kind: type, says: str) -> None:
    error = kafka_error(KafkaException(KafkaError(code)), "dr-site", "reading orders-3")
    assert isinstance(error, kind)
    assert str(error).startswith("cluster dr-site: reading orders-3 failed: ")
    assert says.lower() in str(error).lower()


@pytest.mark.parametrize(
    ("code", "needs", "says"),
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "CREATE on TOPIC A.orders",
         "User:ferry may not CREATE on TOPIC A.orders: grant it with kafka-acls --add "
         "--allow-principal User:ferry --operation Create --topic 'A.orders'"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED,
         {"GROUP": "READ on GROUP g1", "TOPIC": "READ on TOPIC t"},
         "User:ferry may not READ on GROUP g1: grant it with kafka-acls --add "
         "--allow-principal User:ferry --operation Read --group 'g1'"),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS on CLUSTER kafka-cluster",
         "--operation DescribeConfigs --cluster"),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None,
         "User:ferry lacks a TRANSACTIONAL_ID right"),
    ],
    ids=["topic", "group-of-several", "cluster", "unknown-right"],
)
def test_authorization_failures_name_principal_operation_resource_and_cluster(
    code: int, needs: str | dict[str, str] | None, says: str
) -> None:
    error = kafka_error(KafkaException(KafkaError(code)), "dr-site", "creating remote topic",
                        principal="User:ferry", needs=needs)
    assert isinstance(error, TerminalError)
    assert str(error).startswith("cluster dr-site: creating remote topic failed: ")
    assert says in str(error)


class _Position:
    """A partition of a `committed` answer: its offset, and its own error if any."""

    def __init__(self, offset: int, error: KafkaError | None = None) -> None:
        self.offset, self.error = offset, error


def test_a_per_partition_error_of_a_position_read_is_an_error_never_no_position() -> None:
    # librdkafka answers such a partition with offset -1001, what "no position" reads as
    from ferry.kafka.errors import raise_partition_error

    raise_partition_error([_Position(7), _Position(-1001)])  # no position: an answer
    with pytest.raises(KafkaException) as raised:
        raise_partition_error([_Position(7), _Position(
            -1001, KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))])
    assert raised.value.args[0].code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS


def test_a_transient_per_partition_error_is_asked_again_until_answered() -> None:
    from ferry.kafka.errors import raise_partition_error
    from ferry.kafka.retry import retrying

    answers = [[_Position(-1001, KafkaError(KafkaError.NOT_COORDINATOR))], [_Position(12)]]

    def read() -> int:
        answer = answers.pop(0)
        raise_partition_error(answer)
        return answer[0].offset

    assert retrying(read, cluster="B", action="reading a position", budget_s=5) == 12
