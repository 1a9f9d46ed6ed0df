"""An in-memory Kafka cluster with transactions, for the lane's broker-free tests.

It keeps what a lane's correctness rests on, as Kafka does it: a partition's log with one
offset per record and per transaction marker; records of a transaction visible to
read_committed readers only once committed, never when aborted; group offsets sent to a
transaction committed with it; `init_transactions` bumping the transactional id's epoch,
which aborts the older producer's open transaction and fences that producer (its later
calls fail with PRODUCER_FENCED). Delivery reports come from `poll` and `flush`, with the
target offsets the records took.

What it leaves out (timing, batching, leaders, retries inside the client) is what the
integration tests on real brokers cover. A test can make the cluster refuse a record
(`refuse`, `refuse_topic`), leave a topic's records unacknowledged for a number of
transactions (`silence`), or fence a writer from outside (`fence`), and can make a refusal
reach the producer while its positions are in flight (`refusals_land_mid_positions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KTP

Key = tuple[str, int]


@dataclass
class Stored:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    timestamp: int
    txn: int | None = None
    """The transaction that wrote it (None: outside any); its state is in `FakeKafka.txns`."""
    marker: bool = False


@dataclass
class Txn:
    owner: str
    state: str = "open"  # open, committed, aborted
    offsets: dict[str, dict[Key, tuple[int, str]]] = field(default_factory=dict)


OFFSETS_PER_COMMIT = 4_500
"""About what one commit of Ferry's positions may carry: the coordinator writes it as one
record batch, refused above 1 MB (`max.message.bytes` of `__consumer_offsets`)."""


class FakeKafka:
    """One cluster: logs by (topic, partition), group offsets, transactional id epochs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.logs: dict[Key, list[Stored]] = {}
        self.groups: dict[str, dict[Key, tuple[int, str]]] = {}
        self.epochs: dict[str, int] = {}
        self.txns: list[Txn] = []
        self.refusals: dict[tuple[str, bytes | None], KafkaError] = {}
        self.refused_topics: dict[str, KafkaError] = {}
        self.silent: dict[str, int] = {}
        """Topic -> how many more transactions writing to it get no acknowledgement."""
        self.silenced: set[tuple[str, int]] = set()
        """(topic, transaction) pairs whose records time out."""
        self.refusals_land_mid_positions = False
        """A refusal of a queued record reaches the producer during its next
        `send_offsets_to_transaction`, as librdkafka's background thread may take the
        broker's answer at any moment: the call fails with librdkafka's text for a request
        cut short ("Erroneous state"), which does not name the refusal; the record's own
        report waits for the next poll."""
        self.claims: dict[str, FakeClaim] = {}
        """Writer slot -> the claim that holds it (at_least_once targets)."""
        self.offsets_per_commit = OFFSETS_PER_COMMIT
        self.commits: list[int] = []
        """The offsets each commit carried (transactional or plain), in order."""
        self.slow_aborts = 0
        """How many more aborts time out with a message still outstanding (a loaded
        broker's answer late), as librdkafka's do: retriable, the transaction still open."""

    def take_commit(self, offsets: list[KTP], in_transaction: bool) -> None:
        """One offset commit as the group coordinator takes it: refused whole when its
        records would not fit one write to `__consumer_offsets`."""
        if len(offsets) > self.offsets_per_commit:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN, "Unknown broker error",
                                            txn_requires_abort=in_transaction))
        self.commits.append(len(offsets))

    # -- set-up --------------------------------------------------------------------------

    def create(self, topic: str, partitions: int = 1) -> None:
        for p in range(partitions):
            self.logs.setdefault((topic, p), [])

    def metadata(self, topic: str | None) -> Any:
        """`list_topics`' answer: every topic, or the one asked about."""
        from types import SimpleNamespace

        names = {t for t, _ in self.logs} if topic is None else {topic}
        found = {}
        for name in names:
            partitions = {p: SimpleNamespace(leader=1) for t, p in self.logs if t == name}
            error = None if partitions else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            found[name] = SimpleNamespace(error=error, partitions=partitions)
        return SimpleNamespace(topics=found)

    def append(self, topic: str, partition: int, records: list[tuple[bytes, bytes]],
               timestamp: int = 1_700_000_000_000) -> None:
        """Plain (non-transactional) records, as a source's producers write them."""
        log = self.logs[(topic, partition)]
        for i, (key, value) in enumerate(records):
            log.append(Stored(len(log), key, value, [("seq", str(i).encode())],
                              timestamp + i))

    def refuse(self, topic: str, value: bytes, code: int = KafkaError.MSG_SIZE_TOO_LARGE
               ) -> None:
        """The cluster refuses every record of `value` written to `topic`."""
        self.refusals[(topic, value)] = KafkaError(code)

    def refuse_topic(self, topic: str, code: int = KafkaError.MSG_SIZE_TOO_LARGE) -> None:
        """The cluster refuses every record written to `topic` (a record limit below any
        record's size)."""
        self.refused_topics[topic] = KafkaError(code)

    def silence(self, topic: str, transactions: int) -> None:
        """The next `transactions` transactions that write to `topic` get no
        acknowledgement of those records: each times out (librdkafka's `_MSG_TIMED_OUT`), as
        when the partition has no leader or too few in-sync replicas for `acks=all`."""
        self.silent[topic] = transactions

    def refusal_of(self, topic: str, value: bytes | None, txn: int | None = None
                   ) -> KafkaError | None:
        if txn is not None and self.silent.get(topic, 0) > 0 \
                and (topic, txn) not in self.silenced:
            self.silent[topic] -= 1
            self.silenced.add((topic, txn))
        if (topic, txn) in self.silenced:
            return KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")
        return self.refusals.get((topic, value)) or self.refused_topics.get(topic)

    def fence(self, txn_id: str) -> None:
        """Another producer initialises `txn_id` (a newer writer): the current one is fenced
        and its open transaction aborted."""
        self._init(txn_id)

    # -- reads, as a test sees the cluster ----------------------------------------------

    def committed_records(self, topic: str, partition: int) -> list[Stored]:
        return [r for r in self.logs[(topic, partition)] if self._visible(r)]

    def end(self, key: Key) -> int:
        return len(self.logs[key])

    def stable_end(self, key: Key) -> int:
        """The last stable offset: the first offset of a still open transaction, else the
        end."""
        for record in self.logs[key]:
            if record.txn is not None and self.txns[record.txn].state == "open":
                return record.offset
        return self.end(key)

    def _visible(self, record: Stored) -> bool:
        return not record.marker and (record.txn is None
                                      or self.txns[record.txn].state == "committed")

    # -- transactions -------------------------------------------------------------------

    def _init(self, txn_id: str) -> int:
        epoch = self.epochs.get(txn_id, -1) + 1
        self.epochs[txn_id] = epoch
        for index, txn in enumerate(self.txns):  # the older epoch's open one is aborted
            if txn.state == "open" and txn.owner == txn_id:
                self._end(index, "aborted")
        return epoch

    def _end(self, index: int, state: str) -> None:
        txn = self.txns[index]
        txn.state = state
        touched = {k for k, log in self.logs.items() for r in log if r.txn == index}
        for key in touched:  # a marker takes an offset in every partition it wrote
            log = self.logs[key]
            log.append(Stored(len(log), None, None, None, 0, index, marker=True))
        if state == "committed":
            for group, offsets in txn.offsets.items():
                self.groups.setdefault(group, {}).update(offsets)

    def producer(self, txn_id: str) -> FakeProducer:
        return FakeProducer(self, txn_id)

    def consumer(self, group: str = "", read_committed: bool = True) -> FakeConsumer:
        return FakeConsumer(self, group, read_committed)


def _fenced() -> KafkaException:
    return KafkaException(KafkaError(KafkaError.PRODUCER_FENCED,
                                     "Producer fenced by a newer instance", fatal=True))


class FakeProducer:
    """A transactional producer of `txn_id`, with the calls a lane makes."""

    def __init__(self, kafka: FakeKafka, txn_id: str) -> None:
        self.kafka, self.txn_id = kafka, txn_id
        self.epoch: int | None = None
        self.txn: int | None = None
        self.queued: list[tuple[str, int, Stored, Callable[..., None] | None]] = []
        self.failed: KafkaError | None = None
        """The refusal that made the open transaction abortable."""

    def _check(self) -> None:
        if self.epoch is not None and self.kafka.epochs.get(self.txn_id) != self.epoch:
            raise _fenced()

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """The topic's metadata: its partitions, or UNKNOWN_TOPIC_OR_PART (as a broker
        answers for a topic it does not have and may not create)."""
        return self.kafka.metadata(topic)

    def init_transactions(self, timeout: float = -1) -> None:
        self.epoch = self.kafka._init(self.txn_id)

    def begin_transaction(self) -> None:
        self._check()
        self.kafka.txns.append(Txn(self.txn_id))
        self.txn = len(self.kafka.txns) - 1

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, on_delivery: Callable[..., None] | None = None,
                callback: Callable[..., None] | None = None, timestamp: int = 0,
                headers: list[tuple[str, bytes]] | None = None) -> None:
        self._check()
        if (topic, partition) not in self.kafka.logs:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        self.queued.append((topic, partition, Stored(-1, key, value, headers, timestamp,
                                                     self.txn), on_delivery or callback))

    def poll(self, timeout: float = 0) -> int:
        """Deliver what is queued: each record appended (or refused), its report served."""
        served = 0
        while self.queued:
            topic, partition, record, report = self.queued.pop(0)
            fenced = self.epoch is not None and self.kafka.epochs.get(self.txn_id) != self.epoch
            refusal = self.kafka.refusal_of(topic, record.value, self.txn) or self.failed
            error = (KafkaError(KafkaError.PRODUCER_FENCED, fatal=True) if fenced
                     else refusal)
            if refusal is not None and self.txn is not None:
                # a refused record leaves its transaction abortable: the later records of
                # it fail too, and only an abort ends it
                self.failed = refusal
            if error is None:
                log = self.kafka.logs[(topic, partition)]
                record.offset = len(log)
                log.append(record)
            if report is not None:
                report(error, Message(topic=topic, partition=partition,
                                      offset=record.offset if error is None else -1,
                                      key=record.key, value=record.value, error=error))
            served += 1
        return served

    def flush(self, timeout: float = -1) -> int:
        self.poll()
        return 0

    def send_offsets_to_transaction(self, offsets: list[KTP], metadata: Any,
                                    timeout: float = -1) -> None:
        self._check()
        assert self.txn is not None, "offsets sent outside a transaction"
        if self.kafka.refusals_land_mid_positions and self.failed is None:
            refusals = [self.kafka.refusal_of(t, r.value, self.txn)
                        for t, _, r, _ in self.queued]
            self.failed = next((r for r in refusals if r is not None), None)
            if self.failed is not None:
                raise KafkaException(KafkaError(
                    KafkaError._STATE, "Failed to commit offsets to transaction on broker "
                    "(none): Local: Erroneous state", txn_requires_abort=True))
        self.kafka.take_commit(offsets, in_transaction=True)
        group = metadata.group
        self.kafka.txns[self.txn].offsets.setdefault(group, {}).update(
            {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in offsets})

    def commit_transaction(self, timeout: float = -1) -> None:
        self.flush()
        self._check()
        assert self.txn is not None, "no transaction to commit"
        if self.failed is not None:
            raise KafkaException(KafkaError(self.failed.code(), self.failed.str(),
                                            txn_requires_abort=True))
        self.kafka._end(self.txn, "committed")
        self.txn = None

    def abort_transaction(self, timeout: float = -1) -> None:
        if self.kafka.slow_aborts:
            self.kafka.slow_aborts -= 1
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, "Failed to flush all outstanding messages within the "
                "API timeout: 1 message(s) remaining", retriable=True))
        self.queued.clear()
        self._check()
        self.failed = None
        if self.txn is not None:
            self.kafka._end(self.txn, "aborted")
            self.txn = None


@dataclass
class GroupMetadata:
    group: str


class FakeConsumer:
    """An assigned (never subscribed) consumer, read_committed by default, with partition
    EOF events, as the lane's source reader and positions reader are configured."""

    def __init__(self, kafka: FakeKafka, group: str, read_committed: bool) -> None:
        self.kafka, self.group, self.read_committed = kafka, group, read_committed
        self.positions: dict[Key, int] = {}
        self.paused: set[Key] = set()
        self.at_eof: set[Key] = set()

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        return None

    def assign(self, partitions: list[KTP]) -> None:
        self.positions = {(tp.topic, tp.partition): tp.offset for tp in partitions}
        self.at_eof.clear()

    def seek(self, tp: KTP) -> None:
        self.positions[(tp.topic, tp.partition)] = tp.offset
        self.at_eof.discard((tp.topic, tp.partition))

    def pause(self, partitions: list[KTP]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions: list[KTP]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in partitions}

    def position(self, partitions: list[KTP]) -> list[KTP]:
        return [KTP(tp.topic, tp.partition, self.positions[(tp.topic, tp.partition)])
                for tp in partitions]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        out: list[Message] = []
        for key, position in list(self.positions.items()):
            if key in self.paused:
                continue
            end = self.kafka.stable_end(key) if self.read_committed else self.kafka.end(key)
            log = self.kafka.logs[key]
            while position < end and len(out) < num_messages:
                record = log[position]
                position += 1
                if self.kafka._visible(record):
                    out.append(Message(topic=key[0], partition=key[1], offset=record.offset,
                                       key=record.key, value=record.value,
                                       headers=record.headers,
                                       timestamp=(1, record.timestamp)))
            self.positions[key] = position
            if position >= end and key not in self.at_eof and len(out) < num_messages:
                self.at_eof.add(key)
                out.append(Message(topic=key[0], partition=key[1], offset=position,
                                   error=KafkaError(KafkaError._PARTITION_EOF)))
        return out

    def committed(self, partitions: list[KTP], timeout: float = -1) -> list[KTP]:
        found = self.kafka.groups.get(self.group, {})
        answer = []
        for tp in partitions:
            offset, metadata = found.get((tp.topic, tp.partition), (-1001, ""))
            answer.append(KTP(tp.topic, tp.partition, offset, metadata=metadata)
                          if metadata else KTP(tp.topic, tp.partition, offset))
        return answer

    def commit(self, offsets: list[KTP], asynchronous: bool = True) -> None:
        """A plain commit of group offsets (at_least_once), visible at once."""
        self.kafka.take_commit(offsets, in_transaction=False)
        self.kafka.groups.setdefault(self.group, {}).update(
            {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in offsets})

    def consumer_group_metadata(self) -> GroupMetadata:
        return GroupMetadata(self.group)

    def get_watermark_offsets(self, tp: KTP, timeout: float = -1) -> tuple[int, int]:
        key = (tp.topic, tp.partition)
        return 0, self.kafka.stable_end(key) if self.read_committed else self.kafka.end(key)

    def close(self) -> None:
        return None


class FakeClaim:
    """A writer slot's claim (`ferry.kafka.claim.WriterClaim`): the newest `take()` holds
    it, and an older claim's `check()` raises ClaimLost, as Kafka's coordinator answers a
    replaced static member."""

    def __init__(self, kafka: FakeKafka, txn_id: str) -> None:
        self.kafka, self.txn_id = kafka, txn_id

    def take(self) -> None:
        self.kafka.claims[self.txn_id] = self

    def check(self) -> None:
        from ferry.kafka.claim import ClaimLost

        if self.kafka.claims.get(self.txn_id) is not self:
            raise ClaimLost(f"writer slot {self.txn_id} was taken by a newer writer")

    def close(self) -> None:
        return None
