"""Another mirror's progress, and writing what Ferry adopts of it (adapter).

- `connect_progress`: MirrorMaker 2's progress from Kafka Connect's offset storage (every
  partition of the offsets topic, the latest record per key; `ferry.mm2.connect_offsets`).
- `AdoptionWriter`: one transaction per partition on the target holding the adopted
  offset-map entries and the flow's position, committed together (as a lane's are), under
  the partition's writer id (`core/lanes.py`), taken before the position is read: a lane
  writing the partition meanwhile, even inside its first transaction, is fenced (G11).

MirrorMaker 1's progress is its consumer group's committed offsets on the source: the
admin client reads those (`Admin.committed`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.config.clients import ClientConfig
from ferry.core.internal import offset_map_topic, positions_group, transactional_id
from ferry.core.lanes import writer_of
from ferry.core.offsetmap import MapEntry, encode
from ferry.errors import TerminalError
from ferry.kafka.admin import Admin
from ferry.kafka.delivery import CALL_TIMEOUT_S
from ferry.kafka.errors import kafka_error
from ferry.kafka.lane_state import position_metadata, recorded_owner
from ferry.kafka.records import scan
from ferry.kafka.retry import retrying
from ferry.mm2.connect_offsets import ConnectOffset, parse, progress


def connect_progress(client: ClientConfig, topic: str, source: str, group: str,
                     connector: str | None = None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the next source offset MM2 would copy, as its Connect offset
    storage `topic` (on `client`'s cluster) holds it for source cluster `source`. A missing
    offsets topic is a TerminalError naming it."""
    partitions = Admin(client).topics().get(topic)
    if partitions is None:
        raise TerminalError(f"cluster {client.cluster}: there is no topic {topic}: name the "
                            "Connect offsets topic MirrorMaker 2 used with --offsets-topic")
    return progress(_records(client, topic, partitions.partitions, group), source, connector)


def _records(client: ClientConfig, topic: str, partitions: int, group: str
             ) -> Iterator[ConnectOffset]:
    for partition in range(partitions):
        for msg in scan(client, topic, partition, 0, group):
            found = parse(msg.key(), msg.value())
            if found is not None:
                yield found


def group_members(client: ClientConfig, group: str) -> tuple[str, int]:
    """(state, member count) of any group on `client`'s cluster, Connect's worker groups
    included (("", 0) when there is none). Kafka's DescribeConsumerGroups refuses groups
    of another protocol ("not a consumer group (connect)"); the classic DescribeGroups that
    `list_groups` sends describes them all."""
    admin = Admin(client)

    def describe() -> tuple[str, int]:
        with warnings.catch_warnings():  # deprecated for consumer groups, not replaced
            warnings.simplefilter("ignore", DeprecationWarning)  # for the others
            found = admin.raw.list_groups(group=group, timeout=CALL_TIMEOUT_S)
        for meta in found:
            if meta.id == group:
                return str(meta.state), len(meta.members)
        return "", 0

    try:
        return retrying(describe, cluster=client.cluster, action=f"describing group {group}",
                        budget_s=client.retry_seconds)
    except KafkaException as exc:
        raise kafka_error(exc, client.cluster, f"describing group {group}",
                          principal=client.principal,
                          needs={"GROUP": f"DESCRIBE on GROUP {group}"}) from None


class AdoptionWriter:
    """Writes adopted partitions into the flow's offset map and positions, each partition in
    one transaction (its entries and its position, visible together or not at all), under
    the partition's writer id. Positions are marked adopted (`adopted`: the adoption's run
    id), so a second adoption sees them as its own."""

    def __init__(self, flow: Flow, adopted: str) -> None:
        self.flow, self.adopted, self.owner = flow, adopted, ""
        self.ids: tuple[dict[str, str], dict[str, str]] = ({}, {})
        """(source, target) topic name -> topic ID, recorded with the entries and position."""
        self.producers: dict[str, Producer] = {}
        """Writer id -> its producer, its transactions initialised."""
        self.reader = Consumer(flow.target_admin.confluent({
            "group.id": positions_group(flow), "enable.auto.commit": False,
            "isolation.level": "read_committed", "log_level": 3}))

    def _writer(self, topic: str, partition: int) -> Producer:
        """The producer of the partition's writer id. Initialising it fences every other
        writer of the id (a lane of a run that was not paused: its open transaction is
        aborted, its next commit fails)."""
        self.owner = transactional_id(self.flow, writer_of(topic, partition,
                                                           self.flow.ferry.writers))
        producer = self.producers.get(self.owner)
        if producer is None:
            producer = Producer(self.flow.producer.confluent({
                "transactional.id": self.owner, "enable.idempotence": True, "acks": "all",
                "transaction.timeout.ms": 300_000, "log_level": 3,
                "allow.auto.create.topics": False}))
            self._call(lambda: producer.init_transactions(CALL_TIMEOUT_S),
                       f"initialising the transactions of {self.owner}")
            self.producers[self.owner] = producer
        return producer

    def write(self, entries: Iterable[MapEntry], topic: str, remote: str, partition: int,
              position: int, target_end: int | None, source_id: str) -> int:
        """Commit `entries` and the position `position` of `remote`-`partition` (of source
        topic `topic`) in one transaction; the number of entries written. The partition's
        writer id is taken first, then its position read: a position there refuses it."""
        producer, map_topic = self._writer(topic, partition), offset_map_topic(self.flow)
        self._refuse_taken(remote, partition)
        self._call(producer.begin_transaction, "beginning a transaction")
        written = 0
        try:
            for entry in entries:
                key, value = encode(entry)
                while True:
                    try:
                        producer.produce(map_topic, value, key, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
                written += 1
            offsets = [KTP(remote, partition, position, metadata=position_metadata(
                target_end, self.owner, source_id, adopted=self.adopted))]
            metadata = self.reader.consumer_group_metadata()
            self._call(lambda: producer.send_offsets_to_transaction(
                offsets, metadata, CALL_TIMEOUT_S), f"committing the position of {remote}-"
                f"{partition}")
            self._call(lambda: producer.commit_transaction(CALL_TIMEOUT_S),
                       f"committing the adoption of {remote}-{partition}")
        except BaseException:
            # If this fails too, the broker aborts it at its timeout: nothing of it shows.
            with suppress(KafkaException):
                producer.abort_transaction(CALL_TIMEOUT_S)
            raise
        return written

    def close(self) -> None:
        for producer in self.producers.values():
            producer.flush(CALL_TIMEOUT_S)
        self.reader.close()

    def _refuse_taken(self, remote: str, partition: int) -> None:
        """Refuse to write a partition whose position another client committed since the
        adoption began (the flow's run, its DAG not paused): adopt checked for positions
        before aligning, which can take minutes. Read after the writer id was taken, so a
        run still writing the partition is fenced, not overlooked."""
        found: list[KTP] = []
        self._call(lambda: found.extend(self.reader.committed(
            [KTP(remote, partition)], timeout=CALL_TIMEOUT_S)),
            f"reading the position of {remote}-{partition}")
        (tp,) = found
        if tp.offset >= 0:
            owner = recorded_owner(tp.metadata)
            raise TerminalError(
                f"flow {self.flow.name}: Ferry began mirroring {remote}-{partition} during the "
                f"adoption (a position at {tp.offset}, committed by "
                f"{owner or 'another client'}): nothing of it was written; pause the flow's "
                "DAG, and adopt only partitions Ferry has not mirrored")

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
