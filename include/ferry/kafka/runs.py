"""The flow's newest run, named in Kafka on the target (adapter; the rule is
`ferry.core.takeover`).

The name is the one committed offset of group `run_group(flow, role)` (on partition 0 of
the flow's offset-map topic, which every run writes), its metadata naming the run: a
plain offset commit by a client that never joins, so the last run to commit is the one
named. Nobody consumes with the group; it only answers `committed()`.

Naming goes through the flow's retry budget and fails the run when the target cannot be
written (its lanes could not copy either); a principal without READ on the group gets a
warning naming the grant, and the run goes on. Reading never fails a lane: an unknown newest
run only means the lane behaves as if none were named (Kafka's fencing still holds).
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.core.internal import offset_map_topic, run_group
from ferry.core.takeover import Named, decode_marker, encode_marker
from ferry.kafka.errors import kafka_error
from ferry.kafka.retry import retrying

__all__ = ["NewestRun", "ReadsNewest"]

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 10.0
DENIED = frozenset({KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED})


class ReadsNewest(Protocol):
    """Reads which run is the flow's newest (`NewestRun`)."""

    def read(self) -> Named | None: ...


class NewestRun:
    """Names and reads the newest run of `flow` (of `role`); use as a context manager."""

    def __init__(self, flow: Flow, role: str = "") -> None:
        self.flow, self.role = flow, role
        self.group = run_group(flow, role)
        self.where = KTP(offset_map_topic(flow), 0)
        self.client = Consumer(flow.target_admin.confluent({
            "group.id": self.group, "enable.auto.commit": False, "log_level": 3}))

    def __enter__(self) -> NewestRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.client.close()

    def name(self, named: Named) -> bool:
        """Name `named` the flow's newest run; False when the principal may not (a warning
        names the right: the run goes on, as safe as before, only not preferred over an
        older run at the same time). A Ferry error when the target does not take the
        commit within the flow's retry budget."""
        marker = KTP(self.where.topic, self.where.partition, 0,
                     metadata=encode_marker(named, int(time.time() * 1000)))
        action = f"naming run {named.run} the newest of flow {self.flow.name} (group {self.group})"
        try:
            retrying(lambda: self.client.commit(offsets=[marker], asynchronous=False),
                     cluster=self.flow.target, action=action,
                     budget_s=self.flow.ferry.kafka_retry_seconds)
        except KafkaException as exc:
            error = kafka_error(exc, self.flow.target, action,
                                principal=self.flow.target_admin.principal,
                                needs={"GROUP": f"READ on GROUP {self.group}",
                                       "TOPIC": f"READ on TOPIC {self.where.topic}"})
            if exc.args and isinstance(exc.args[0], KafkaError) \
                    and exc.args[0].code() in DENIED:
                log.warning("%s; the run goes on, but another run of the flow at the same "
                            "time may stop it instead of yielding to it", error,
                            extra={"flow": self.flow.name})
                return False
            raise error from None
        return True

    def read(self) -> Named | None:
        """The run named newest; None when none is, or the target did not answer. A
        positions write named longer ago than its lease reads as done
        (`ferry.core.takeover.POSITIONS_LEASE_MS`)."""
        try:
            found = self.client.committed([self.where], timeout=READ_TIMEOUT_S)
        except KafkaException as exc:
            log.info("the newest run of flow %s was not read from group %s: %s",
                     self.flow.name, self.group, exc, extra={"flow": self.flow.name})
            return None
        return decode_marker(found[0].metadata, int(time.time() * 1000)) if found else None
