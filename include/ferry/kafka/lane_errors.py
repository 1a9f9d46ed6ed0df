"""A lane's failures in an operator's terms (adapter).

Every message names the flow, the cluster, the action and what to do: the principal and
the right it lacks when access was denied, the record (topic, partition, source offset)
when the target refused one (or did not acknowledge it in time), the partitions and
positions when a lane stopped moving.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from ferry.config import Flow
from ferry.core.internal import positions_group, reader_group
from ferry.errors import FerryError
from ferry.kafka.errors import kafka_error
from ferry.kafka.lane_state import Part

UNANSWERED = frozenset({
    KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})
"""Delivery failures that say the cluster did not take a record in time, not that it
refused it: librdkafka retries a partition without a leader or with too few in-sync
replicas for `acks=all` until the record's `message.timeout.ms` (the transaction timeout
for a transactional producer), then reports `_MSG_TIMED_OUT`."""


def unanswered(err: Any) -> bool:
    """Whether a delivery report's error is the cluster not answering (`UNANSWERED`)."""
    return isinstance(err, KafkaError) and err.code() in UNANSWERED


def refused(err: Any) -> str:
    """What the target did with a record it did not take, in a message's words."""
    return "did not acknowledge" if unanswered(err) else "refused"


class LaneErrors:
    """Explains the failures of one lane (`lane`, transactional id `txn_id`) copying `parts`."""

    def __init__(self, flow: Flow, lane: int, txn_id: str, parts: Iterable[Part]) -> None:
        self.flow, self.lane, self.txn_id = flow, lane, txn_id
        self.parts = list(parts)

    def kafka(self, exc: KafkaException, cluster: str, action: str) -> FerryError:
        """A Ferry error naming the principal and, when access was denied, the right."""
        if cluster == self.flow.source:
            topics = sorted({p.topic for p in self.parts})
            reader = reader_group(self.flow, "reader")
            return kafka_error(exc, cluster, action, principal=self.flow.consumer.principal,
                               needs={"TOPIC": f"READ on TOPIC {','.join(topics)}",
                                      "GROUP": f"DESCRIBE on GROUP {reader}"})
        remote = sorted({p.remote for p in self.parts})
        return kafka_error(exc, cluster, action, principal=self.flow.producer.principal, needs={
            "TOPIC": f"WRITE on TOPIC {','.join(remote)}",
            "TRANSACTIONAL_ID": f"WRITE on TRANSACTIONAL_ID {self.txn_id}",
            "GROUP": f"READ on GROUP {positions_group(self.flow)}",
            "CLUSTER": "IDEMPOTENT_WRITE on CLUSTER kafka-cluster"})

    def refusal(self, part: Part, source_offset: int, err: Any) -> str:
        """The target refused the record of `part` at `source_offset` (or did not
        acknowledge it in time: `unanswered`)."""
        text = err.str() if isinstance(err, KafkaError) else str(err)
        if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            text = str(kafka_error(KafkaException(err), self.flow.target, "writing",
                                   principal=self.flow.producer.principal,
                                   needs=f"WRITE on TOPIC {part.remote}"))
        return (f"flow {self.flow.name}: cluster {self.flow.target} {refused(err)} the record of "
                f"{part.topic}-{part.partition} at source offset {source_offset} (remote "
                f"topic {part.remote}): {text}")

    def unanswered_too_long(self, text: str, seconds: float, attempts: int) -> str:
        """The target left a batch unacknowledged (`text`, the first record) again and
        again for the whole retry budget."""
        budget = self.flow.ferry.kafka_retry_seconds
        remote = ", ".join(sorted({p.remote for p in self.parts}))
        return (f"{text}; still unacknowledged after {seconds:.0f}s and {attempts} attempts "
                f"(ferry.kafka.retry.seconds={budget:g}): does every partition of {remote} "
                f"on {self.flow.target} have a leader and at least min.insync.replicas "
                "replicas in sync? Nothing past the last commit was kept; the next run "
                "resumes there")

    def stalled(self, parts: Iterable[Part], stall_s: float) -> str:
        """No progress for `stall_s` on the unfinished ones of `parts`."""
        waiting = ", ".join(f"{p.topic}-{p.partition} at "
                            f"{max(p.covered, p.txn.last_offset + 1)} of {p.end}"
                            for p in parts if not p.done)
        return (f"flow {self.flow.name} lane {self.lane}: no progress for {stall_s:.0f}s on "
                f"{waiting}: is the partition's leader offline on {self.flow.source}? Nothing "
                "past the last commit was kept; the next run resumes there")

    def fenced(self, exc: BaseException | str) -> str:
        """The writer lost its slot to a newer one (another run of the flow, a backfill into
        its topic, an adoption): it stops, and the newer one resumes from what was
        committed."""
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            exc = exc.args[0].str()  # librdkafka's text, not the error object's repr
        return (f"flow {self.flow.name} writer {self.lane}: {self.txn_id} was taken by a "
                f"newer writer of the same partitions (another run of the flow, a backfill "
                f"into its topic or an adoption), so this run stopped writing them; nothing "
                f"past its last commit was kept, and the newer writer resumes there: {exc}")


FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH})


def is_fenced(err: object) -> bool:
    """A producer error meaning another producer initialised the same transactional id."""
    return isinstance(err, KafkaError) and err.code() in FENCED_CODES
