"""Copy one lane's exact source ranges into the target, exactly once (adapter).

One lane = one transactional producer (`transactional.id` stable per flow and lane) and
one assigned consumer. The contract:

- `init_transactions` first: it fences an older incarnation of the lane (a zombie task)
  and aborts its open transaction.
- Then the lane reads its committed positions (the positions group's offsets on the
  remote partitions, stable reads only), so a retried task resumes where the last
  committed transaction ended instead of copying twice.
- Each transaction carries the records, the offset-map entries of what it covered and the
  new positions; all become visible together or not at all (G1, G4). Transactions are
  bounded by `ferry.transaction.max.records` and `.max.seconds`.
- A partition is done at the first of: a record at or past `end - 1` (records at or past
  `end` are dropped), its position reaching `end`, or end-of-partition at or past `end`.
  Ranges end at the LSO, so one of these always happens (markers, compaction, aborts).
- Target offsets come from delivery reports on only the first and last record per
  partition and transaction; their distance must equal the record count (one writer per
  partition), or the transaction is refused (SegmentError).
- `ferry.delivery=at_least_once` (targets without transactions): the same lane with an
  idempotent producer and no transactions. Per batch: records acknowledged, then the
  offset-map entries, then the positions (plain group offsets). A crash between them
  re-copies only that batch; the next run counts those duplicates (the remote partition's
  end against the end recorded with the last positions) in the `runs` table.
- A record the target refuses fails the lane with topic, partition and offset named: the
  failed transaction is aborted and re-run once by a fresh producer that sends one record
  per batch with a report per record (brokers refuse whole batches), which names it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.config.clients import RdValue
from ferry.core.internal import offset_map_topic, positions_group, reader_group, transactional_id
from ferry.core.offsetmap import MapEntry, SegmentBuilder, SegmentError, encode, split_entry
from ferry.core.planner import Range
from ferry.core.tables import RangeResult
from ferry.errors import FerryError, TerminalError, TransientError
from ferry.kafka.errors import kafka_error
from ferry.kafka.retry import retrying, transient

log = logging.getLogger(__name__)

BATCH = 10_000
POLL_S = 0.2
STALL_S = 120.0
PROGRESS_S = 10.0
CALL_TIMEOUT_S = 60.0
PRODUCER_DEFAULTS: dict[str, str | int] = {"linger.ms": 20, "batch.size": 1_000_000,
                                           "compression.type": "none"}


@dataclass
class LaneResult:
    lane: int
    ranges: list[RangeResult]
    transactions: int = 0
    seconds: float = 0.0

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)


@dataclass
class _Part:
    """One source partition's state inside the lane."""

    topic: str
    partition: int
    remote: str
    start: int
    end: int
    ranges: list[RangeResult]
    expect: int | None = None  # the committed position the plan was made from (Range.expect)
    source_id: str = ""  # the source topic's ID (Range.source_id)
    target_id: str = ""  # the remote topic's ID (Range.target_id)
    covered: int = 0  # next source offset not yet committed
    skip_from: int | None = None  # committed position before an accepted retention gap
    done: bool = False
    paused: bool = False
    # the open transaction
    builder: SegmentBuilder = field(default_factory=SegmentBuilder)
    pending: Message | None = None
    sent: int = 0
    first_target: int | None = None
    last_target: int | None = None
    last_offset: int = -1
    target_end: int | None = None  # next remote offset after what this lane recorded
    owner: str = ""  # the transactional id that committed the position this lane found
    txn_bytes: int = 0
    read: list[tuple[int, int]] = field(default_factory=list)
    """(source offset, bytes) of each record the open transaction read: counted into its
    range's result only when committed (an aborted or re-read record is not copied)."""
    touched: bool = False
    refused_at: int | None = None  # at_least_once: the first source offset the target refused
    progress_at: float = field(default_factory=time.monotonic)
    """When this partition last moved (a record, its end, its position): across
    transactions, so a partition that never moves is found however often empty
    transactions commit."""
    position_seen: int = -1

    @property
    def read_from(self) -> int:
        """Where the consumer reads: a skipped gap is covered, but never read."""
        return max(self.covered, self.start)

    @property
    def covered_end(self) -> int:
        """The next source offset after what the open transaction covers: the range's end
        once done, else one past the last record this transaction read (never past what it
        read: records of an aborted transaction are not covered)."""
        return self.end if self.done else max(self.read_from, self.last_offset + 1)

    def moved(self) -> None:
        self.progress_at = time.monotonic()

    def settle(self, upto: int) -> None:
        """Count the committed records (source offsets below `upto`) into their ranges."""
        for offset, size in self.read:
            if offset >= upto:
                continue
            for result in self.ranges:
                if result.start <= offset < result.end:
                    result.records += 1
                    result.bytes += size
                    break

    def reset_txn(self) -> None:
        """Forget the open transaction (committed, or aborted and to be read again)."""
        self.read = []
        self.builder = SegmentBuilder()
        self.pending, self.sent = None, 0
        self.first_target = self.last_target = None
        self.last_offset = -1
        self.touched = False
        self.txn_bytes = 0
        self.refused_at = None

    def refuse(self, source_offset: int) -> None:
        if self.refused_at is None or source_offset < self.refused_at:
            self.refused_at = source_offset

    def keep_before_refusal(self) -> None:
        """at_least_once: record only the records before the first refused one (all of
        them acknowledged, at contiguous target offsets); the refused record is where the
        partition's position stops."""
        assert self.refused_at is not None
        self.builder.truncate(self.refused_at)
        count = self.builder.count
        self.done = False
        self.last_offset = self.refused_at - 1
        self.last_target = (self.first_target + count - 1
                            if count and self.first_target is not None else None)
        if not count:
            self.first_target = None


class _Refused(Exception):
    """The transaction failed in a way an abort and a re-run may fix (or pinpoint)."""


class _RefusedKept(TerminalError):
    """at_least_once: the target refused a record; what was acknowledged before it is
    committed, and the partition's position stops at it."""


def position_metadata(target_end: int | None, owner: str = "", source_id: str = "") -> str:
    """Commit metadata of a position: the remote partition's end after what was recorded,
    the transactional id that committed it (the partition's owner, fenced by the next
    owner before it writes) and the source topic's ID (a recreated topic has another)."""
    data: dict[str, object] = {}
    if target_end is not None:
        data["ferry_target_end"] = target_end
    if owner:
        data["ferry_owner"] = owner
    if source_id:
        data["ferry_source_id"] = source_id
    return json.dumps(data) if data else ""


def recorded_source_id(metadata: str | None) -> str:
    """The source topic ID a position was committed for ("" when not recorded)."""
    value = _metadata(metadata).get("ferry_source_id")
    return value if isinstance(value, str) else ""


def _metadata(metadata: str | None) -> dict[str, Any]:
    try:
        data = json.loads(metadata or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _recorded_end(metadata: str | None) -> int | None:
    value = _metadata(metadata).get("ferry_target_end")
    return int(value) if isinstance(value, int) else None


def _recorded_owner(metadata: str | None) -> str:
    value = _metadata(metadata).get("ferry_owner")
    return value if isinstance(value, str) else ""


def _offset(message: Message) -> int:
    """A delivered or consumed record's offset (never None for those)."""
    offset = message.offset()
    assert offset is not None
    return offset


class Lane:
    """Copies `ranges` (all on this lane) for `flow`; use `run()` once."""

    def __init__(self, flow: Flow, lane: int, ranges: Sequence[Range], run_id: str,
                 progress: Callable[[int, int], None] | None = None, role: str = "", *,
                 lanes: int) -> None:
        """Lane `lane` of `lanes` (the run's lane count, part of the transactional id)."""
        self.flow, self.lane, self.run_id = flow, lane, run_id
        self.started = time.monotonic()
        self.txn_id = transactional_id(flow, lane, lanes, role)
        self.producer: Producer | None = None
        self.in_transaction = False
        self.progress = progress
        self.map_topic = offset_map_topic(flow)
        self.parts = self._parts(ranges)
        self.results = [r for p in self.parts.values() for r in p.ranges]
        self.errors: list[str] = []
        self.transactions = 0
        self.total = sum(p.end - p.start for p in self.parts.values())
        self.copied = 0
        self.diagnose = False
        self.refused: tuple[str, int, str] | None = None
        self.exactly_once = flow.ferry.delivery == "exactly_once"
        self.reader: Consumer | None = None

    def _parts(self, ranges: Sequence[Range]) -> dict[tuple[str, int], _Part]:
        parts: dict[tuple[str, int], _Part] = {}
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
                parts[key] = _Part(r.topic, r.partition, remote,
                                   r.start, r.end, [result], expect=r.expect,
                                   source_id=r.source_id, target_id=r.target_id,
                                   covered=r.start,
                                   skip_from=r.skip_from)
        return parts

    # -- clients ------------------------------------------------------------------------

    def _producer(self, diagnose: bool = False) -> Producer:
        overrides: dict[str, RdValue] = {k: v for k, v in PRODUCER_DEFAULTS.items()
                                         if k not in self.flow.producer.settings}
        if diagnose:  # one record per request, so a refusal names its record
            overrides.update({"linger.ms": 0, "batch.num.messages": 1})
        overrides.update({"enable.idempotence": True, "acks": "all", "log_level": 3})
        if self.exactly_once:
            txn_timeout = max(60_000, int(self.flow.ferry.transaction_max_seconds * 6_000))
            overrides.setdefault("transaction.timeout.ms", txn_timeout)
            overrides["transactional.id"] = self.txn_id
        conf = self.flow.producer.confluent(overrides)
        return Producer(conf)

    def _consumer(self) -> Consumer:
        conf = self.flow.consumer.confluent({
            "group.id": reader_group(self.flow, "reader"), "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": True,
            "auto.offset.reset": "error", "log_level": 3})
        return Consumer(conf)

    def _target_reader(self) -> Consumer:
        """A target consumer in the positions group: its metadata goes with each commit."""
        conf = self.flow.target_admin.confluent({
            "group.id": positions_group(self.flow), "enable.auto.commit": False,
            "isolation.level": "read_committed", "log_level": 3})
        return Consumer(conf)

    # -- the run ------------------------------------------------------------------------

    def run(self) -> LaneResult:
        started = self.started = time.monotonic()
        if not self.parts:
            return LaneResult(self.lane, [], 0, 0.0)
        reader = self.reader = self._target_reader()
        consumer = self._consumer()
        producer: Producer | None = None
        try:
            producer = self._start_producer()
            self._resume_from_committed(reader)
            if self.exactly_once:
                self._fence_previous_owners(reader)
            else:
                self._mark_starts(reader)
            metadata = reader.consumer_group_metadata()
            self._copy(producer, consumer, metadata)
        except (TerminalError, TransientError) as exc:
            for result in self.results:
                if result.outcome == "pending":
                    result.outcome, result.error = "failed", str(exc)
            self._abort_open(producer)
            raise
        finally:
            consumer.close()
            reader.close()
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
        """A producer with the lane's transactional id; initialising it fences every older
        one (a zombie task, or this lane's previous producer)."""
        producer = self._producer(diagnose)
        self.producer = producer
        self.in_transaction = False
        if self.exactly_once:
            self._call(lambda: producer.init_transactions(CALL_TIMEOUT_S), self.flow.target,
                       f"initialising transactions of lane {self.lane}")
        return producer

    def _abort_open(self, producer: Producer | None) -> None:
        """After a failure: abort the transaction this lane left open, so the partitions'
        last stable offsets do not wait for the broker's transaction timeout. Best effort:
        a fenced or fatal producer cannot, and the next init_transactions aborts it then."""
        producer = self.producer or producer
        if producer is None or not self.exactly_once or not self.in_transaction:
            return
        try:
            producer.abort_transaction(10)
        except KafkaException as exc:
            log.warning("lane %s: could not abort its open transaction (%s); the next run's "
                        "init_transactions aborts it", self.lane, exc.args[0].str(),
                        extra={"flow": self.flow.name, "lane": self.lane})
        self.in_transaction = False

    def _fence_previous_owners(self, reader: Consumer) -> None:
        """Before writing a partition another transactional id owned (recorded with its
        position: another lane count, a backfill, a scheduled run beside a backfill), fence
        that id: `init_transactions` with it aborts its open transaction and makes any
        producer still holding it (a zombie) fail at its next commit. Then the positions are
        read again: whatever the old owner committed last is where this lane resumes.
        So one producer at a time commits a partition's ranges, whatever the lane count."""
        owners = sorted({p.owner for p in self.parts.values()
                         if p.owner and p.owner != self.txn_id})
        if not owners:
            return
        for owner in owners:
            log.info("lane %s: fencing %s, the previous owner of some of its partitions",
                     self.lane, owner, extra={"flow": self.flow.name, "lane": self.lane})
            conf = self.flow.producer.confluent({
                "transactional.id": owner, "enable.idempotence": True, "acks": "all",
                "log_level": 3})
            fencer = Producer(conf)
            self._call(lambda f=fencer: f.init_transactions(CALL_TIMEOUT_S),  # type: ignore[misc]
                       self.flow.target, f"fencing the previous owner {owner}")
            fencer.flush(0)
        for part in self.parts.values():  # read again: the fenced owner may have committed
            part.covered, part.done, part.touched = part.start, False, False
            for result in part.ranges:
                result.outcome = "pending"
        self._resume_from_committed(reader)

    def _call(self, call: Callable[[], Any], cluster: str, action: str) -> Any:
        """`call()`, transient broker states (a coordinator loading, a leader moving) waited
        out within `ferry.kafka.retry.seconds`; a failure becomes a Ferry error naming the
        cluster, the action and, when access was denied, the right."""
        try:
            return self._retrying(call, cluster, action)
        except KafkaException as exc:
            raise self._error(exc, cluster, action) from None

    def _retrying(self, call: Callable[[], Any], cluster: str, action: str) -> Any:
        return retrying(call, cluster=cluster, action=action,
                        budget_s=self.flow.ferry.kafka_retry_seconds)

    def _error(self, exc: KafkaException, cluster: str, action: str) -> FerryError:
        """A Ferry error naming the principal and, when access was denied, the right."""
        if cluster == self.flow.source:
            topics = sorted({p.topic for p in self.parts.values()})
            reader = reader_group(self.flow, "reader")
            return kafka_error(exc, cluster, action, principal=self.flow.consumer.principal,
                               needs={"TOPIC": f"READ on TOPIC {','.join(topics)}",
                                      "GROUP": f"DESCRIBE on GROUP {reader}"})
        remote = sorted({p.remote for p in self.parts.values()})
        txn = self.txn_id
        return kafka_error(exc, cluster, action, principal=self.flow.producer.principal, needs={
            "TOPIC": f"WRITE on TOPIC {','.join(remote)}",
            "TRANSACTIONAL_ID": f"WRITE on TRANSACTIONAL_ID {txn}",
            "GROUP": f"READ on GROUP {positions_group(self.flow)}",
            "CLUSTER": "IDEMPOTENT_WRITE on CLUSTER kafka-cluster"})

    def _resume_from_committed(self, reader: Consumer) -> None:
        keys = list(self.parts)
        request = [KTP(self.parts[k].remote, k[1]) for k in keys]

        def read() -> list[KTP]:
            answer = reader.committed(request, timeout=CALL_TIMEOUT_S)
            for tp in answer:  # a partition's error is never taken for "no position"
                if tp.error is not None:
                    raise KafkaException(tp.error)
            return list(answer)

        committed = self._call(read, self.flow.target, "reading committed positions")
        for key, tp in zip(keys, committed, strict=True):
            part = self.parts[key]
            if tp.offset < 0:
                if part.expect is not None:
                    raise TransientError(
                        f"flow {self.flow.name}: {part.topic}-{part.partition}: the plan "
                        f"expects the position {part.expect} committed on {part.remote}, "
                        "but there is none: an earlier range (a backfill chunk) is not "
                        "committed yet, or Kafka expired the position. Nothing was copied, "
                        "so nothing is doubled or skipped; run the earlier chunk first, or "
                        "plan again (a run restores an expired position from the offset map)")
                continue
            part.owner = _recorded_owner(tp.metadata)
            part.target_end = _recorded_end(tp.metadata)
            if not self.exactly_once and part.target_end is not None:
                self._count_duplicates(reader, part)
            if part.skip_from is not None and tp.offset == part.skip_from:
                # An accepted gap: the first entry covers it, with no records.
                part.covered = part.skip_from
                part.touched = True
                continue
            if tp.offset < part.start:
                raise TerminalError(
                    f"flow {self.flow.name}: {part.topic}-{part.partition} is committed at "
                    f"{tp.offset} but the plan starts at {part.start}; re-plan the run")
            part.covered = min(tp.offset, part.end)
            for result in part.ranges:
                if tp.offset >= result.end:
                    result.outcome = "skipped"
            if tp.offset >= part.end and part.start < part.end:
                part.done = True

    def _mark_starts(self, reader: Consumer) -> None:
        """at_least_once: before a partition's first batch, commit its start position with
        the remote partition's current end, so that a crash in that batch can be measured
        (anything already in the remote topic is not counted as a duplicate)."""
        new = [p for p in self.parts.values() if p.target_end is None and not p.done]
        if not new:
            return
        offsets = []
        for part in new:
            _, end = self._call(lambda p=part: reader.get_watermark_offsets(  # type: ignore[misc]
                KTP(p.remote, p.partition), timeout=CALL_TIMEOUT_S), self.flow.target,
                f"reading the end of {part.remote}-{part.partition}")
            part.target_end = end
            offsets.append(KTP(part.remote, part.partition, part.covered,
                               metadata=position_metadata(end, source_id=part.source_id)))
        self._call(lambda: reader.commit(offsets=offsets, asynchronous=False),
                   self.flow.target, "committing start positions")

    def _count_duplicates(self, reader: Consumer, part: _Part) -> None:
        """at_least_once: records past the end recorded with the last positions were written
        by a run that crashed before committing them; this run copies them again."""
        _, end = self._call(lambda: reader.get_watermark_offsets(
            KTP(part.remote, part.partition), timeout=CALL_TIMEOUT_S), self.flow.target,
            f"reading the end of {part.remote}-{part.partition}")
        duplicates = max(0, end - (part.target_end or 0))
        if duplicates:
            part.ranges[0].duplicates = duplicates
            log.warning("%d records of %s-%s were written by an unfinished run and will be "
                        "copied again (at_least_once)", duplicates, part.remote, part.partition,
                        extra={"flow": self.flow.name, "topic": part.topic,
                               "partition": part.partition})
        part.target_end = end

    def _copy(self, producer: Producer, consumer: Consumer, metadata: Any) -> None:
        if self.progress is not None:
            self.progress(0, self.total)
        for part in self.parts.values():  # stall time counts from here
            part.moved()
        active = [p for p in self.parts.values() if not p.done and p.read_from < p.end]
        markers = [p for p in self.parts.values() if not p.done and p.start == p.end]
        if active:
            consumer.assign([KTP(p.topic, p.partition, p.read_from) for p in active])
        if markers:  # new (or empty) partitions: record where copying starts
            for part in markers:
                part.touched, part.done = True, True
            try:
                self._transaction(producer, consumer, metadata, [])
            except _Refused as exc:
                self._abort(producer, consumer, [])
                names = ", ".join(f"{p.topic}-{p.partition}" for p in markers)
                raise TransientError(f"flow {self.flow.name} lane {self.lane}: recording the "
                                     f"start positions of {names} in {self.map_topic} "
                                     f"failed: {exc}") from None
        while any(not p.done for p in active):
            try:
                try:
                    self._transaction(producer, consumer, metadata, active)
                except _Refused as exc:
                    if self.exactly_once:
                        raise
                    # at_least_once (a local refusal): nothing to abort; keep what was
                    # acknowledged before it
                    try:
                        self._commit(producer, metadata, list(self.parts.values()))
                    except _Refused as again:
                        raise TerminalError(str(again)) from None
                    raise TerminalError(self.refused[2] if self.refused else str(exc)) \
                        from None
            except _RefusedKept as exc:
                if self.diagnose:
                    raise TerminalError(str(exc)) from None
                # Brokers refuse whole batches: from the first refused record on, copy one
                # record per request, each reported, to name the one refused.
                self.diagnose, self.refused = True, None
                self._rewind(consumer, active)
                producer = self._start_producer(diagnose=True)
                continue
            except _Refused as exc:
                self._abort(producer, consumer, active)
                if self.diagnose:
                    if self.refused is not None:
                        raise TerminalError(self.refused[2]) from None
                    raise TransientError(f"flow {self.flow.name} lane {self.lane}: the "
                                         f"transaction failed twice: {exc}") from None
                # Re-run the same records one per request, each reported, to name a refusal.
                self.diagnose, self.refused = True, None
                producer = self._start_producer(diagnose=True)
                continue
            if self.diagnose:  # the re-run went through: back to batching
                self.diagnose = False
                producer = self._start_producer()

    def _rewind(self, consumer: Consumer, active: list[_Part]) -> None:
        """Read each unfinished partition again from what is committed."""
        for part in active:
            part.done = part.covered >= part.end
            if not part.done:
                if part.paused:
                    consumer.resume([KTP(part.topic, part.partition)])
                    part.paused = False
                consumer.seek(KTP(part.topic, part.partition, part.read_from))

    def _abort(self, producer: Producer, consumer: Consumer, active: list[_Part]) -> None:
        try:
            producer.abort_transaction(CALL_TIMEOUT_S)
            self.in_transaction = False
        except KafkaException as exc:
            if not exc.args[0].fatal():
                raise self._error(exc, self.flow.target, "aborting a transaction") from None
            # A fatal producer cannot abort; the next init_transactions aborts for it.
        for part in active:
            part.done = part.covered >= part.end
            touched = part.touched and part.covered < part.start  # a gap not yet committed
            part.reset_txn()
            part.touched = touched
            if not part.done:
                if part.paused:
                    consumer.resume([KTP(part.topic, part.partition)])
                    part.paused = False
                consumer.seek(KTP(part.topic, part.partition, part.read_from))

    def _transaction(self, producer: Producer, consumer: Consumer, metadata: Any,
                     active: list[_Part]) -> None:
        if self.exactly_once:
            self._call(producer.begin_transaction, self.flow.target, "beginning a transaction")
            self.in_transaction = True
        opened = time.monotonic()
        records = 0
        limit_records = self.flow.ferry.transaction_max_records
        limit_s = self.flow.ferry.transaction_max_seconds
        by_key = {(p.topic, p.partition): p for p in active}
        while any(not p.done for p in active):
            messages = consumer.consume(BATCH, POLL_S)
            if not messages:
                self._check_positions(consumer, active)
                now = time.monotonic()
                stalled = [p for p in active if not p.done and now - p.progress_at > STALL_S]
                if stalled:
                    raise TransientError(self._stalled(stalled))
            for message in messages:
                records += self._take(producer, message, by_key)
            finished = [p for p in active if p.done and not p.paused]
            if finished:  # stop fetching past `end`
                consumer.pause([KTP(p.topic, p.partition) for p in finished])
                for part in finished:
                    part.paused = True
            if records >= limit_records or time.monotonic() - opened >= limit_s:
                break
        self._commit(producer, metadata, list(self.parts.values()))
        self.copied += records
        if self.progress is not None:
            self.progress(self.copied, self.total)

    def _take(self, producer: Producer, message: Message,
              parts: dict[tuple[str, int], _Part]) -> int:
        error = message.error()
        key = (message.topic(), message.partition())
        part = parts.get(key)  # type: ignore[arg-type]
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                if part is not None and not part.done and _offset(message) >= part.end:
                    part.done, part.touched = True, True
                    part.moved()
                return 0
            if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                raise TerminalError(
                    f"flow {self.flow.name}: {key[0]}-{key[1]}: offsets from "
                    f"{part.covered if part else '?'} were deleted by retention while being "
                    "copied; the next run records the gap")
            if transient(error):  # librdkafka reconnects and fetches again by itself; a
                # partition that never moves again fails the lane after STALL_S
                log.warning("reading %s-%s: %s; waiting", key[0], key[1], error.str(),
                            extra={"flow": self.flow.name, "lane": self.lane})
                return 0
            raise self._error(KafkaException(error), self.flow.source,
                              f"reading {key[0]}-{key[1]}")
        if part is None or part.done:
            return 0
        offset = _offset(message)
        part.moved()
        if offset >= part.end:
            part.done, part.touched = True, True
            return 0
        part.touched = True
        if part.pending is not None:
            self._send(producer, part, part.pending,
                       report=part.sent == 0 or self.diagnose or not self.exactly_once)
        part.pending = message
        part.builder.add(offset)
        part.last_offset = offset
        self._account(part, message)
        if offset >= part.end - 1:
            part.done = True
        return 1

    def _account(self, part: _Part, message: Message) -> None:
        offset = _offset(message)
        for result in part.ranges:
            if result.start <= offset < result.end:
                value, key = message.value(), message.key()
                size = (len(value) if value else 0) + (len(key) if key else 0)
                part.read.append((offset, size))
                part.txn_bytes += size
                if not result.max_age_ms and not result.records:  # its first record
                    kind, ts = message.timestamp()
                    if kind:
                        result.max_age_ms = max(1, int(time.time() * 1000) - ts)
                return

    def _send(self, producer: Producer, part: _Part, message: Message, report: bool) -> None:
        kind, ts = message.timestamp()
        kwargs: dict[str, Any] = {"partition": part.partition}
        if kind:  # CreateTime (or LogAppendTime) preserved; 0 = not available
            kwargs["timestamp"] = ts
        headers = message.headers()
        if headers:
            kwargs["headers"] = headers
        if report:
            kwargs["on_delivery"] = self._reporter(part, _offset(message))
        while True:
            try:
                producer.produce(part.remote, message.value(), message.key(), **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                text = self._refusal(part, _offset(message), exc.args[0])
                if self.exactly_once:
                    raise TerminalError(text) from None
                part.refuse(_offset(message))
                self.refused = self.refused or (part.topic, part.partition, text)
                raise _Refused(text) from None
        part.sent += 1

    def _reporter(self, part: _Part, source_offset: int) -> Callable[[Any, Message], None]:
        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
                    return
                part.refuse(source_offset)
                if self.refused is None:
                    self.refused = (part.topic, part.partition,
                                    self._refusal(part, source_offset, err))
                return
            offset = _offset(msg)
            if part.first_target is None or offset < part.first_target:
                part.first_target = offset
            if part.last_target is None or offset > part.last_target:
                part.last_target = offset

        return report

    def _refusal(self, part: _Part, source_offset: int, err: Any) -> str:
        text = err.str() if isinstance(err, KafkaError) else str(err)
        if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            text = str(kafka_error(KafkaException(err), self.flow.target, "writing",
                                   principal=self.flow.producer.principal,
                                   needs=f"WRITE on TOPIC {part.remote}"))
        return (f"flow {self.flow.name}: cluster {self.flow.target} refused the record of "
                f"{part.topic}-{part.partition} at source offset {source_offset} (remote "
                f"topic {part.remote}): {text}")

    def _check_positions(self, consumer: Consumer, active: list[_Part]) -> None:
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
                part.done, part.touched = True, True

    def _stalled(self, active: list[_Part]) -> str:
        waiting = ", ".join(f"{p.topic}-{p.partition} at {max(p.covered, p.last_offset + 1)}"
                            f" of {p.end}" for p in active if not p.done)
        return (f"flow {self.flow.name} lane {self.lane}: no progress for {STALL_S:.0f}s on "
                f"{waiting}: is the partition's leader offline on {self.flow.source}? Nothing "
                "past the last commit was kept; the next run resumes there")

    def _commit_transaction(self, producer: Producer, metadata: Any, offsets: list[KTP]) -> None:
        if offsets:
            self._call(lambda: producer.send_offsets_to_transaction(
                offsets, metadata, CALL_TIMEOUT_S), self.flow.target, "committing positions")
        try:  # a retriable failure: the same call again (librdkafka's contract)
            self._retrying(lambda: producer.commit_transaction(CALL_TIMEOUT_S),
                           self.flow.target, "committing a transaction")
            self.in_transaction = False
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                raise _Refused(err.str()) from None
            raise self._error(exc, self.flow.target, "committing a transaction") from None

    def _commit_positions(self, producer: Producer, offsets: list[KTP]) -> None:
        """at_least_once: the offset-map entries acknowledged, then the positions."""
        remaining = self._flush(producer)
        if remaining or self.refused is not None:
            why = self.refused[2] if self.refused else f"{remaining} entries unacknowledged"
            raise TransientError(f"{why}; no position was committed over it: the next run "
                                 "copies this batch again")
        if offsets and self.reader is not None:
            reader = self.reader
            self._call(lambda: reader.commit(offsets=offsets, asynchronous=False),
                       self.flow.target, "committing positions")

    def _flush(self, producer: Producer) -> int:
        """Wait for delivery reports; stop at the first refusal (after one, the transaction
        must abort and the records queued behind it are never sent)."""
        deadline = time.monotonic() + CALL_TIMEOUT_S
        remaining = self._flush_once(producer)
        while remaining and self.refused is None and time.monotonic() < deadline:
            remaining = self._flush_once(producer)
        return int(remaining)

    def _flush_once(self, producer: Producer) -> int:
        """One `flush` slice. A producer another owner fenced meanwhile has a fatal error,
        and confluent-kafka's flush then fails without an exception of its own (SystemError:
        "returned NULL without setting an exception"): that is this lane losing the
        partition to a newer owner, not a crash."""
        try:
            return int(producer.flush(0.5))
        except (SystemError, KafkaException) as exc:
            raise TransientError(
                f"flow {self.flow.name} lane {self.lane}: its producer ({self.txn_id}) was "
                f"fenced by a newer owner of its partitions (another lane count, a backfill "
                f"or a newer run) and stopped; nothing past its last commit was kept: {exc}"
            ) from None

    def _remote_end(self, part: _Part) -> int | None:
        """The remote partition's last stable offset (this transaction wrote nothing there)."""
        reader = self.reader
        if reader is None:
            return None
        _, end = self._call(lambda: reader.get_watermark_offsets(
            KTP(part.remote, part.partition), timeout=CALL_TIMEOUT_S), self.flow.target,
            f"reading the end of {part.remote}-{part.partition}")
        return int(end)

    def _send_entry(self, producer: Producer, entry: MapEntry) -> None:
        """Produce one offset-map entry, its delivery checked: positions are never committed
        over an entry the target did not take (at_least_once has no transaction to fail)."""
        def report(err: KafkaError | None, _msg: Message) -> None:
            if err is not None and self.refused is None:
                self.refused = (entry.source_topic, entry.source_partition,
                                f"flow {self.flow.name}: cluster {self.flow.target} refused "
                                f"the offset-map entry of {entry.source_topic}-"
                                f"{entry.source_partition} offsets {entry.covered_start}.."
                                f"{entry.covered_end - 1} on {self.map_topic}: {err.str()}")

        key, value = encode(entry)
        while True:
            try:
                producer.produce(self.map_topic, value, key, partition=0, on_delivery=report)
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                raise self._error(exc, self.flow.target,
                                  f"writing the offset-map entry to {self.map_topic}") from None

    def _commit(self, producer: Producer, metadata: Any, parts: list[_Part]) -> None:
        touched = [p for p in parts if p.touched]
        for part in touched:
            if part.pending is not None:
                if part.refused_at is None:  # nothing at or after a refusal is sent
                    self._send(producer, part, part.pending, report=True)
                part.pending = None
        remaining = self._flush(producer)
        refusal = None
        if self.refused is not None and not self.exactly_once:
            # at_least_once: every record has its report; wait for all of them, then
            # commit the acknowledged ones before the refusal, so that no later run writes
            # them again; the run fails naming the refused record.
            deadline = time.monotonic() + CALL_TIMEOUT_S
            while remaining and time.monotonic() < deadline:
                remaining = self._flush_once(producer)
            refusal = self.refused[2]
            for part in touched:
                if part.refused_at is not None:
                    part.keep_before_refusal()
        if (self.refused is not None and refusal is None) or remaining:
            raise _Refused(self.refused[2] if self.refused else f"{remaining} records unsent")
        now_ms = int(time.time() * 1000)
        offsets = []
        ends: dict[tuple[str, int], int] = {}
        for part in touched:
            covered_end = part.covered_end
            ends[(part.topic, part.partition)] = covered_end
            count = part.builder.count
            try:
                segments = (part.builder.finish(part.first_target, part.last_target)
                            if count and part.first_target is not None
                            and part.last_target is not None else ())
            except SegmentError as exc:
                raise TerminalError(f"flow {self.flow.name}: remote partition "
                                    f"{part.remote}-{part.partition}: {exc}") from None
            if count and not segments:
                raise _Refused(f"no delivery report for {part.topic}-{part.partition}")
            if segments:
                part.target_end = segments[-1].target_end
            elif part.target_end is None:  # nothing mirrored yet: where the remote one ends
                part.target_end = self._remote_end(part)
            entry = MapEntry(self.flow.name, self.run_id, self.lane, part.topic, part.partition,
                             part.remote, part.partition, part.covered, covered_end,
                             segments, now_ms, part.txn_bytes, part.target_end,
                             part.source_id, part.target_id)
            for piece in split_entry(entry):  # an entry stays far below the record limit
                self._send_entry(producer, piece)
            offsets.append(KTP(part.remote, part.partition, covered_end,
                               metadata=position_metadata(
                                   part.target_end, self.txn_id if self.exactly_once else "",
                                   part.source_id)))
        if self.exactly_once:
            self._commit_transaction(producer, metadata, offsets)
        else:
            if refusal is not None:  # the entries of what was acknowledged, then the stop
                self.refused = None
            self._commit_positions(producer, offsets)
        self.transactions += 1
        for part in touched:
            part.covered = ends[(part.topic, part.partition)]
            part.settle(part.covered)
            part.reset_txn()
        for part in parts:
            for result in part.ranges:
                if result.outcome == "pending" and part.covered >= result.end:
                    result.outcome = "copied"
                    result.seconds = round(time.monotonic() - self.started, 3)
        if refusal is not None:
            raise _RefusedKept(f"{refusal}; the records before it are committed: the next "
                               "run starts at it")
