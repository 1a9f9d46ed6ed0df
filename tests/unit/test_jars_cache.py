"""The jars fetched from Maven Central into the cache: once, whoever asks at the same time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ferry import jars
from tests.support.threads import at_once


def test_two_processes_fetching_the_same_jars_at_once_fetch_them_once_and_both_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: an empty cache, and a fetch that takes a moment (Maven copying the jars)
    monkeypatch.setenv("FERRY_CACHE_DIR", str(tmp_path))
    fetches: list[str] = []

    def mvn(args: list[str], what: str) -> None:
        out = Path(next(a for a in args if a.startswith("-DoutputDirectory=")).split("=", 1)[1])
        fetches.append(what)
        out.mkdir(parents=True)
        time.sleep(0.3)  # long enough for the other caller to arrive meanwhile
        (out / "kafka-clients.jar").write_bytes(b"jar")

    monkeypatch.setattr(jars, "_mvn", mvn)

    # when: two callers ask for them at once
    got, failed = at_once(jars.kafka_jars)

    # then: fetched once; both got the complete directory; nothing partial is left
    assert failed == [] and fetches == ["Kafka"], failed
    assert got[0] == got[1] and (got[0] / "kafka-clients.jar").read_bytes() == b"jar"
    assert (got[0] / ".complete").is_file()
    assert sorted(p.name for p in (tmp_path / "jars").iterdir() if not p.name.startswith(".")) \
        == [got[0].name]
