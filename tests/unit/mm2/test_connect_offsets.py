"""MirrorMaker 2's progress as Kafka Connect stores it: records of the offsets topic."""

from __future__ import annotations

import pytest

from ferry.mm2.connect_offsets import ConnectOffset, parse, progress

KEY = b'["MirrorSourceConnector",{"cluster":"A","partition":2,"topic":"orders"}]'


@pytest.mark.parametrize(("key", "value", "expected"), [
    (KEY, b'{"offset":41}', ConnectOffset("MirrorSourceConnector", "A", "orders", 2, 41)),
    (KEY, None, ConnectOffset("MirrorSourceConnector", "A", "orders", 2, None)),
    (b'["mirror-a",{"topic":"t","partition":0,"cluster":"B"}]', b'{"offset":0}',
     ConnectOffset("mirror-a", "B", "t", 0, 0)),
    # records of other connectors in a shared offsets topic, and anything unreadable
    (b'["jdbc-source",{"table":"users"}]', b'{"id":7}', None),
    (b'["jdbc-source",{"protocol":"1"}]', None, None),
    (KEY, b'{"position":"x"}', None),
    (KEY, b"not json", None),
    (b"not json", b'{"offset":1}', None),
    (None, b'{"offset":1}', None),
    (b'{"cluster":"A"}', b'{"offset":1}', None),
])
def test_a_record_of_the_offsets_topic_parses_only_in_mm2s_shape(
        key: bytes | None, value: bytes | None, expected: ConnectOffset | None) -> None:
    assert parse(key, value) == expected


def at(connector: str, cluster: str, topic: str, partition: int, offset: int | None
       ) -> ConnectOffset:
    return ConnectOffset(connector, cluster, topic, partition, offset)


def test_progress_is_the_latest_offset_per_partition_plus_one() -> None:
    records = [at("M", "A", "orders", 0, 10), at("M", "A", "orders", 1, 5),
               at("M", "A", "orders", 0, 99), at("M", "B", "orders", 0, 500)]
    assert progress(records, "A") == {("orders", 0): 100, ("orders", 1): 6}


def test_a_deleted_key_has_no_progress() -> None:
    records = [at("M", "A", "orders", 0, 10), at("M", "A", "orders", 0, None)]
    assert progress(records, "A") == {}


def test_two_connectors_with_progress_for_one_partition_must_be_told_apart() -> None:
    records = [at("old", "A", "orders", 0, 10), at("new", "A", "orders", 0, 20)]
    with pytest.raises(ValueError, match="connectors new and old both stored progress for "
                                         "orders-0 from A: name one with --connector"):
        progress(records, "A")
    assert progress(records, "A", connector="new") == {("orders", 0): 21}
