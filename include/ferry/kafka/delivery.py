"""The two delivery modes of a lane (adapter): what differs, in one place each.

The lane's loop (read, send, commit, abort, re-run one record per request to name a
refusal) is the same for both; a `Delivery` decides the rest:

- `ExactlyOnce` (`ferry.delivery=exactly_once`): a transactional producer. Records,
  offset-map entries and positions commit in one transaction or not at all (G1, G4). Before
  writing, the lane fences every previous owner of its partitions. A refused record aborts
  the transaction; nothing of it is kept.
- `AtLeastOnce` (targets without transactions): an idempotent producer. Per batch: records
  acknowledged, then the offset-map entries, then the positions as plain group offsets. A
  crash between them re-copies only that batch, and the next run counts those duplicates
  (the remote partition's end against the end recorded with the last positions). A refused
  record keeps what was acknowledged before it; the position stops at it. The writer slot
  is claimed in Kafka (`ferry.kafka.claim`) before the positions are read, and the claim is
  checked before each batch and each position commit, so a replaced writer stops.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Any, NoReturn, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.config.clients import RdValue
from ferry.core.positions import encode_position
from ferry.core.tables import RangeOutcome
from ferry.errors import FerryError, TerminalError, TransientError
from ferry.kafka import stuck
from ferry.kafka.claim import WriterClaim
from ferry.kafka.lane_errors import LaneErrors
from ferry.kafka.lane_state import Part, Refusal
from ferry.kafka.limits import POSITIONS_PER_COMMIT, chunks
from ferry.kafka.stuck import LeftBehind

CALL_TIMEOUT_S = 60.0
REPORTS_S = 5.0
"""How long a transaction that became abortable waits for its delivery reports, to name a
refused record: the refusal's report is queued when the state turns, so this is rarely
waited out (only when no record was refused and reports are still outstanding)."""


class Lane(Protocol):
    """What a delivery mode uses of its lane (`ferry.kafka.lane.Lane`, which picks the
    mode): declared here, so this module does not import the lane that imports it."""

    flow: Flow
    lane: int
    txn_id: str
    parts: dict[tuple[str, int], Part]
    explain: LaneErrors
    log: logging.Logger
    reader: Consumer | None
    refused: Refusal | None
    in_transaction: bool
    claim: WriterClaim | None
    left_behind: LeftBehind | None

    def call(self, call: Callable[[], Any], cluster: str, action: str) -> Any: ...

    def kafka_error(self, exc: KafkaException, cluster: str, action: str) -> FerryError: ...

    def retrying(self, call: Callable[[], Any], cluster: str, action: str) -> Any: ...

    def remote_end(self, reader: Consumer, part: Part) -> int: ...

    def flush(self, producer: Producer, until_refused: bool = True,
              seconds: float = CALL_TIMEOUT_S) -> int: ...

    def resume_from_committed(self, reader: Consumer) -> None: ...

    def learn_targets(self, producer: Producer) -> None: ...

    def commit(self, producer: Producer, metadata: Any, parts: list[Part]) -> None: ...


class Refused(Exception):
    """The batch failed in a way an abort and a re-run may fix (or pinpoint). `unanswered`:
    the target did not acknowledge the batch in time (a state that passes), rather than
    refusing a record of it."""

    def __init__(self, text: str, unanswered: bool = False) -> None:
        super().__init__(text)
        self.unanswered = unanswered


class RefusedKept(TerminalError):
    """at_least_once: the target refused a record; what was acknowledged before it is
    committed, and the partition's position stops at it."""


class Delivery(ABC):
    """What a delivery mode decides for a lane; see the module's docstring. The hooks
    without a body here are the ones each mode must decide; the others default to
    nothing to do."""

    name = ""
    reports_every_record = False
    """A delivery report for every record (else for the first and last of each partition
    and transaction: their distance must equal the record count)."""

    def producer_settings(self, flow: Flow, txn_id: str) -> dict[str, RdValue]:
        """Producer settings on top of idempotence and acks=all."""
        return {}

    def start(self, lane: Lane, producer: Producer) -> None:
        """A new producer for the lane, before its first batch."""
        return None  # by default, nothing to do

    def found_position(self, lane: Lane, reader: Consumer, part: Part) -> None:
        """`part`'s committed position was just read (`part.target_end` is its metadata's)."""
        return None  # by default, nothing to do

    @abstractmethod
    def before_copy(self, lane: Lane, reader: Consumer) -> None:
        """Positions read; nothing copied yet."""

    def begin(self, lane: Lane, producer: Producer) -> None:
        """A batch begins."""
        return None  # by default, nothing to do

    @abstractmethod
    def refused_on_send(self, lane: Lane, part: Part, source_offset: int,
                        text: str) -> NoReturn:
        """The producer refused a record locally (it was never queued)."""

    @abstractmethod
    def after_refused_batch(self, lane: Lane, producer: Producer, metadata: Any,
                            exc: Refused) -> NoReturn:
        """A batch failed with `exc`, before its commit took anything."""

    def reported(self, lane: Lane) -> None:
        """The batch's records are flushed, before its reports' offsets are checked and
        recorded."""
        return None  # by default, nothing to do

    @abstractmethod
    def refusal_to_keep(self, lane: Lane, producer: Producer, touched: list[Part],
                        remaining: int) -> str | None:
        """Reports flushed (`remaining` unacknowledged): raise `Refused` if the batch cannot
        commit, or return the refusal whose predecessors are committed regardless."""

    def owner(self, lane: Lane) -> str:
        """Recorded with each position: the id the next owner must fence ("" for none)."""
        return ""

    @abstractmethod
    def commit(self, lane: Lane, producer: Producer, metadata: Any, offsets: list[KTP],
               refusal: str | None) -> None:
        """Commit the batch's positions `offsets` (its records and entries are sent)."""

    def abort(self, lane: Lane, producer: Producer, seconds: float = CALL_TIMEOUT_S,
              again: bool = False) -> None:
        """Throw the failed batch away before it is read again (waiting at most `seconds`;
        with `again`, an abort that fails retriably is made again, within
        `ferry.kafka.retry.seconds`)."""
        return None  # by default, nothing to do

    def abort_open(self, lane: Lane, producer: Producer) -> None:
        """After a failure of the lane: best effort, leave nothing open."""
        return None  # by default, nothing to do


class ExactlyOnce(Delivery):
    name = "exactly_once"

    def producer_settings(self, flow: Flow, txn_id: str) -> dict[str, RdValue]:
        txn_timeout = max(60_000, int(flow.ferry.transaction_max_seconds * 6_000))
        return {"transaction.timeout.ms": txn_timeout, "transactional.id": txn_id}

    def start(self, lane: Lane, producer: Producer) -> None:
        """Initialising the lane's transactional id fences every older producer with it (a
        zombie task, or this lane's previous producer) and aborts its open transaction."""
        lane.learn_targets(producer)
        lane.call(lambda: producer.init_transactions(CALL_TIMEOUT_S), lane.flow.target,
                  f"initialising transactions of lane {lane.lane}")

    def before_copy(self, lane: Lane, reader: Consumer) -> None:
        """Concurrent writers of a partition share its slot's id and fence each other in
        `start`. This covers the ids of before that rule, recorded with a position: ids of a
        lane count (`lane-k-of-n`, older releases) or of another `ferry.writers`. Before
        writing such a partition, fence that id: `init_transactions` with it aborts its open
        transaction and makes a producer still holding it (a zombie) fail at its next
        commit. Then the positions are read again: whatever the old owner committed last is
        where this lane resumes."""
        owners = sorted({p.owner for p in lane.parts.values()
                         if p.owner and p.owner != lane.txn_id})
        if not owners:
            return
        flow = lane.flow
        for owner in owners:
            lane.log.info("lane %s: fencing %s, the previous owner of some of its partitions",
                          lane.lane, owner, extra={"flow": flow.name, "lane": lane.lane})
            fencer = Producer(flow.producer.confluent({
                "transactional.id": owner, "enable.idempotence": True, "acks": "all",
                "log_level": 3}))
            lane.learn_targets(fencer)
            lane.call(lambda f=fencer: f.init_transactions(CALL_TIMEOUT_S),  # type: ignore[misc]
                      flow.target, f"fencing the previous owner {owner}")
            fencer.flush(0)
        for part in lane.parts.values():  # read again: the fenced owner may have committed
            part.covered, part.done, part.txn.touched = part.start, False, False
            for result in part.ranges:
                result.outcome = RangeOutcome.PENDING
        lane.resume_from_committed(reader)

    def begin(self, lane: Lane, producer: Producer) -> None:
        lane.call(producer.begin_transaction, lane.flow.target, "beginning a transaction")
        lane.in_transaction = True

    def refused_on_send(self, lane: Lane, part: Part, source_offset: int,
                        text: str) -> NoReturn:
        raise TerminalError(text)

    def after_refused_batch(self, lane: Lane, producer: Producer, metadata: Any,
                            exc: Refused) -> NoReturn:
        raise exc  # the lane aborts it and re-runs it one record per request

    def refusal_to_keep(self, lane: Lane, producer: Producer, touched: list[Part],
                        remaining: int) -> str | None:
        if lane.refused is not None:
            raise Refused(lane.refused.text, lane.refused.unanswered)
        if remaining:
            raise Refused(f"cluster {lane.flow.target} did not acknowledge {remaining} "
                          f"records within {CALL_TIMEOUT_S:.0f}s", unanswered=True)
        return None

    def owner(self, lane: Lane) -> str:
        return lane.txn_id

    def commit(self, lane: Lane, producer: Producer, metadata: Any, offsets: list[KTP],
               refusal: str | None) -> None:
        target = lane.flow.target
        if offsets:  # bounded: librdkafka may never return from it (kafka/stuck.py)
            what = "committing positions"
            try:
                lane.retrying(lambda: self._send_positions(producer, offsets, metadata,
                                                           lane.left_behind), target, what)
            except KafkaException as exc:
                # A record the broker refused may be learnt here already, not only at the
                # commit: which call learns it first is a matter of timing.
                if exc.args[0].txn_requires_abort():
                    raise self._refused(lane, producer, exc.args[0]) from None
                raise lane.kafka_error(exc, target, what) from None
        try:  # a retriable failure: the same call again (librdkafka's contract)
            lane.retrying(lambda: producer.commit_transaction(CALL_TIMEOUT_S), target,
                          "committing a transaction")
            lane.in_transaction = False
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                raise self._refused(lane, producer, err) from None
            raise lane.kafka_error(exc, target, "committing a transaction") from None

    @staticmethod
    def _refused(lane: Lane, producer: Producer, err: KafkaError) -> Refused:
        """The transaction became abortable. When a refused record's answer reaches
        librdkafka while the positions are in flight, the call fails with the text of the
        request it cut short ("Local: Erroneous state"), naming nothing; the refusal itself
        is in a delivery report not yet served. So serve the reports (briefly) and name the
        refused record when there is one."""
        lane.flush(producer, seconds=REPORTS_S)
        if lane.refused is not None:
            return Refused(lane.refused.text, lane.refused.unanswered)
        return Refused(err.str())

    @staticmethod
    def _send_positions(producer: Producer, offsets: list[KTP], metadata: Any,
                        left: LeftBehind | None) -> None:
        """The transaction's positions, in commits that `__consumer_offsets` takes
        (`POSITIONS_PER_COMMIT`); all of them commit with the transaction. Sent again
        whole after a retriable failure: a position sent twice in one transaction is the
        same position."""
        for part in chunks(offsets, POSITIONS_PER_COMMIT):
            stuck.send_offsets(producer, part, metadata, "committing positions", left)

    def abort(self, lane: Lane, producer: Producer, seconds: float = CALL_TIMEOUT_S,
              again: bool = False) -> None:
        """Abort the open transaction. With `again`, an abort that fails retriably (its
        time up with a message still outstanding: a loaded target answering late) is made
        again, as librdkafka allows, within `ferry.kafka.retry.seconds`. Without, it fails
        at once: a batch the target did not acknowledge leaves its abort to the next
        producer of the id (`lane_recovery.wait_out`), since the abort's own markers wait
        for the same replicas."""
        def abort() -> None:
            producer.abort_transaction(seconds)

        try:
            if again:
                lane.retrying(abort, lane.flow.target, "aborting a transaction")
            else:
                abort()
            lane.in_transaction = False
        except KafkaException as exc:
            if not exc.args[0].fatal():
                raise lane.explain.kafka(exc, lane.flow.target,
                                         "aborting a transaction") from None
            # A fatal producer cannot abort; the next init_transactions aborts for it.

    def abort_open(self, lane: Lane, producer: Producer) -> None:
        """Abort the transaction the lane left open, so the partitions' last stable offsets
        do not wait for the broker's transaction timeout. A fenced or fatal producer
        cannot; the next run's init_transactions aborts it then."""
        if not lane.in_transaction:
            return
        try:
            producer.abort_transaction(10)
        except KafkaException as exc:
            lane.log.warning("lane %s: could not abort its open transaction (%s); the next "
                             "run's init_transactions aborts it", lane.lane, exc.args[0].str(),
                             extra={"flow": lane.flow.name, "lane": lane.lane})
        lane.in_transaction = False


class AtLeastOnce(Delivery):
    name = "at_least_once"
    reports_every_record = True

    def start(self, lane: Lane, producer: Producer) -> None:
        """The slot claimed in Kafka (`ferry.kafka.claim`) before the positions are read,
        once per lane: a later producer of the lane checks the claim instead of taking it
        again, which would replace a newer writer."""
        if lane.claim is None:
            lane.claim = WriterClaim(lane.flow, lane.txn_id)
            lane.claim.take()
        else:
            lane.claim.check()

    def begin(self, lane: Lane, producer: Producer) -> None:
        """A replaced writer sends no further batch."""
        if lane.claim is not None:
            lane.claim.check()

    def reported(self, lane: Lane) -> None:
        """A replaced writer stops as such, before its reports show a newer writer's
        records between its own (which would read as a foreign producer)."""
        if lane.claim is not None:
            lane.claim.check()

    def found_position(self, lane: Lane, reader: Consumer, part: Part) -> None:
        """Records past the end recorded with the last positions were written by a run that
        crashed before committing them; this run copies them again: count them."""
        if part.target_end is None:
            return
        end = lane.remote_end(reader, part)
        duplicates = max(0, end - part.target_end)
        part.duplicates = duplicates
        if duplicates:
            part.ranges[0].duplicates = duplicates
            lane.log.warning("%d records of %s-%s were written by an unfinished run and will "
                             "be copied again (at_least_once)", duplicates, part.remote,
                             part.partition, extra={"flow": lane.flow.name, "topic": part.topic,
                                                    "partition": part.partition})
        part.target_end = end

    def before_copy(self, lane: Lane, reader: Consumer) -> None:
        """Before a partition's first batch, commit its start position with the remote
        partition's current end, so that a crash in that batch can be measured (anything
        already in the remote topic is not counted as a duplicate)."""
        new = [p for p in lane.parts.values() if p.target_end is None and not p.done]
        if not new:
            return
        if lane.claim is not None:
            lane.claim.check()
        offsets = []
        for part in new:
            part.target_end = lane.remote_end(reader, part)
            offsets.append(KTP(part.remote, part.partition, part.covered,
                               metadata=encode_position(part.target_end,
                                                          source_id=part.source_id,
                                                          target_id=part.target_id)))
        _commit_plainly(lane, reader, offsets, "committing start positions")

    def refused_on_send(self, lane: Lane, part: Part, source_offset: int,
                        text: str) -> NoReturn:
        part.txn.refuse(source_offset)
        lane.refused = lane.refused or Refusal(text)
        raise Refused(text)

    def after_refused_batch(self, lane: Lane, producer: Producer, metadata: Any,
                            exc: Refused) -> NoReturn:
        """A local refusal: nothing to abort; commit what was acknowledged before it."""
        try:
            lane.commit(producer, metadata, list(lane.parts.values()))
        except Refused as again:
            raise TerminalError(str(again)) from None
        raise TerminalError(lane.refused.text if lane.refused else str(exc)) from None

    def refusal_to_keep(self, lane: Lane, producer: Producer, touched: list[Part],
                        remaining: int) -> str | None:
        """Every record has its report: after a refusal, wait for all of them, then keep
        the acknowledged ones before it, so that no later run writes them again; the run
        fails naming the refused record."""
        if lane.refused is None:
            if remaining:
                raise Refused(f"{remaining} records unsent")
            return None
        if lane.flush(producer, until_refused=False):
            raise Refused(lane.refused.text)
        for part in touched:
            if part.txn.refused_at is not None:
                part.keep_before_refusal()
        return lane.refused.text

    def commit(self, lane: Lane, producer: Producer, metadata: Any, offsets: list[KTP],
               refusal: str | None) -> None:
        """The offset-map entries acknowledged, then the positions."""
        if refusal is not None:  # its entries are sent; the refusal itself is reported later
            lane.refused = None
        remaining = lane.flush(producer)
        if remaining or lane.refused is not None:
            why = lane.refused.text if lane.refused else f"{remaining} entries unacknowledged"
            raise TransientError(f"{why}; no position was committed over it: the next run "
                                 "copies this batch again")
        reader = lane.reader
        if offsets and reader is not None:
            if lane.claim is not None:
                lane.claim.check()
            _commit_plainly(lane, reader, offsets, "committing positions")


def _commit_plainly(lane: Lane, reader: Consumer, offsets: list[KTP], what: str) -> None:
    """Commit positions outside a transaction, in commits `__consumer_offsets` takes
    (`POSITIONS_PER_COMMIT`). Each part stands alone: a position is committed only after
    what it covers was acknowledged, so any part committed before a failure is true."""
    for part in chunks(offsets, POSITIONS_PER_COMMIT):
        lane.call(partial(reader.commit, offsets=part, asynchronous=False), lane.flow.target,
                  what)


def delivery_for(flow: Flow) -> Delivery:
    """The delivery mode `ferry.delivery` names."""
    return ExactlyOnce() if flow.ferry.delivery == "exactly_once" else AtLeastOnce()
