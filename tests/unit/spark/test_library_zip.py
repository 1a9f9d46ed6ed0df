"""The `ferry` package zipped for Spark's Python path, built once per version of the code."""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ferry.spark.library import library_zip
from tests.support.threads import at_once


def test_two_processes_building_the_same_zip_at_once_both_get_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: an empty cache, and two builders (two tasks of one Airflow worker after an
    # upgrade) held together until both are writing their zip
    monkeypatch.setenv("FERRY_CACHE_DIR", str(tmp_path))
    both_writing = threading.Barrier(2)
    waited: set[int] = set()
    write = zipfile.ZipFile.write

    def write_together(archive: zipfile.ZipFile, *args: Any, **kwargs: Any) -> None:
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            both_writing.wait(30)
        write(archive, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "write", write_together)

    # when: both build it
    built, failed = at_once(library_zip)

    # then: both got the same zip, whole, and no partial file is left behind
    assert failed == [] and len(built) == 2 and built[0] == built[1], failed
    with zipfile.ZipFile(built[0]) as archive:
        assert archive.testzip() is None
        assert "ferry/spark/library.py" in archive.namelist()
    assert [p.name for p in (tmp_path / "py").iterdir()] == [Path(built[0]).name]
