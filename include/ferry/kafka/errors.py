"""Turn librdkafka errors into Ferry's errors, naming the cluster (and what was asked)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from ferry.errors import FerryError, TerminalError, TransientError

_TERMINAL = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION,
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError._MSG_TIMED_OUT, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_CONFIG, KafkaError._INVALID_ARG, KafkaError.POLICY_VIOLATION,
    KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
}

# Leadership moves and coordinator loading pass by themselves: retry, whatever the flag says.
_TRANSIENT = {
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NETWORK_EXCEPTION,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
}


def kafka_error(exc: BaseException, cluster: str, action: str) -> FerryError:
    """A Ferry error for a failed Kafka call: `action` says what was attempted."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        text = f"cluster {cluster}: {action} failed: {err.str()} ({err.name()})"
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                          KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
            return TransientError(f"{text}; is the cluster reachable at its "
                                  "bootstrap.servers?")
        if err.code() in _TRANSIENT:
            return TransientError(text)
        if err.code() in _TERMINAL or err.fatal():
            return TerminalError(text)
        return TransientError(text) if err.retriable() else TerminalError(text)
    return TransientError(f"cluster {cluster}: {action} failed: {exc}")
