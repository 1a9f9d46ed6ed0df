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

The loop is here; the rest of a writer is beside it, one concept a module: its clients'
source (`lane_clients`), positions (`lane_positions`), offset-map entries (`lane_entries`),
the ways back after a failed batch (`lane_recovery`), what its clients learn (`lane_topics`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.core.internal import offset_map_topic, transactional_id
from ferry.core.lanes import writer_of
from ferry.core.planner import Range
from ferry.core.positions import encode_position
from ferry.core.silence import Silence, Watch
from ferry.core.tables import RangeOutcome
from ferry.core.takeover import Named
from ferry.errors import FerryError, TerminalError, TransientError, WriterTaken
from ferry.kafka import lane_entries, lane_positions, lane_recovery, lane_topics
from ferry.kafka.claim import WriterClaim
from ferry.kafka.delivery import CALL_TIMEOUT_S, Refused, RefusedKept, delivery_for
from ferry.kafka.lane_clients import (
    FatalError,
    FreshClients,
    HeldProducer,
    LaneClients,
    new_consumer,
    new_producer,
    new_reader,
)
from ferry.kafka.lane_errors import LaneErrors, is_fenced, unanswered
from ferry.kafka.lane_state import LaneResult, Part, Refusal, offset_of, parts_of
from ferry.kafka.metadata import unknown_partition
from ferry.kafka.retry import retrying, transient
from ferry.kafka.runs import ReadsNewest
from ferry.kafka.stuck import LeftBehind, ProducerStuck

__all__ = ["FatalError", "Lane", "LaneResult"]

log = logging.getLogger(__name__)

BATCH = 10_000
POLL_S = 0.05
"""consume() waits out its whole timeout unless the batch fills: short, so the last batch of
a range (and a small range) does not wait for records that will not come."""
STALL_S = 120.0


class Lane:
    """Copies `ranges` (all on this lane) for `flow`; use `run()` once."""

    log = log

    def __init__(self, flow: Flow, ranges: Sequence[Range], run_id: str,
                 progress: Callable[[int, int], None] | None = None, role: str = "",
                 clients: LaneClients | None = None, newest: ReadsNewest | None = None,
                 owner: Named | None = None, left_behind: LeftBehind | None = None) -> None:
        """The writer of `ranges`, which must all be of one writer slot (`by_writer`): its
        transactional id is that slot's, whoever runs it (G11). `clients`: where its
        clients come from and go to (`ferry.kafka.lane_clients`; default new ones, closed
        at the end; a continuous loop's are kept from cycle to cycle: `ferry.kafka.kept`).
        `newest`, `owner`: where the flow's newest run is read, and the run this writer's
        is, as it named itself (`ferry.core.takeover`): before initialising its id again
        mid-copy (a stuck or unanswered producer replaced, a refusal re-run), the writer
        reads the newest run and, when another is to go on, stops instead (`WriterTaken`),
        so a writer that is to yield never fences the one it yields to. Without them it
        initialises again whoever is named (Kafka's fencing still keeps the copy exact).
        `left_behind`: where the threads of its producer calls given up on as stuck are
        counted (`ferry.kafka.stuck`; a continuous loop's runtime), None: not counted."""
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
        self.left_behind = left_behind
        self.clients: LaneClients = clients if clients is not None else FreshClients()
        self.clients.check(self.txn_id, self.delivery.name)
        self.producer: Producer | None = None
        self.in_transaction = False
        self.progress = progress
        self.map_topic = offset_map_topic(flow)
        self.parts = parts_of(ranges, flow.remote_topic)
        self.explain = LaneErrors(flow, self.lane, self.txn_id, self.parts.values())
        self.results = [r for p in self.parts.values() for r in p.ranges]
        self.transactions = 0
        self.total = sum(p.end - p.start for p in self.parts.values())
        self.copied = 0
        self.reads = Silence(self.log, flow.source, f"writer {self.lane}'s reads",
                             {"flow": flow.name, "lane": self.lane})
        """Records planned but not coming across the copy's batches (a source that takes
        the fetches and does not answer): said once after SILENT_S, not only when STALL_S
        fails the batch. Its clock starts at the copy's first look (a lane copies once)."""
        self.watch = Watch()  # its blocking calls, each said once if it waits SILENT_S
        self.diagnose = False
        self.refused: Refusal | None = None
        """The first refusal (or record left unacknowledged) the target reported."""
        self.unanswered_since: float | None = None
        """When the first of the batches the target left unacknowledged since the last
        commit failed (`lane_recovery.wait_out`); None when the last batch committed."""
        self.unanswered_attempts = 0
        self.fenced: str | None = None
        """A delivery report saying a newer writer took this writer's transactional id (or
        that the producer hit a fatal error: `fatal` says which)."""
        self.fatal = FatalError()
        self.reader: Consumer | None = None
        self.replaced = 0
        """Producers replaced because a call never returned (`lane_recovery`)."""
        self.claim: WriterClaim | None = None
        """at_least_once: the slot's claim in Kafka (`ferry.kafka.claim`), once taken."""
        self.newest, self.owner = newest, owner or Named(run_id)
        self.moved_back: set[tuple[str, int]] = set()
        """Partitions whose position moved back under this writer (`lane_positions`)."""
        self.learned: set[str] = set()
        """Topics whose metadata this writer's producer asked for (`learn_targets`)."""

    # -- clients ------------------------------------------------------------------------

    def _producer(self, diagnose: bool = False) -> Producer:
        """A new producer of the writer's id (`lane_clients.new_producer`)."""
        made = new_producer(self.flow, self.delivery, self.txn_id, diagnose)
        self.fatal = made.fatal
        return made.producer

    def _consumer(self) -> Consumer:
        return new_consumer(self.flow)

    def _target_reader(self) -> Consumer:
        return new_reader(self.flow)

    def _new_consumer(self) -> Consumer:
        """A new source consumer, which first learns the topics its client source names
        (`LaneClients.topics_to_learn`)."""
        consumer = self._consumer()
        if topics := self.clients.topics_to_learn():
            self._learn_topics(consumer, set(topics))
        return consumer

    def _start_producer(self, diagnose: bool = False) -> Producer:
        """A new producer, started by the delivery mode (its transactions initialised)."""
        producer = self._producer(diagnose)
        self.producer = producer
        self.in_transaction = False
        self.delivery.start(self, producer)
        return producer

    def _first_producer(self) -> Producer:
        """The producer its client source held for the writer's id (transactions
        initialised; target topics it has not asked for yet are asked for first:
        `learn_targets`), or, when it holds none, a new one."""
        held = self.clients.producer()
        if held is None:
            return self._start_producer()
        self.producer, self.fatal, self.in_transaction = held.producer, held.fatal, False
        self.learned = set(held.topics)
        if {p.remote for p in self.parts.values()} - held.topics:
            self.learn_targets(held.producer, skip=held.topics)
        return held.producer

    def _held(self) -> HeldProducer | None:
        """The producer the writer ended with, for its client source."""
        if self.producer is None:
            return None
        return HeldProducer(self.producer, self.fatal, self.learned)

    # -- the run ------------------------------------------------------------------------

    def run(self) -> LaneResult:
        started = self.started = time.monotonic()
        self.started_ms = int(time.time() * 1000)
        if not self.parts:
            return LaneResult(self.lane, [], 0, 0.0)
        reader = self.reader = self.clients.reader(self._target_reader)
        consumer = self.clients.consumer(self._new_consumer)
        producer: Producer | None = None
        failed = True
        try:
            producer = self._first_producer()
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
            # a run that ended on a one-record-per-request producer keeps nothing
            self.clients.release(consumer, reader, self._held(),
                                 healthy=not failed and not self.diagnose)
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

    # -- calls, and what other modules ask of the lane ----------------------------------

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
                and self.fatal.lost_id(self.producer, exc.args[0]):
            return WriterTaken(self.explain.fenced(exc.args[0].str()))
        return self.explain.kafka(exc, cluster, action)

    def retrying(self, call: Callable[[], Any], cluster: str, action: str) -> Any:
        """`call()` with transient states waited out; other Kafka errors raised as they are.
        Each attempt that waits `SILENT_S` on the cluster is said once (`self.watch`)."""
        extra = {"flow": self.flow.name, "lane": self.lane}

        def watched() -> Any:
            with self.watch.call(self.log, cluster, f"writer {self.lane} {action}", extra):
                return call()

        return retrying(watched, cluster=cluster, action=action,
                        budget_s=self.flow.ferry.kafka_retry_seconds)

    def resume_from_committed(self, reader: Consumer) -> None:
        """`lane_positions.resume_from_committed`."""
        lane_positions.resume_from_committed(self, reader)

    def remote_end(self, reader: Consumer, part: Part) -> int:
        """`lane_positions.remote_end`."""
        return lane_positions.remote_end(self, reader, part)

    def learn_targets(self, producer: Producer, skip: Collection[str] = ()) -> None:
        """`lane_topics.learn_targets`."""
        lane_topics.learn_targets(self, producer, skip)

    def _learn_topics(self, consumer: Consumer, topics: set[str]) -> None:
        lane_topics.learn_topics(self, consumer, topics)

    def flush(self, producer: Producer, until_refused: bool = True,
              seconds: float = CALL_TIMEOUT_S) -> int:
        """Wait for delivery reports (at most `seconds`); the count still unreported.
        `until_refused`: stop at the first refusal (after one, a transaction must abort and
        the records queued behind it are never sent)."""
        deadline = time.monotonic() + seconds
        remaining = self._flush_once(producer)
        silence = Silence(self.log, self.flow.target, f"writer {self.lane}'s records",
                          {"flow": self.flow.name, "lane": self.lane})
        while (remaining and not (until_refused and self.refused is not None)
               and time.monotonic() < deadline):
            silence.saw(remaining)
            remaining = self._flush_once(producer)
        silence.ended(answered=remaining == 0 and self.refused is None)
        return remaining

    def _flush_once(self, producer: Producer) -> int:
        """One `flush` slice. A producer another owner fenced meanwhile has a fatal error,
        and confluent-kafka's flush then fails without an exception of its own (SystemError:
        "returned NULL without setting an exception"): that is this lane losing the
        partition to a newer owner, not a crash."""
        try:
            return int(producer.flush(0.5))
        except (SystemError, KafkaException) as exc:
            self.fatal.serve(producer)  # the error callback keeps the cause
            cause = self.fatal.error
            text = cause.str() if cause is not None else (
                exc.args[0].str() if isinstance(exc, KafkaException) else "producer fenced")
            raise WriterTaken(self.explain.fenced(text)) from None

    # -- the copy loop ------------------------------------------------------------------

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
                producer = lane_recovery.replace_stuck(self, consumer, markers, exc)
            except Refused as exc:
                if exc.unanswered:
                    producer = lane_recovery.wait_out(self, producer, consumer, [], exc)
                    continue
                lane_recovery.abort(self, producer, consumer, [])
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
                producer = lane_recovery.replace_stuck(self, consumer, active, exc)
                continue
            except RefusedKept as exc:
                if self.diagnose:
                    raise TerminalError(str(exc)) from None
                # Brokers refuse whole batches: from the first refused record on, copy one
                # record per request, each reported, to name the one refused.
                self.diagnose, self.refused = True, None
                producer = lane_recovery.restart(self, consumer, active, diagnose=True)
                continue
            except Refused as exc:
                if exc.unanswered:
                    producer = lane_recovery.wait_out(self, producer, consumer, active, exc)
                    continue
                lane_recovery.abort(self, producer, consumer, active)
                if self.diagnose:
                    if self.refused is not None:
                        raise TerminalError(self.refused.text) from None
                    raise TransientError(f"flow {self.flow.name} lane {self.lane}: the "
                                         f"transaction failed twice: {exc}") from None
                # Re-run the same records one per request, each reported, to name a refusal.
                self.diagnose, self.refused = True, None
                producer = lane_recovery.restart(self, consumer, active, diagnose=True)
                continue
            if self.diagnose:  # the re-run went through: back to batching
                self.diagnose = False
                producer = lane_recovery.restart(self, consumer, active)
        self.reads.ended(answered=True)

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
            self.reads.saw(left)
            messages = consumer.consume(max(1, min(BATCH, limit_records - records, left)),
                                        POLL_S)
            if not messages:
                lane_positions.check_positions(consumer, active)
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
            if part is not None and not part.done and offset_of(message) >= part.end:
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
        on_delivery = self._reporter(part, offset_of(message)) if report else None
        while True:
            try:  # positional, no keyword dict per record; the 5th is `callback` (a None
                # `callback` would hide an `on_delivery`)
                producer.produce(part.remote, message.value(), message.key(), part.partition,
                                 on_delivery, None, ts if kind else 0, message.headers())
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                if self.fatal.lost_id(producer, exc.args[0]):
                    raise WriterTaken(self.explain.fenced(exc.args[0].str())) from None
                if unknown_partition(exc) and lane_topics.learn_partition(self, producer, part):
                    continue  # nothing was queued: the same record goes now
                offset = offset_of(message)
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
            offset = offset_of(msg)
            if txn.first_target is None or offset < txn.first_target:
                txn.first_target = offset
            if txn.last_target is None or offset > txn.last_target:
                txn.last_target = offset

        return report

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
            self.fatal.serve(producer)  # the error callback names a fatal error's cause
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
            lane_entries.record(self, producer, part, covered_end, now_ms)
            offsets.append(KTP(part.remote, part.partition, covered_end,
                               metadata=encode_position(
                                   part.target_end, self.delivery.owner(self),
                                   part.source_id, target_id=part.target_id)))
        self.delivery.commit(self, producer, metadata, offsets, refusal)
        self.transactions += 1
        self.unanswered_since = None
        lane_entries.settle(self, parts, touched, ends)
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
