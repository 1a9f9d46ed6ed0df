"""Writing a flow's positions outside a copy (adapter): restored from the offset map, reset
by an operator, adopted from another mirror.

Each partition's position goes in one target transaction with its offset-map entries,
under the partition's writer id (`core/lanes.py`), the id every run of the flow writes it
under. The id is taken (`init_transactions`) before the position is read again, so a run
writing the partition meanwhile, even inside its first transaction, is fenced, and a
position that moved since the caller read it is left as it is (G11). Before each slot's id
is taken, the writes are named the flow's newest run, as a positions write under way, and
as done once the writer is closed (`ferry.core.takeover`): a run writing the flow meanwhile
yields to them rather than taking a slot back, and a continuous run names itself again
only once they are done, so it never takes a slot this writer still has to write.

A flow with `ferry.delivery=at_least_once` (a target without transactions) claims each
slot in Kafka instead (`ferry.kafka.claim`), before the position is read again: a run
writing the partition stops before its next position commit. The entries are written and
acknowledged, then the claim checked and the position committed as a plain group offset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import suppress
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.config.clients import RdValue
from ferry.core.internal import offset_map_topic, positions_group, transactional_id
from ferry.core.lanes import writer_of
from ferry.core.offsetmap import encode
from ferry.core.positions import (
    UNREAD,
    PositionMoved,
    PositionWrite,
    decode_position,
    encode_position,
)
from ferry.core.takeover import POSITIONS_LEASE_MS, Named
from ferry.errors import FerryError, TransientError
from ferry.kafka import stuck
from ferry.kafka.claim import WriterClaim
from ferry.kafka.delivery import CALL_TIMEOUT_S
from ferry.kafka.errors import kafka_error, raise_partition_error
from ferry.kafka.retry import retrying
from ferry.kafka.runs import NewestRun

log = logging.getLogger(__name__)


class PositionWriter:
    """Writes positions of `flow` (see the module); `close()` when done."""

    def __init__(self, flow: Flow, name: str = "positions") -> None:
        """`name`: what the writes are (`positions`, `adopt`): before each slot's id is
        taken, `<name>-<time>` is named the flow's newest run as a positions write under
        way, and as done on `close` (`ferry.core.takeover`), so a run writing the flow
        meanwhile yields to these writes instead of taking its slots back."""
        self.flow, self.owner = flow, ""
        self.named = False
        self._newest: NewestRun | None = None
        self._taken: set[str] = set()
        """The writer ids taken (their producers initialised, or claims taken)."""
        self.name = f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}"
        self.transactional = flow.ferry.delivery == "exactly_once"
        self.producers: dict[str, Producer] = {}
        """Writer id -> its producer, its transactions initialised."""
        self.claims: dict[str, WriterClaim] = {}
        """at_least_once: writer slot -> its claim, taken."""
        self.claim: WriterClaim | None = None
        self.reader = Consumer(flow.target_admin.confluent({
            "group.id": positions_group(flow), "enable.auto.commit": False,
            "isolation.level": "read_committed", "log_level": 3}))

    def write_all(self, writes: Iterable[PositionWrite]) -> list[PositionMoved]:
        """Write each partition's position; those that moved are returned, unwritten."""
        return [moved for w in writes if (moved := self.write(w)) is not None]

    def write(self, write: PositionWrite) -> PositionMoved | None:
        """Write one partition's position and entries in one transaction; None when written,
        else what was found instead of `write.expect` (nothing written)."""
        producer = self._writer(write.topic, write.partition)
        remote = self.flow.remote_topic(write.topic)
        if write.expect is not UNREAD:
            found, owner = self._position(remote, write.partition)
            if found != write.expect:
                return PositionMoved(write, found, owner)
        if not self.transactional:
            self._write_plain(producer, write, remote)
            return None
        self._call(producer.begin_transaction, "beginning a transaction")
        try:
            for entry in write.entries:
                key, value = encode(entry)
                while True:
                    try:
                        producer.produce(offset_map_topic(self.flow), value, key, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
            offsets = [KTP(remote, write.partition, write.position, metadata=encode_position(
                write.target_end, self.owner, write.source_id, adopted=write.adopted,
                target_id=write.target_id))]
            metadata = self.reader.consumer_group_metadata()
            what = f"committing the position of {remote}-{write.partition}"
            try:  # bounded: librdkafka may never return from it (kafka/stuck.py)
                self._call(lambda: stuck.send_offsets(producer, offsets, metadata, what), what)
            except stuck.ProducerStuck as exc:
                self.producers = {k: v for k, v in self.producers.items() if v is not producer}
                raise TransientError(
                    f"cluster {self.flow.target}: {exc} (its client lost the group "
                    "coordinator in a broker restart); nothing was committed: run it "
                    "again") from None
            self._call(lambda: producer.commit_transaction(CALL_TIMEOUT_S),
                       f"committing the position of {remote}-{write.partition}")
        except BaseException:
            # If this fails too, the broker aborts it at its timeout: nothing of it shows
            # (a stuck producer's transaction, the next init_transactions of its id).
            if producer in self.producers.values():
                with suppress(KafkaException):
                    producer.abort_transaction(CALL_TIMEOUT_S)
            raise
        return None

    def _write_plain(self, producer: Producer, write: PositionWrite, remote: str) -> None:
        """at_least_once: the entries acknowledged, then the claim checked and the position
        committed."""
        failed: list[str] = []
        for entry in write.entries:
            key, value = encode(entry)
            producer.produce(offset_map_topic(self.flow), value, key, partition=0,
                             on_delivery=lambda err, _m: failed.append(err.str()) if err else None)
        if producer.flush(CALL_TIMEOUT_S) or failed:
            raise TransientError(
                f"cluster {self.flow.target}: writing the offset-map entry of {remote}-"
                f"{write.partition} failed ({failed[0] if failed else 'unacknowledged'}); "
                "no position was committed")
        offsets = [KTP(remote, write.partition, write.position, metadata=encode_position(
            write.target_end, "", write.source_id, adopted=write.adopted,
            target_id=write.target_id))]
        if self.claim is not None:
            self.claim.check()
        self._call(lambda: self.reader.commit(offsets=offsets, asynchronous=False),
                   f"committing the position of {remote}-{write.partition}")

    def close(self) -> None:
        """Release the clients, and name these writes done (when they are still the flow's
        newest): a continuous run names itself again, and plans from what was written."""
        try:
            for producer in self.producers.values():
                producer.flush(CALL_TIMEOUT_S)
            for claim in self.claims.values():
                claim.close()
            self.reader.close()
        finally:
            self._done()

    def _name(self, done: bool = False) -> None:
        if self._newest is None:
            self._newest = NewestRun(self.flow)
        self._newest.name(Named(self.name, positions=True, done=done))
        self.named = True

    def _done(self) -> None:
        """Name these writes done, unless another run was named since (best effort: a
        writes' name not said done counts as done after its lease)."""
        newest, self._newest = self._newest, None
        if newest is None:
            return
        try:
            named = newest.read()
            if named is not None and named.run == self.name:
                newest.name(Named(self.name, positions=True, done=True))
        except FerryError as exc:
            log.warning("flow %s: positions written, but not named done (%s); runs of the "
                        "flow go on once its name's lease ends (%d s)", self.flow.name, exc,
                        POSITIONS_LEASE_MS // 1000, extra={"flow": self.flow.name})
        finally:
            newest.__exit__(None, None, None)

    def __enter__(self) -> PositionWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _writer(self, topic: str, partition: int) -> Producer:
        """The producer of the partition's writer id. Initialising it fences every other
        writer of the id (a lane of a run: its open transaction is aborted, its next commit
        fails)."""
        slot = transactional_id(self.flow, writer_of(topic, partition, self.flow.ferry.writers))
        if slot not in self._taken:  # named (again: its lease counts from here) first
            self._name()
            self._taken.add(slot)
        self.owner = slot if self.transactional else ""
        if not self.transactional:
            self.claim = self.claims.get(slot)
            if self.claim is None:
                self.claim = self.claims[slot] = WriterClaim(self.flow, slot)
                self.claim.take()
        producer = self.producers.get(self.owner)
        if producer is None:
            settings: dict[str, RdValue] = {
                "enable.idempotence": True, "acks": "all", "log_level": 3,
                "allow.auto.create.topics": False}
            if self.transactional:
                settings.update({"transactional.id": self.owner,
                                 "transaction.timeout.ms": 300_000})
            producer = Producer(self.flow.producer.confluent(settings))
            if self.transactional:
                self._call(lambda: producer.init_transactions(CALL_TIMEOUT_S),
                           f"initialising the transactions of {self.owner}")
            self.producers[self.owner] = producer
        return producer

    def _position(self, remote: str, partition: int) -> tuple[int | None, str]:
        """(the committed position or None, the id that committed it). A partition answered
        with an error of its own is an error, never "no position" (its offset then reads
        -1001, and a write expecting none would go over the position committed there);
        a transient one is asked again within the retry budget."""
        found: list[KTP] = []

        def read() -> None:
            found.clear()
            found.extend(self.reader.committed([KTP(remote, partition)],
                                               timeout=CALL_TIMEOUT_S))
            raise_partition_error(found)

        self._call(read, f"reading the position of {remote}-{partition}")
        (tp,) = found
        return (tp.offset if tp.offset >= 0 else None), decode_position(tp.metadata).owner

    def _call(self, call: Callable[[], object], action: str) -> None:
        try:
            retrying(call, cluster=self.flow.target, action=action,
                     budget_s=self.flow.ferry.kafka_retry_seconds)
        except KafkaException as exc:
            raise kafka_error(exc, self.flow.target, action,
                              principal=self.flow.producer.principal,
                              needs={"TRANSACTIONAL_ID": f"WRITE on TRANSACTIONAL_ID {self.owner}",
                                     "GROUP": f"READ on GROUP {positions_group(self.flow)}",
                                     "TOPIC": f"WRITE on TOPIC {offset_map_topic(self.flow)}"}
                              ) from None
