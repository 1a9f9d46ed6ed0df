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
from collections.abc import Iterable, Iterator

from confluent_kafka import KafkaException

from ferry.config import Flow
from ferry.config.clients import ClientConfig
from ferry.core.offsetmap import MapEntry
from ferry.core.positions import PositionWrite
from ferry.errors import TerminalError
from ferry.kafka.admin import Admin
from ferry.kafka.delivery import CALL_TIMEOUT_S
from ferry.kafka.errors import kafka_error
from ferry.kafka.positions import PositionWriter
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


class AdoptionWriter(PositionWriter):
    """Writes adopted partitions into the flow's offset map and positions, each partition in
    one transaction (its entries and its position, visible together or not at all), under
    the partition's writer id (`PositionWriter`). Positions are marked adopted (`adopted`:
    the adoption's run id), so a second adoption sees them as its own."""

    def __init__(self, flow: Flow, adopted: str) -> None:
        super().__init__(flow, name="adopt")
        self.adopted = adopted
        self.ids: tuple[dict[str, str], dict[str, str]] = ({}, {})
        """(source, target) topic name -> topic ID, recorded with the entries and position."""

    def adopt(self, entries: Iterable[MapEntry], topic: str, remote: str, partition: int,
              position: int, target_end: int | None, source_id: str) -> int:
        """Commit `entries` and the position `position` of `remote`-`partition` (of source
        topic `topic`) in one transaction; the number of entries written. Refused
        (TerminalError, nothing written) when the partition has a position once its writer
        id is taken: the flow's run began mirroring it during the adoption."""
        written = 0

        def counted() -> Iterator[MapEntry]:
            nonlocal written
            for entry in entries:
                written += 1
                yield entry

        moved = self.write(PositionWrite(topic, partition, position, target_end, source_id,
                                         counted(), expect=None, adopted=self.adopted,
                                         target_id=self.ids[1].get(remote, "")))
        if moved is not None:
            raise TerminalError(
                f"flow {self.flow.name}: Ferry began mirroring {remote}-{partition} during the "
                f"adoption (a position at {moved.found}, committed by "
                f"{moved.owner or 'another client'}): nothing of it was written; pause the "
                "flow's DAG, and adopt only partitions Ferry has not mirrored")
        return written
