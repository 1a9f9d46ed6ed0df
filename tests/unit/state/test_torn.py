"""A state table's newest commit cut short is set aside, and only that one."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.state.torn import set_aside, torn

WHOLE = b'{"commitInfo":{"timestamp":1}}\n{"add":{"path":"a.parquet"}}\n'


@pytest.mark.parametrize(("content", "is_torn"), [
    (WHOLE, False),
    (WHOLE[:20], True),                      # cut mid-line
    (WHOLE.split(b"\n")[0] + b"\n{", True),  # cut at a line's start
    (b"", True),                             # created, nothing written
    (b"\xff\xfe", True),                     # not text
])
def test_a_commit_is_torn_when_it_does_not_read_as_whole_json_lines(
    tmp_path: Path, content: bytes, is_torn: bool
) -> None:
    commit = tmp_path / "00000000000000000003.json"
    commit.write_bytes(content)
    assert torn(commit) is is_torn


def test_only_the_newest_commit_is_set_aside_and_only_when_torn(tmp_path: Path) -> None:
    log = tmp_path / "offset_map" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_bytes(WHOLE[:10])  # an older one, torn
    (log / "00000000000000000001.json").write_bytes(WHOLE)

    assert set_aside(str(tmp_path / "offset_map")) is False  # the newest is whole

    (log / "00000000000000000002.json").write_bytes(WHOLE[:20])
    assert set_aside(str(tmp_path / "offset_map")) is True
    names = sorted(p.name for p in log.iterdir())
    assert names[:2] == ["00000000000000000000.json", "00000000000000000001.json"]
    assert names[2].startswith("00000000000000000002.json.torn-")
    assert set_aside("s3://bucket/state/offset_map") is False
