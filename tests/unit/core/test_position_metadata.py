"""A committed position's metadata: one encoder, one decoder, a version a reader checks."""

from __future__ import annotations

import pytest

from ferry.core.positions import (
    PositionFormatError,
    PositionMeta,
    decode_position,
    encode_position,
)


def test_a_position_records_its_end_owner_source_and_adoption_under_its_format() -> None:
    assert encode_position(5, "ferry.A->B.writer-0-of-2", "id-1") == (
        '{"ferry_format": 1, "ferry_target_end": 5, "ferry_owner": '
        '"ferry.A->B.writer-0-of-2", "ferry_source_id": "id-1"}')
    assert encode_position(None) == ""  # nothing to record: no metadata at all


@pytest.mark.parametrize("meta", [
    PositionMeta(),
    PositionMeta(0),
    PositionMeta(12, "ferry.A->B.writer-3-of-8", "Xy-1"),
    PositionMeta(None, "", "s1", "20261128T120000Z-abcd1234"),
    PositionMeta(3, "ferry.A->B.writer-0-of-1", "s1", "", "t1"),
])
def test_what_is_encoded_decodes_to_the_same(meta: PositionMeta) -> None:
    assert decode_position(encode_position(meta.target_end, meta.owner, meta.source_id,
                                           meta.adopted, meta.target_id)) == meta


@pytest.mark.parametrize(("recorded", "current", "stale"), [
    ("t1", "t1", False),
    ("t1", "t2", True),  # the remote topic was deleted and created again
    ("", "t2", False),   # an older Ferry's position records no remote topic ID: trusted
    ("t1", "", False),   # the current ID unknown (the topic not there yet): not judged
], ids=["same-topic", "recreated", "older-position", "current-unknown"])
def test_a_position_is_stale_only_for_another_known_incarnation_of_its_remote_topic(
    recorded: str, current: str, stale: bool
) -> None:
    assert PositionMeta(target_id=recorded).stale_for(current) is stale


@pytest.mark.parametrize(("metadata", "expected"), [
    # written before the format was versioned: the same fields
    ('{"ferry_target_end": 7, "ferry_owner": "ferry.A->B.lane-0-of-1"}',
     PositionMeta(7, "ferry.A->B.lane-0-of-1")),
    ("", PositionMeta()),
    (None, PositionMeta()),
    ("not json", PositionMeta()),  # another tool's metadata records nothing of Ferry's
    ('["a list"]', PositionMeta()),
    ('{"ferry_target_end": "7", "ferry_owner": 3}', PositionMeta()),  # wrong types: unread
    ('{"ferry_target_end": true}', PositionMeta()),
    ('{"ferry_format": 1, "ferry_source_id": "s1", "later_field": 1}',
     PositionMeta(None, "", "s1")),
], ids=["unversioned", "empty", "none", "not-json", "not-an-object", "wrong-types", "bool",
        "unknown-field"])
def test_metadata_is_read_as_what_it_records(metadata: str | None,
                                             expected: PositionMeta) -> None:
    assert decode_position(metadata) == expected


@pytest.mark.parametrize("version", ["2", '"1"'])
def test_a_format_this_ferry_does_not_know_is_refused_never_guessed_at(version: str) -> None:
    with pytest.raises(PositionFormatError) as refused:
        decode_position('{"ferry_format": ' + version + ', "ferry_target_end": 5}')
    assert "newer Ferry" in str(refused.value) and "\n" not in str(refused.value)
