"""Copy one lane's exact source ranges into the target, exactly once (adapter).

One `Lane` = the writer of one writer slot (`core/lanes.py`): one transactional producer
whose `transactional.id` is the slot's, a function of the flow and the partitions alone,
and one assigned consumer. The contract:

- `init_transactions` first: it fences every other writer of the slot (a zombie task, a
  concurrent run with another lane count, a backfill into the flow's topic, an adoption),
  even one still inside its first transaction, and aborts its open transaction.
- Then the lane reads its committed positions (the positions group's offsets on the
  remote partitions, stable reads only), so a retried task resumes where the last
  committed transaction ended instead of copying twice. It reads them again after every
  later initialisation: a lane never writes from a position read before it took the id.
- Each transaction carries the records, the offset-map entries of what it covered and the
  new positions; all become visible together or not at all (G1, G4). Transactions are
  bounded by `ferry.transaction.max.records` and `.max.seconds`.
- A partition is done at the first of: a record at or past `end - 1` (records at or past
  `end` are dropped), its position reaching `end`, or end-of-partition at or past `end`.
  Ranges end at the LSO, so one of these always happens (markers, compaction, aborts).
- Target offsets come from delivery reports on only the first and last record per
  partition and transaction; their distance must equal the record count (one writer per
  partition), or the transaction is refused (SegmentError).
- `ferry.delivery=at_least_once` (targets without transactions): the same loop with an
  idempotent producer and no transactions; the slot is claimed in Kafka instead of by
  `init_transactions` (`kafka/claim.py`); `kafka/delivery.py` holds what each mode
  decides (fencing, batch commit, refusals, duplicates counted).
- A record the target refuses fails the lane with topic, partition and offset named: the
  failed transaction is aborted and re-run once by a fresh producer that sends one record
  per batch with a report per record (brokers refuse whole batches), which names it.
- A batch the target does not acknowledge in time (its records time out: a partition
  without a leader, too few in-sync replicas) is no refusal: it is aborted and copied
  again by a fresh producer of the id, with backoff, until the target takes it or
  `ferry.kafka.retry.seconds` have passed since the first such batch; then the lane fails
  as transient, naming the record and what to check.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.config.clients import RdValue
from ferry.core.internal import offset_map_topic, positions_group, reader_group, transactional_id
from ferry.core.lanes import writer_of
from ferry.core.offsetmap import MapEntry, SegmentError, encode, split_entry
from ferry.core.planner import Range
from ferry.core.positions import decode_position, encode_position
from ferry.core.tables import RangeOutcome, RangeResult
from ferry.core.takeover import Named, newer_run, yielded
from ferry.errors import FerryError, TerminalError, TransientError, WriterTaken
from ferry.kafka.claim import WriterClaim
from ferry.kafka.delivery import CALL_TIMEOUT_S, Refused, RefusedKept, delivery_for
from ferry.kafka.errors import raise_partition_error
from ferry.kafka.kept import KeptClients
from ferry.kafka.lane_errors import LaneErrors, is_fenced, refused, unanswered
from ferry.kafka.lane_state import Part, Refusal
from ferry.kafka.limits import PER_CALL, chunks
from ferry.kafka.metadata import learn_partition, unknown_partition
from ferry.kafka.records import SCAN_FETCH_WAIT_MS
from ferry.kafka.retry import backoff, retrying, transient
from ferry.kafka.runs import ReadsNewest
from ferry.kafka.stuck import ProducerStuck
from ferry.kafka.watermarks import watermarks

__all__ = ["Lane", "LaneResult"]

log = logging.getLogger(__name__)

BATCH = 10_000
POLL_S = 0.05
"""consume() waits out its whole timeout unless the batch fills: short, so the last batch of
a range (and a small range) does not wait for records that will not come."""
STALL_S = 120.0
ABORT_UNANSWERED_S = 10.0
"""How long a batch the target left unacknowledged waits for its abort (`_wait_out`)
before the next producer of the id takes the abort over."""
MAX_REPLACED = 3
PRODUCER_DEFAULTS: dict[str, str | int] = {"linger.ms": 20, "batch.size": 1_000_000,
                                           "compression.type": "none"}


class FatalError:
    """A producer's error callback: keeps its first fatal error (librdkafka's produce and
    delivery reports say only "Fatal error"; the callback says why)."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if self.error is None and (err.fatal() or is_fenced(err)):
            self.error = err


@dataclass
class LaneResult:
    lane: int
    ranges: list[RangeResult]
    transactions: int = 0
    seconds: float = 0.0

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)


def _offset(message: Message) -> int:
    """A delivered or consumed record's offset (never None for those)."""
    offset = message.offset()
    assert offset is not None
    return offset


class Lane:
    """Copies `ranges` (all on this lane) for `flow`; use `run()` once."""

    log = log

    def __init__(self, flow: Flow, ranges: Sequence[Range], run_id: str,
                 progress: Callable[[int, int], None] | None = None, role: str = "",
                 kept: KeptClients | None = None, newest: ReadsNewest | None = None,
                 owner: Named | None = None) -> None:
        """The writer of `ranges`, which must all be of one writer slot (`by_writer`): its
        transactional id is that slot's, whoever runs it (G11). `kept`: the slot's clients
        kept from an earlier cycle of a continuous loop (`ferry.kafka.kept`), used and kept
        again when this run succeeds, dropped when it raises. `newest`, `owner`: where the
        flow's newest run is read, and the run this writer's is, as it named itself
        (`ferry.core.takeover`): before initialising its id again mid-copy (a stuck or
        unanswered producer replaced, a refusal re-run), the writer reads the newest run
        and, when another is to go on, stops instead (`WriterTaken`), so a writer that is
        to yield never fences the one it yields to. Without them it initialises again
        whoever is named (Kafka's fencing still keeps the copy exact)."""
        slots = {writer_of(r.topic, r.partition, flow.ferry.writers) for r in ranges}
        if len(slots) > 1:
            raise ValueError(f"ranges of writer slots {sorted(slots)} given to one writer; "
                             "split them with ferry.core.lanes.by_writer")
        self.flow, self.lane, self.run_id = flow, min(slots, default=0), run_id
        self.started = time.monotonic()
        self.started_ms = int(time.time() * 1000)
        """When the lane started, as a clock time: its entries carry it (`MapEntry`)."""
        self.txn_id = transactional_id(flow, self.lane, role)
        self.delivery = delivery_for(flow)
        self.producer: Producer | None = None
        self.in_transaction = False
        self.progress = progress
        self.map_topic = offset_map_topic(flow)
        self.parts = self._parts(ranges)
        self.explain = LaneErrors(flow, self.lane, self.txn_id, self.parts.values())
        self.results = [r for p in self.parts.values() for r in p.ranges]
        self.transactions = 0
        self.total = sum(p.end - p.start for p in self.parts.values())
        self.copied = 0
        self.diagnose = False
        self.refused: Refusal | None = None
        """The first refusal (or record left unacknowledged) the target reported."""
        self.unanswered_since: float | None = None
        """When the first of the batches the target left unacknowledged since the last
        commit failed (`_wait_out`); None when the last batch committed."""
        self.unanswered_attempts = 0
        self.fenced: str | None = None
        """A delivery report saying a newer writer took this writer's transactional id (or
        that the producer hit a fatal error: `fatal` says which)."""
        self.fatal = FatalError()
        self.reader: Consumer | None = None
        self.replaced = 0
        """Producers replaced because a call never returned (`_replace_stuck`)."""
        self.claim: WriterClaim | None = None
        """at_least_once: the slot's claim in Kafka (`ferry.kafka.claim`), once taken."""
        if kept is not None and (kept.txn_id != self.txn_id
                                 or self.delivery.name != "exactly_once"):
            raise ValueError(f"clients kept for {kept.txn_id} given to the writer of "
                             f"{self.txn_id} ({self.delivery.name})")
        self.kept = kept
        self.newest, self.owner = newest, owner or Named(run_id)
        self.moved_back: set[tuple[str, int]] = set()
        """Partitions whose position moved back under this writer (`_moved_back`)."""
        self.learned: set[str] = set()
        """Topics whose metadata this writer's producer asked for (`learn_targets`)."""

    def _parts(self, ranges: Sequence[Range]) -> dict[tuple[str, int], Part]:
        parts: dict[tuple[str, int], Part] = {}
        for r in sorted(ranges):
            key = (r.topic, r.partition)
            result = RangeResult(r.topic, r.partition, r.start, r.end)
            if key in parts:
                part = parts[key]
                if r.start != part.end:
                    raise ValueError(f"ranges of {r.topic}-{r.partition} are not adjacent")
                part.end = r.end
                part.ranges.append(result)
            else:
                remote = r.target_topic or self.flow.remote_topic(r.topic)
                parts[key] = Part(r.topic, r.partition, remote,
                                  r.start, r.end, [result], expect=r.expect,
                                  source_id=r.source_id, target_id=r.target_id,
                                  covered=r.start, skip_from=r.skip_from)
        return parts

    # -- clients ------------------------------------------------------------------------

    def _producer(self, diagnose: bool = False) -> Producer:
        overrides: dict[str, RdValue] = {k: v for k, v in PRODUCER_DEFAULTS.items()
                                         if k not in self.flow.producer.settings}
        if diagnose:  # one record per request, so a refusal names its record
            overrides.update({"linger.ms": 0, "batch.num.messages": 1})
        # Never create a topic by writing to it: a deleted offset-map (or remote) topic
        # would come back with the brokers' defaults (a 7-day retention: a map that
        # forgets). Only Ferry's sync and plan create them, with their configs.
        overrides.update({"enable.idempotence": True, "acks": "all", "log_level": 3,
                          "allow.auto.create.topics": False})
        overrides.update(self.delivery.producer_settings(self.flow, self.txn_id))
        conf: dict[str, Any] = self.flow.producer.confluent(overrides)
        self.fatal = FatalError()
        conf["error_cb"] = self.fatal  # not a bound method: no cycle keeps the client
        return Producer(conf)

    def lost_id(self, producer: Producer, err: KafkaError) -> bool:
        """Whether a producer error means a newer writer took this writer's id: a fencing
        error, or librdkafka's generic fatal error whose cause (kept by the error
        callback, served here) is one."""
        if is_fenced(err):
            return True
        if err.code() != KafkaError._FATAL:
            return False
        self.serve_errors(producer)
        return self.fatal.error is not None and is_fenced(self.fatal.error)

    def serve_errors(self, producer: Producer) -> None:
        """Serve the producer's callbacks, so `fatal` knows a fatal error's cause. A fatal
        producer may raise that error from the poll itself: it is kept the same way."""
        try:
            producer.poll(0)
        except KafkaException as exc:
            self.fatal(exc.args[0])
        except SystemError:  # a callback failed inside librdkafka's poll: nothing to add
            pass

    def _consumer(self) -> Consumer:
        # A lane reads ranges that are there: a range ending at a transaction marker ends
        # with the partition EOF, whose fetch would otherwise wait the default 500 ms.
        wait = {} if "fetch.wait.max.ms" in self.flow.consumer.settings else {
            "fetch.wait.max.ms": SCAN_FETCH_WAIT_MS}
        conf = self.flow.consumer.confluent({
            "group.id": reader_group(self.flow, "reader"), "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": True,
            "auto.offset.reset": "error", "log_level": 3, **wait})
        return Consumer(conf)

    def _new_consumer(self) -> Consumer:
        """A source consumer; one that will be kept first learns every topic of the flow
        (`KeptClients.flow_topics`)."""
        consumer = self._consumer()
        if self.kept is not None and self.kept.flow_topics:
            self._learn_topics(consumer, set(self.kept.flow_topics))
        return consumer

    def _target_reader(self) -> Consumer:
        """A target consumer in the positions group: its metadata goes with each commit."""
        conf = self.flow.target_admin.confluent({
            "group.id": positions_group(self.flow), "enable.auto.commit": False,
            "isolation.level": "read_committed", "log_level": 3})
        return Consumer(conf)

    # -- the run ------------------------------------------------------------------------

    def run(self) -> LaneResult:
        started = self.started = time.monotonic()
        self.started_ms = int(time.time() * 1000)
        if not self.parts:
            return LaneResult(self.lane, [], 0, 0.0)
        kept = self.kept
        reader = self.reader = (kept and kept.reader) or self._target_reader()
        consumer = (kept and kept.consumer) or self._new_consumer()
        producer: Producer | None = None
        failed = True
        try:
            producer = self._kept_producer() or self._start_producer()
            self.resume_from_committed(reader)
            self.delivery.before_copy(self, reader)
            metadata = reader.consumer_group_metadata()
            self._copy(producer, consumer, metadata)
        except (TerminalError, TransientError) as exc:
            for result in self.results:
                if result.outcome == RangeOutcome.PENDING:
                    result.outcome, result.error = RangeOutcome.FAILED, str(exc)
            producer = self.producer or producer
            if producer is not None:
                self.delivery.abort_open(self, producer)
            raise
        else:
            failed = False
        finally:
            if kept is None:
                consumer.close()
                reader.close()
            else:
                self._keep(kept, consumer, reader, failed)
            if self.claim is not None:
                self.claim.close()
            self._time_results()
        return LaneResult(self.lane, self.results, self.transactions,
                          time.monotonic() - started)

    def _time_results(self) -> None:
        """Ranges without a time of their own (skipped, failed, or copied by a previous
        owner) get their lane's time so far."""
        elapsed = round(time.monotonic() - self.started, 3)
        for result in self.results:
            if not result.seconds:
                result.seconds = elapsed

    def _start_producer(self, diagnose: bool = False) -> Producer:
        producer = self._producer(diagnose)
        self.producer = producer
        self.in_transaction = False
        self.delivery.start(self, producer)
        if self.kept is not None and not diagnose:
            self.kept.take_producer(producer, self.fatal, set(self.learned))
        return producer

    def _kept_producer(self) -> Producer | None:
        """The producer an earlier cycle kept, its transactions initialised (None: none).
        Topics it has not written yet are asked for first (`learn_targets`)."""
        kept = self.kept
        if kept is None or kept.producer is None:
            return None
        producer = self.producer = kept.producer
        self.fatal, self.in_transaction = kept.fatal, False
        if {p.remote for p in self.parts.values()} - kept.topics:
            self.learn_targets(producer, skip=kept.topics)
            kept.topics |= self.learned
        return producer

    def _keep(self, kept: KeptClients, consumer: Consumer, reader: Consumer,
              failed: bool) -> None:
        """After the run: keep the clients for the slot's next writer, or, when the run
        raised or ended on a one-record-per-request producer, drop them all."""
        kept.consumer, kept.reader = consumer, reader
        if failed or self.diagnose or self.producer is not kept.producer \
                or not self._unassigned(consumer):
            kept.discard()

    def _unassigned(self, consumer: Consumer) -> bool:
        """Leave `consumer` with nothing assigned or paused, for the next run to assign its
        own; False when it cannot be (it is then not kept)."""
        try:
            paused = [KTP(p.topic, p.partition) for p in self.parts.values() if p.paused]
            if paused:
                consumer.resume(paused)
            consumer.unassign()
            return True
        except KafkaException as exc:
            self.log.info("writer %s: its consumer is not kept (%s)", self.lane, exc,
                          extra={"flow": self.flow.name, "lane": self.lane})
            return False

    # -- calls --------------------------------------------------------------------------

    def call(self, call: Callable[[], Any], cluster: str, action: str) -> Any:
        """`call()`, transient broker states (a coordinator loading, a leader moving) waited
        out within `ferry.kafka.retry.seconds`; a failure becomes a Ferry error naming the
        cluster, the action and, when access was denied, the right."""
        try:
            return self.retrying(call, cluster, action)
        except KafkaException as exc:
            raise self.kafka_error(exc, cluster, action) from None

    def kafka_error(self, exc: KafkaException, cluster: str, action: str) -> FerryError:
        """`exc` as a Ferry error: on the target, a producer that lost its id to a newer
        writer is `fenced` (never a refusal to re-run); else `LaneErrors.kafka`."""
        if cluster == self.flow.target and self.producer is not None \
                and self.lost_id(self.producer, exc.args[0]):
            return WriterTaken(self.explain.fenced(exc.args[0].str()))
        return self.explain.kafka(exc, cluster, action)

    def retrying(self, call: Callable[[], Any], cluster: str, action: str) -> Any:
        """`call()` with transient states waited out; other Kafka errors raised as they are."""
        return retrying(call, cluster=cluster, action=action,
                        budget_s=self.flow.ferry.kafka_retry_seconds)

    def remote_end(self, reader: Consumer, part: Part) -> int:
        """The remote partition's last stable offset (an answer that is no offset is asked
        again: `ferry.kafka.watermarks`). A partition the reader's metadata does not list
        yet (grown since it learnt the topic) is asked for first."""

        def read() -> tuple[int, int]:
            try:
                return watermarks(reader, part.remote, part.partition, CALL_TIMEOUT_S)
            except KafkaException as exc:
                if not unknown_partition(exc) or not self.learn_partition(reader, part):
                    raise
            return watermarks(reader, part.remote, part.partition, CALL_TIMEOUT_S)

        _, end = self.call(read, self.flow.target,
                           f"reading the end of {part.remote}-{part.partition}")
        return int(end)

    def learn_partition(self, client: Consumer | Producer, part: Part) -> bool:
        """Have `client` learn the remote partition its metadata does not list yet
        (`ferry.kafka.metadata`): False when it is not listed within the retry budget."""
        extra = {"flow": self.flow.name, "lane": self.lane, "topic": part.remote,
                 "partition": part.partition}
        log.info("writer %s: %s-%s is new to its %s (the topic grew since it learnt it); "
                 "asking for the topic's metadata again", self.lane, part.remote,
                 part.partition, type(client).__name__.lower(), extra=extra)
        if learn_partition(client, part.remote, part.partition,
                           self.flow.ferry.kafka_retry_seconds):
            return True
        log.warning("writer %s: cluster %s lists no partition %s of %s after %gs "
                    "(ferry.kafka.retry.seconds)", self.lane, self.flow.target,
                    part.partition, part.remote, self.flow.ferry.kafka_retry_seconds,
                    extra=extra)
        return False

    def flush(self, producer: Producer, until_refused: bool = True,
              seconds: float = CALL_TIMEOUT_S) -> int:
        """Wait for delivery reports (at most `seconds`); the count still unreported.
        `until_refused`: stop at the first refusal (after one, a transaction must abort and
        the records queued behind it are never sent)."""
        deadline = time.monotonic() + seconds
        remaining = self._flush_once(producer)
        while (remaining and not (until_refused and self.refused is not None)
               and time.monotonic() < deadline):
            remaining = self._flush_once(producer)
        return remaining

    def _flush_once(self, producer: Producer) -> int:
        """One `flush` slice. A producer another owner fenced meanwhile has a fatal error,
        and confluent-kafka's flush then fails without an exception of its own (SystemError:
        "returned NULL without setting an exception"): that is this lane losing the
        partition to a newer owner, not a crash."""
        try:
            return int(producer.flush(0.5))
        except (SystemError, KafkaException) as exc:
            self.serve_errors(producer)  # the error callback keeps the cause
            cause = self.fatal.error
            text = cause.str() if cause is not None else (
                exc.args[0].str() if isinstance(exc, KafkaException) else "producer fenced")
            raise WriterTaken(self.explain.fenced(text)) from None

    # -- positions ----------------------------------------------------------------------

    def resume_from_committed(self, reader: Consumer) -> None:
        """Read the committed positions: each partition resumes where the last committed
        batch ended; ranges wholly before it are skipped. A position committed for an
        earlier incarnation of the remote topic (`PositionMeta.stale_for`) is none: the
        records it counts went with the deleted topic."""
        keys = list(self.parts)
        for key, tp in zip(keys, self._committed(reader, keys), strict=True):
            part = self.parts[key]
            recorded = decode_position(tp.metadata) if tp.offset >= 0 else None
            if recorded is not None and recorded.stale_for(part.target_id):
                self.log.warning("%s-%s: the position %d was committed for remote topic ID "
                                 "%s, not %s (the remote topic was created again); not "
                                 "resumed from", part.remote, part.partition, tp.offset,
                                 recorded.target_id, part.target_id,
                                 extra={"flow": self.flow.name, "topic": part.topic,
                                        "partition": part.partition})
                recorded = None
            if recorded is None:
                if part.expect is not None:
                    raise TransientError(
                        f"flow {self.flow.name}: {part.topic}-{part.partition}: the plan "
                        f"expects the position {part.expect} committed on {part.remote}, "
                        "but there is none: an earlier range (a backfill chunk) is not "
                        "committed yet, or Kafka expired the position. Nothing was copied, "
                        "so nothing is doubled or skipped; run the earlier chunk first, or "
                        "plan again (a run restores an expired position from the offset map)")
                continue
            part.owner, part.target_end = recorded.owner, recorded.target_end
            self.delivery.found_position(self, reader, part)
            if part.skip_from is not None and tp.offset == part.skip_from:
                # An accepted gap: the first entry covers it, with no records.
                part.covered = part.skip_from
                part.txn.touched = True
                continue
            if tp.offset < part.start:
                if part.expect is not None:
                    raise TerminalError(
                        f"flow {self.flow.name}: {part.topic}-{part.partition} is committed "
                        f"at {tp.offset} but the plan starts at {part.start}; re-plan the run")
                self._moved_back(part, tp.offset, part.start)
                continue
            part.covered = min(tp.offset, part.end)
            for result in part.ranges:
                if tp.offset >= result.end:
                    result.outcome = RangeOutcome.SKIPPED
            if tp.offset >= part.end and part.start < part.end:
                part.done = True

    # -- the copy loop ------------------------------------------------------------------

    def _learn_topics(self, consumer: Consumer, topics: set[str]) -> None:
        """Ask for the topics' metadata before assigning them. A new client that is assigned
        a topic it has no metadata for fetches nothing until its periodic refresh of unknown
        topics (once a second in librdkafka): about half a second lost in every lane. On an
        error the refresh still comes; nothing is lost but that time."""
        for topic in sorted(topics):
            try:
                consumer.list_topics(topic, timeout=CALL_TIMEOUT_S)
            except KafkaException as exc:
                log.debug("metadata of %s not read ahead: %s", topic, exc,
                          extra={"flow": self.flow.name, "lane": self.lane})

    def learn_targets(self, producer: Producer, skip: Collection[str] = ()) -> None:
        """Ask for the metadata of the topics `producer` writes (`_targets`: the remote
        topics, the offset-map topic) before its first transactional call. A new producer
        has no broker connection yet: librdkafka's first search for the transaction
        coordinator then finds no broker up and tries again half a second later, and its
        first records to a topic it has no metadata for wait for that. Asked first,
        `init_transactions` takes tens of milliseconds, not about half a second in every
        other lane. On an error nothing is lost but that time. An offset-map topic that is
        not there fails the writer at once (`_require_map_topic`). Topics in `skip` (a kept
        producer knows them) are not asked for; those found go to `learned`."""
        for topic in sorted(self._targets()):
            if topic in skip:
                continue
            try:
                found = producer.list_topics(topic, timeout=CALL_TIMEOUT_S).topics.get(topic)
            except KafkaException as exc:
                log.debug("metadata of %s not read ahead: %s", topic, exc,
                          extra={"flow": self.flow.name, "lane": self.lane})
                continue
            if topic == self.map_topic and _unknown(found):
                self._require_map_topic(producer)
            elif not _unknown(found):
                self.learned.add(topic)

    def _targets(self) -> set[str]:
        """The topics this writer's producer writes: its remote topics and the offset-map
        topic, and, for a producer that will be kept, the remote topics of every topic of
        the flow (`KeptClients.flow_topics`)."""
        topics = {p.remote for p in self.parts.values()} | {self.map_topic}
        if self.kept is not None:
            topics |= {self.flow.remote_topic(t) for t in self.kept.flow_topics}
        return topics

    def _require_map_topic(self, producer: Producer) -> None:
        """Fail at once, copying nothing, when the offset-map topic is not on the target:
        its entries would have nowhere to go, and each batch would wait for the topic until
        its delivery timed out (30 s, then again on retry). A topic the plan created moments
        ago may be unknown to this broker for a moment: asked again for a few seconds."""
        deadline = time.monotonic() + MAP_TOPIC_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                found = producer.list_topics(self.map_topic, timeout=CALL_TIMEOUT_S)
            except KafkaException:
                return  # no answer: the writes report what is wrong
            if not _unknown(found.topics.get(self.map_topic)):
                return
        raise TerminalError(
            f"flow {self.flow.name} writer {self.lane}: the offset-map topic {self.map_topic} "
            f"is not on cluster {self.flow.target} (deleted since the cycle planned?); nothing "
            "was copied, as the offset map would have nowhere to go. The next cycle of the "
            "flow creates it again, kept forever (retention.ms=-1)")

    def _copy(self, producer: Producer, consumer: Consumer, metadata: Any) -> None:
        if self.progress is not None:
            self.progress(0, self.total)
        for part in self.parts.values():  # stall time counts from here
            part.moved()
        active = [p for p in self.parts.values() if not p.done and p.read_from < p.end]
        markers = [p for p in self.parts.values() if not p.done and p.start == p.end]
        if active:
            self._learn_topics(consumer, {p.topic for p in active})
            consumer.assign([KTP(p.topic, p.partition, p.read_from) for p in active])
        while markers:  # new (or empty) partitions: record where copying starts
            for part in markers:
                part.txn.touched, part.done = True, True
            try:
                self._batch(producer, consumer, metadata, [])
                markers = []
            except ProducerStuck as exc:
                producer = self._replace_stuck(consumer, markers, exc)
            except Refused as exc:
                if exc.unanswered:
                    producer = self._wait_out(producer, consumer, [], exc)
                    continue
                self._abort(producer, consumer, [])
                names = ", ".join(f"{p.topic}-{p.partition}" for p in markers[:5]) + (
                    f" and {len(markers) - 5} more" if len(markers) > 5 else "")
                raise TransientError(f"flow {self.flow.name} lane {self.lane}: recording the "
                                     f"start positions of {names} in {self.map_topic} "
                                     f"failed: {exc}") from None
        while any(not p.done for p in active):
            try:
                try:
                    self._batch(producer, consumer, metadata, active)
                except Refused as exc:
                    self.delivery.after_refused_batch(self, producer, metadata, exc)
            except ProducerStuck as exc:
                producer = self._replace_stuck(consumer, active, exc)
                continue
            except RefusedKept as exc:
                if self.diagnose:
                    raise TerminalError(str(exc)) from None
                # Brokers refuse whole batches: from the first refused record on, copy one
                # record per request, each reported, to name the one refused.
                self.diagnose, self.refused = True, None
                producer = self._restart(consumer, active, diagnose=True)
                continue
            except Refused as exc:
                if exc.unanswered:
                    producer = self._wait_out(producer, consumer, active, exc)
                    continue
                self._abort(producer, consumer, active)
                if self.diagnose:
                    if self.refused is not None:
                        raise TerminalError(self.refused.text) from None
                    raise TransientError(f"flow {self.flow.name} lane {self.lane}: the "
                                         f"transaction failed twice: {exc}") from None
                # Re-run the same records one per request, each reported, to name a refusal.
                self.diagnose, self.refused = True, None
                producer = self._restart(consumer, active, diagnose=True)
                continue
            if self.diagnose:  # the re-run went through: back to batching
                self.diagnose = False
                producer = self._restart(consumer, active)

    def _wait_out(self, producer: Producer, consumer: Consumer, active: list[Part],
                  exc: Exception) -> Producer:
        """The batch failed because the target did not acknowledge it in time: a state
        that passes, such as a partition between leaders or short of in-sync replicas in a
        broker's restart. Its transaction is aborted; after a backoff, a new producer of
        the same id (fresh connections and metadata) copies it again from the committed
        positions. Once `ferry.kafka.retry.seconds` have passed since the first such
        failure since the last commit, the lane fails as transient. exactly_once only
        (`Refused.unanswered`): an at_least_once batch has no transaction to abort, and
        what it wrote before timing out could not be counted as duplicates.

        The abort may not finish: its markers go to the same partitions, which take no
        write until enough replicas are in sync. Then the new producer's
        `init_transactions` completes it (Kafka answers it CONCURRENT_TRANSACTIONS until
        the abort is written, a transient state it waits out) before anything is sent."""
        try:
            self.delivery.abort(self, producer, seconds=ABORT_UNANSWERED_S)
        except TransientError as failed:
            self.log.warning("writer %s: %s; the next producer of its id aborts it",
                             self.lane, failed,
                             extra={"flow": self.flow.name, "lane": self.lane})
        for part in active:
            part.aborted()
        now = time.monotonic()
        if self.unanswered_since is None:
            self.unanswered_since, self.unanswered_attempts = now, 0
        self.unanswered_attempts += 1
        waited, budget = now - self.unanswered_since, self.flow.ferry.kafka_retry_seconds
        if waited >= budget:
            raise TransientError(self.explain.unanswered_too_long(
                str(exc), waited, self.unanswered_attempts)) from None
        self.log.warning("writer %s: %s; a transient state, copying the batch again from "
                         "the committed positions with a new producer (attempt %d, %.0fs of "
                         "ferry.kafka.retry.seconds=%g left)", self.lane, exc,
                         self.unanswered_attempts, budget - waited, budget,
                         extra={"flow": self.flow.name, "lane": self.lane})
        time.sleep(backoff(self.unanswered_attempts, random.random()))
        self.refused = None
        return self._restart(consumer, [p for p in active if p.start < p.end],
                             diagnose=self.diagnose)

    def _replace_stuck(self, consumer: Consumer, parts: list[Part],
                       exc: ProducerStuck) -> Producer:
        """The producer is stuck inside a call (`kafka/stuck.py`): a new one of the same id
        (whose `init_transactions` fences it and aborts its transaction), and the batch
        read again from the committed positions. At most `MAX_REPLACED` times per writer."""
        self.replaced += 1
        if self.replaced > MAX_REPLACED:
            raise TransientError(
                f"flow {self.flow.name} writer {self.lane}: {exc}, {self.replaced} times; "
                f"is the positions group's coordinator reachable on {self.flow.target}? "
                "Nothing past the last commit was kept; the next run resumes there") from None
        self.log.warning("flow %s writer %s: %s (a client that lost the group coordinator in "
                         "a broker restart); replacing its producer and copying the batch "
                         "again from the committed positions", self.flow.name, self.lane, exc,
                         extra={"flow": self.flow.name, "lane": self.lane})
        for part in parts:
            part.aborted()
        return self._restart(consumer, [p for p in parts if p.start < p.end])

    def _restart(self, consumer: Consumer, active: list[Part], diagnose: bool = False
                 ) -> Producer:
        """A new producer of the same transactional id. Its `init_transactions` fences
        whoever holds the id now (a newer run may have taken it since this one's start and
        committed), so the positions are read again before anything more is read or sent:
        every initialisation is followed by a read of the positions (G11). Another run
        named the flow's newest since (`newest`) is yielded to first: `WriterTaken`."""
        self._yield_to_newer()
        producer = self._start_producer(diagnose)
        if self.reader is not None:
            self._catch_up(self.reader)
        self._rewind(consumer, active)
        left = [p for p in active if (p.topic, p.partition) in self.moved_back]
        for part in left:  # `_rewind` reopened it: read it no further
            part.done = True
            if not part.paused:
                consumer.pause([KTP(part.topic, part.partition)])
                part.paused = True
        return producer

    def _yield_to_newer(self) -> None:
        """Raise `WriterTaken` when another run (or a later cycle of this one) is named the
        flow's newest: its writers write the slot now, and this one is not to fence them."""
        if self.newest is None:
            return
        newer = newer_run(self.newest.read(), self.owner)
        if newer is not None:
            raise WriterTaken(f"flow {self.flow.name} writer {self.lane}: not initialising "
                              f"{self.txn_id} again: {yielded(self.flow.name, newer)}")

    def _catch_up(self, reader: Consumer) -> None:
        """Positions read again after a re-initialisation: a partition another writer moved
        resumes where it left it; ranges wholly before that are that writer's (skipped). A
        partition moved back (`_moved_back`) is left as written."""
        keys = list(self.parts)
        for key, tp in zip(keys, self._committed(reader, keys), strict=True):
            part = self.parts[key]
            if tp.offset < 0 or part.covered >= part.end \
                    or decode_position(tp.metadata).stale_for(part.target_id):
                continue
            if tp.offset < part.covered:
                self._moved_back(part, tp.offset, part.covered)
                continue
            if tp.offset == part.covered:
                continue
            self.log.warning("%s-%s: another writer committed up to %d meanwhile; resuming "
                             "there", part.topic, part.partition, tp.offset,
                             extra={"flow": self.flow.name, "topic": part.topic,
                                    "partition": part.partition})
            part.covered = min(tp.offset, part.end)
            part.target_end = decode_position(tp.metadata).target_end
            for result in part.ranges:
                if result.outcome == RangeOutcome.PENDING and tp.offset >= result.end:
                    result.outcome = RangeOutcome.SKIPPED

    def _moved_back(self, part: Part, position: int, expected: int) -> None:
        """`part`'s committed position is `position`, below `expected`, where this writer
        was to go on from: only positions written outside a copy move back (a reset, an
        adoption), after this run planned, and the writer took the id after they were
        written. The partition is left as written: its unfinished ranges are handed over
        (no failure) in one line, and the next run plans from the position."""
        why = (f"flow {self.flow.name}: {part.topic}-{part.partition}: its position was moved "
               f"back to {position} (positions written outside a copy: a reset or an "
               f"adoption) after this run planned from {expected}; left as written, for the "
               "next run to plan from")
        self.log.warning("%s", why, extra={"flow": self.flow.name, "topic": part.topic,
                                           "partition": part.partition})
        part.done = True
        self.moved_back.add((part.topic, part.partition))
        for result in part.ranges:
            if result.outcome == RangeOutcome.PENDING:
                result.outcome, result.error = RangeOutcome.HANDED_OVER, why

    def _committed(self, reader: Consumer, keys: list[tuple[str, int]]) -> list[KTP]:
        """The committed positions of the parts `keys` (a partition's error is never taken
        for "no position")."""
        request = [KTP(self.parts[k].remote, k[1]) for k in keys]

        def read() -> list[KTP]:
            answer = [tp for part in chunks(request, PER_CALL)
                      for tp in reader.committed(part, timeout=CALL_TIMEOUT_S)]
            raise_partition_error(answer)
            return answer

        return list(self.call(read, self.flow.target, "reading committed positions"))

    def _rewind(self, consumer: Consumer, active: list[Part]) -> None:
        """Read each unfinished partition again from what is committed."""
        for part in active:
            part.done = part.covered >= part.end
            self._seek_committed(consumer, part)

    def _abort(self, producer: Producer, consumer: Consumer, active: list[Part]) -> None:
        self.delivery.abort(self, producer)
        for part in active:
            part.aborted()
            self._seek_committed(consumer, part)

    def _seek_committed(self, consumer: Consumer, part: Part) -> None:
        if part.done:
            return
        if part.paused:
            consumer.resume([KTP(part.topic, part.partition)])
            part.paused = False
        consumer.seek(KTP(part.topic, part.partition, part.read_from))

    def _batch(self, producer: Producer, consumer: Consumer, metadata: Any,
               active: list[Part]) -> None:
        """One batch (a transaction, exactly_once): read and send until every partition is
        done or a limit is reached, then commit."""
        self.delivery.begin(self, producer)
        opened = time.monotonic()
        records = 0
        limit_records = self.flow.ferry.transaction_max_records
        limit_s = self.flow.ferry.transaction_max_seconds
        by_key = {(p.topic, p.partition): p for p in active}
        while any(not p.done for p in active):
            # never more than the transaction may still take: the limit is exact; and no
            # more than the ranges still hold, so a small range's last batch returns as its
            # records arrive instead of waiting out POLL_S for a full BATCH
            left = sum(p.end - p.covered_end for p in active if not p.done)
            messages = consumer.consume(max(1, min(BATCH, limit_records - records, left)),
                                        POLL_S)
            if not messages:
                self._check_positions(consumer, active)
                now = time.monotonic()
                stalled = [p for p in active if not p.done and now - p.progress_at > STALL_S]
                if stalled:
                    raise TransientError(self.explain.stalled(stalled, STALL_S))
            records += self._take(producer, messages, by_key)
            finished = [p for p in active if p.done and not p.paused]
            if finished:  # stop fetching past `end`
                consumer.pause([KTP(p.topic, p.partition) for p in finished])
                for part in finished:
                    part.paused = True
            if records >= limit_records or time.monotonic() - opened >= limit_s:
                break
        self.commit(producer, metadata, list(self.parts.values()))
        self.copied += records
        if self.progress is not None:
            self.progress(self.copied, self.total)

    def _take(self, producer: Producer, messages: list[Message],
              parts: dict[tuple[str, int], Part]) -> int:
        """Take one `consume()` batch; the number of records taken into the transaction.

        Each record of an unfinished range is sent one step late: the last one read goes at
        the next record or at the commit, with a delivery report, so the transaction's last
        target offset is known. Its offset goes to the segment builder, its size beside it.
        Events (the end of a partition, errors) go to `_event`.

        This loop is the lane's own cost beside librdkafka's, paid per record: one pass with
        no call or allocation per record beyond the send, the builder and the size."""
        taken = 0
        every = self.diagnose or self.delivery.reports_every_record
        now = time.monotonic()  # the batch's records moved their partitions at once
        send = self._send
        for message in messages:
            if message.error() is not None:
                self._event(message, parts)
                continue
            part = parts.get((message.topic(), message.partition()))  # type: ignore[arg-type]
            if part is None or part.done:
                continue
            offset: int = message.offset()  # type: ignore[assignment]  # set when consumed
            part.progress_at = now
            txn = part.txn
            txn.touched = True
            if offset >= part.end:
                part.done = True
                continue
            if txn.pending is not None:
                send(producer, part, txn.pending, every or not txn.sent)
            txn.pending = message
            txn.builder.add(offset)
            txn.last_offset = offset
            value, key = message.value(), message.key()
            txn.sizes.append((len(value) if value else 0) + (len(key) if key else 0))
            if offset >= part.age_from:
                part.aged(offset, message.timestamp())
            if offset >= part.end - 1:
                part.done = True
            taken += 1
        return taken

    def _event(self, message: Message, parts: dict[tuple[str, int], Part]) -> None:
        """A consumed event, not a record: a partition's end (done when at or past the range's
        end), a deleted range (terminal), a transient state (read on), or a failure."""
        error = message.error()
        assert error is not None
        key = (message.topic(), message.partition())
        part = parts.get(key)  # type: ignore[arg-type]
        if error.code() == KafkaError._PARTITION_EOF:
            if part is not None and not part.done and _offset(message) >= part.end:
                part.done, part.txn.touched = True, True
                part.moved()
            return
        if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
            raise TerminalError(
                f"flow {self.flow.name}: {key[0]}-{key[1]}: offsets from "
                f"{part.covered if part else '?'} were deleted by retention while being "
                "copied; the next run records the gap")
        if transient(error):  # librdkafka reconnects and fetches again by itself; a
            # partition that never moves again fails the lane after STALL_S
            log.warning("reading %s-%s: %s; waiting", key[0], key[1], error.str(),
                        extra={"flow": self.flow.name, "lane": self.lane})
            return
        raise self.explain.kafka(KafkaException(error), self.flow.source,
                                 f"reading {key[0]}-{key[1]}")

    def _send(self, producer: Producer, part: Part, message: Message, report: bool) -> None:
        """Produce `message` to its remote partition: key, value, headers and timestamp
        (CreateTime or LogAppendTime) kept; 0 asks for none when the source had none. With
        `report`, its delivery report notes the target offset (`_reporter`)."""
        kind, ts = message.timestamp()
        on_delivery = self._reporter(part, _offset(message)) if report else None
        while True:
            try:  # positional, no keyword dict per record; the 5th is `callback` (a None
                # `callback` would hide an `on_delivery`)
                producer.produce(part.remote, message.value(), message.key(), part.partition,
                                 on_delivery, None, ts if kind else 0, message.headers())
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                if self.lost_id(producer, exc.args[0]):
                    raise WriterTaken(self.explain.fenced(exc.args[0].str())) from None
                if unknown_partition(exc) and self.learn_partition(producer, part):
                    continue  # nothing was queued: the same record goes now
                offset = _offset(message)
                self.delivery.refused_on_send(
                    self, part, offset, self.explain.refusal(part, offset, exc.args[0]))
        part.txn.sent += 1

    def _reporter(self, part: Part, source_offset: int) -> Callable[[Any, Message], None]:
        txn = part.txn  # the transaction that sent it (reports of an aborted one are late)

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
                    return
                if is_fenced(err) or err.code() == KafkaError._FATAL:
                    # not a refusal: never re-run (that would fence a newer writer back)
                    self.fenced = self.fenced or err.str()
                    return
                txn.refuse(source_offset)
                if self.refused is None:
                    self.refused = Refusal(self.explain.refusal(part, source_offset, err),
                                           unanswered(err))
                return
            offset = _offset(msg)
            if txn.first_target is None or offset < txn.first_target:
                txn.first_target = offset
            if txn.last_target is None or offset > txn.last_target:
                txn.last_target = offset

        return report

    def _check_positions(self, consumer: Consumer, active: list[Part]) -> None:
        waiting = [p for p in active if not p.done]
        if not waiting:
            return
        positions = consumer.position([KTP(p.topic, p.partition) for p in waiting])
        for part, tp in zip(waiting, positions, strict=True):
            if tp.offset > part.position_seen:  # markers and compaction move it too
                if part.position_seen >= 0:
                    part.moved()
                part.position_seen = tp.offset
            if tp.offset >= part.end:
                part.done, part.txn.touched = True, True

    # -- the commit ---------------------------------------------------------------------

    def commit(self, producer: Producer, metadata: Any, parts: list[Part]) -> None:
        """Commit the open batch: its last records sent, every report in, one offset-map
        entry and one position per partition it touched, then the delivery mode's commit;
        only then are its records counted as copied."""
        touched = [p for p in parts if p.txn.touched]
        self._send_last(producer, touched)
        remaining = self.flush(producer)
        self.delivery.reported(self)
        if self.fenced is not None:
            self.serve_errors(producer)  # the error callback names a fatal error's cause
            cause = self.fatal.error
            if cause is None or is_fenced(cause):
                raise WriterTaken(self.explain.fenced(cause.str() if cause else self.fenced))
            raise TerminalError(f"flow {self.flow.name} writer {self.lane}: its producer "
                                f"stopped with a fatal error: {cause.str()}; nothing past its "
                                "last commit was kept")
        refusal = self.delivery.refusal_to_keep(self, producer, touched, remaining)
        ends = {(p.topic, p.partition): p.covered_end for p in touched}
        now_ms = int(time.time() * 1000)
        offsets = []
        for part in touched:
            covered_end = ends[(part.topic, part.partition)]
            self._record(producer, part, covered_end, now_ms)
            offsets.append(KTP(part.remote, part.partition, covered_end,
                               metadata=encode_position(
                                   part.target_end, self.delivery.owner(self),
                                   part.source_id, target_id=part.target_id)))
        self.delivery.commit(self, producer, metadata, offsets, refusal)
        self.transactions += 1
        self.unanswered_since = None
        self._settle(parts, touched, ends)
        if refusal is not None:
            raise RefusedKept(f"{refusal}; the records before it are committed: the next "
                              "run starts at it")

    def _send_last(self, producer: Producer, touched: list[Part]) -> None:
        """Each partition's last record, held back so it goes with a delivery report."""
        for part in touched:
            txn = part.txn
            if txn.pending is not None:
                if txn.refused_at is None:  # nothing at or after a refusal is sent
                    self._send(producer, part, txn.pending, report=True)
                txn.pending = None

    def _record(self, producer: Producer, part: Part, covered_end: int, now_ms: int) -> None:
        """Send the offset-map entry of what the batch covered on `part` (its segments from
        the delivery reports; none for markers, ends and gaps)."""
        txn = part.txn
        count = txn.builder.count
        try:
            segments = (txn.builder.finish(txn.first_target, txn.last_target)
                        if count and txn.first_target is not None
                        and txn.last_target is not None else ())
        except SegmentError as exc:
            raise TerminalError(f"flow {self.flow.name}: remote partition "
                                f"{part.remote}-{part.partition}: {exc}") from None
        if count and not segments:
            raise Refused(f"no delivery report for {part.topic}-{part.partition}")
        if segments:
            part.target_end = segments[-1].target_end
        elif part.target_end is None and self.reader is not None:
            # nothing mirrored yet: where the remote partition ends (this batch wrote nothing)
            part.target_end = self.remote_end(self.reader, part)
        entry = MapEntry(self.flow.name, self.run_id, self.lane, part.topic, part.partition,
                         part.remote, part.partition, part.covered, covered_end,
                         segments, now_ms, bytes=txn.bytes, target_end=part.target_end,
                         source_id=part.source_id, target_id=part.target_id,
                         duplicates=part.duplicates, lane_started_ms=self.started_ms,
                         age_ms=max((r.max_age_ms for r in part.ranges), default=0))
        part.duplicates = 0  # counted once, in the partition's first entry of this run
        for piece in split_entry(entry):  # an entry stays far below the record limit
            self._send_entry(producer, piece)

    def _send_entry(self, producer: Producer, entry: MapEntry) -> None:
        """Produce one offset-map entry, its delivery checked: positions are never committed
        over an entry the target did not take (at_least_once has no transaction to fail)."""
        def report(err: KafkaError | None, _msg: Message) -> None:
            if err is not None and self.refused is None:
                self.refused = Refusal(
                    f"flow {self.flow.name}: cluster {self.flow.target} {refused(err)} the "
                    f"offset-map entry of {entry.source_topic}-{entry.source_partition} offsets "
                    f"{entry.covered_start}..{entry.covered_end - 1} on {self.map_topic}: "
                    f"{err.str()}", unanswered(err))

        key, value = encode(entry)
        while True:
            try:
                producer.produce(self.map_topic, value, key, partition=0, on_delivery=report)
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                raise self.kafka_error(exc, self.flow.target, "writing the offset-map "
                                       f"entry to {self.map_topic}") from None

    def _settle(self, parts: list[Part], touched: list[Part],
                ends: dict[tuple[str, int], int]) -> None:
        """The batch is committed: count its records, and finish the ranges it completed."""
        for part in touched:
            part.committed(ends[(part.topic, part.partition)])
        for part in parts:
            for result in part.ranges:
                if result.outcome == RangeOutcome.PENDING and part.covered >= result.end:
                    result.outcome = RangeOutcome.COPIED
                    result.seconds = round(time.monotonic() - self.started, 3)


MAP_TOPIC_WAIT_S = 3.0
"""How long a writer asks again about an offset-map topic a broker does not know."""


def _unknown(topic: Any) -> bool:
    """Whether topic metadata says the topic does not exist."""
    return topic is None or (topic.error is not None
                             and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)
