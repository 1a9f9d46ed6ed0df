"""Turn librdkafka errors into Ferry's errors, naming the cluster (and what was asked)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException

from ferry.errors import FerryError, TerminalError, TransientError
from ferry.kafka.codes import TRANSIENT_CODES

_TERMINAL = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION,
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError._MSG_TIMED_OUT, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_CONFIG, KafkaError._INVALID_ARG, KafkaError.POLICY_VIOLATION,
    KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
}


_AUTHORIZATION = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "TOPIC", KafkaError.GROUP_AUTHORIZATION_FAILED: "GROUP",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "CLUSTER",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID",
}

Needs = str | Mapping[str, str]
"""What a call needs, for authorization errors: `"OPERATION on TYPE name"`, or such texts
keyed by resource type (`TOPIC`, `GROUP`, `CLUSTER`, `TRANSACTIONAL_ID`) when a call
touches several."""


def kafka_error(exc: BaseException, cluster: str, action: str, *, principal: str | None = None,
                needs: Needs | None = None) -> FerryError:
    """A Ferry error for a failed Kafka call: `action` says what was attempted.

    An authorization failure also names `principal` and the right it lacks (from `needs`),
    with the `kafka-acls` call that grants it.
    """
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        text = f"cluster {cluster}: {action} failed: {err.str()} ({err.name()})"
        kind = _AUTHORIZATION.get(err.code())
        if kind is not None:
            return TerminalError(_denied(text, kind, principal, needs))
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                          KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
            return TransientError(f"{text}; is the cluster reachable at its "
                                  "bootstrap.servers?")
        if err.code() in TRANSIENT_CODES:  # passes by itself, whatever the flag says
            return TransientError(text)
        if err.code() in _TERMINAL or err.fatal():
            return TerminalError(text)
        return TransientError(text) if err.retriable() else TerminalError(text)
    return TransientError(f"cluster {cluster}: {action} failed: {exc}")


def _denied(text: str, kind: str, principal: str | None, needs: Needs | None) -> str:
    right = needs.get(kind) if isinstance(needs, Mapping) else needs
    who = principal or "the client's principal"
    if right is None:
        return f"{text}; {who} lacks a {kind} right: grant it with kafka-acls"
    operation, _, resource = right.partition(" on ")
    rtype, _, name = resource.partition(" ")
    flag = {"TOPIC": f"--topic '{name}'", "GROUP": f"--group '{name}'",
            "TRANSACTIONAL_ID": f"--transactional-id '{name}'",
            "CLUSTER": "--cluster"}.get(rtype, f"--resource-pattern-type literal '{name}'")
    return (f"{text}; {who} may not {operation} on {resource}: grant it with kafka-acls --add "
            f"--allow-principal {who} --operation {operation.title().replace('_', '')} {flag}")


class _Answered(Protocol):
    error: KafkaError | None


def raise_partition_error(answer: Iterable[_Answered]) -> None:
    """Raise the first per-partition error of a `committed` answer as a KafkaException (a
    transient one is then retried like any). Such a partition's offset reads -1001, which
    taken for "no position" would let a write that expects none go over the position
    committed there."""
    for tp in answer:
        if tp.error is not None:
            raise KafkaException(tp.error)
