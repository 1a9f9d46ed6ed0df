"""The thin top-level entry files of a checkout run the package's code, not copies of it."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

import ferry.crash
import ferry.jobs.ferry_copy

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkouts_copy_job_entry_runs_the_packages_job_with_its_arguments(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def main(argv: list[str] | None = None) -> int:
        calls.append(sys.argv[1:] if argv is None else argv)
        return 3

    def exit_now(code: int) -> None:  # the real one ends the process: this one raises
        raise SystemExit(code)

    monkeypatch.setattr(ferry.jobs.ferry_copy, "main", main)
    monkeypatch.setattr(ferry.crash, "exit_now", exit_now)
    monkeypatch.setattr(sys, "argv", ["ferry_copy.py", "--config", "c", "--flow", "A->B",
                                      "--plan", "p.json"])

    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(ROOT / "jobs" / "ferry_copy.py"), run_name="__main__")

    assert ended.value.code == 3
    assert calls == [["--config", "c", "--flow", "A->B", "--plan", "p.json"]]
