"""MirrorMaker 2's progress as Kafka Connect stores it (pure): the source offsets it
copied, per source partition.

Connect's offset storage (`mm2-offsets.<source>.internal` on the target in dedicated mode,
or a Connect cluster's `offset.storage.topic`) holds one record per source partition and
flush: key `["<connector>",{"cluster":"<source alias>","partition":<n>,"topic":"<t>"}]`,
value `{"offset":<last source offset copied>}` (JSON), the latest record per key being the
current one; a null value deletes it. MM2's source connector is `MirrorSourceConnector` in
dedicated mode; on a Connect cluster it has the name its user gave it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectOffset:
    """One stored flush: `offset` is the last source offset the connector copied (None:
    the key was deleted)."""

    connector: str
    cluster: str
    topic: str
    partition: int
    offset: int | None


def parse(key: bytes | None, value: bytes | None) -> ConnectOffset | None:
    """One record of the offsets topic, or None when it is not a source-partition offset of
    MM2's shape (another connector's records live in a shared offsets topic too)."""
    try:
        decoded = json.loads(key or b"")
    except ValueError:
        return None
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[0], str)
            and isinstance(decoded[1], dict)):
        return None
    connector, where = decoded
    cluster, topic, partition = where.get("cluster"), where.get("topic"), where.get("partition")
    if not (isinstance(cluster, str) and isinstance(topic, str) and isinstance(partition, int)):
        return None
    offset: int | None = None
    if value is not None:
        try:
            stored = json.loads(value)
        except ValueError:
            return None
        if not isinstance(stored, dict) or not isinstance(stored.get("offset"), int):
            return None
        offset = stored["offset"]
    return ConnectOffset(connector, cluster, topic, partition, offset)


def progress(records: Iterable[ConnectOffset], cluster: str, connector: str | None = None
             ) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the next source offset to copy (the stored offset + 1) of the
    connectors mirroring from `cluster` (only `connector`, when given), the latest record
    per key winning, in the order read. Two connectors that both stored progress for one
    partition are ambiguous: ValueError naming it."""
    latest: dict[tuple[str, str, int], int | None] = {}
    for record in records:
        if record.cluster != cluster or (connector is not None
                                         and record.connector != connector):
            continue
        latest[(record.connector, record.topic, record.partition)] = record.offset
    found: dict[tuple[str, int], int] = {}
    owners: dict[tuple[str, int], str] = {}
    for (name, topic, partition), offset in sorted(latest.items()):
        if offset is None:
            continue
        if (topic, partition) in found:
            raise ValueError(f"connectors {owners[(topic, partition)]} and {name} both stored "
                             f"progress for {topic}-{partition} from {cluster}: name one "
                             "with --connector")
        found[(topic, partition)] = offset + 1
        owners[(topic, partition)] = name
    return found
