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


def _commands(script: str) -> str:
    """The script's lines that run something (comments and blank lines left out)."""
    text = (ROOT / "scripts" / script).read_text()
    return "\n".join(line for line in text.splitlines()
                     if line.strip() and not line.strip().startswith("#"))


def test_the_demos_set_up_needs_no_root_and_no_system_package() -> None:
    # the demo runs scripts/setup.sh alone: on a machine without apt-get or root rights
    # (macOS, Fedora, a locked-down laptop) it must not stop for a browser or promtool
    setup, demo = _commands("setup.sh"), _commands("demo.sh")
    for needs_root in ("apt-get", "sudo", "dpkg", "chromium", "promtool"):
        assert needs_root not in setup, needs_root
        assert needs_root not in demo, needs_root
    assert "scripts/test-tools.sh" not in demo


def test_the_test_command_sets_up_then_fetches_the_tests_own_tools() -> None:
    lines = _commands("test.sh").splitlines()
    assert lines.index("bash scripts/setup.sh") < lines.index("bash scripts/test-tools.sh")
    tools = _commands("test-tools.sh")
    assert "/usr/bin/chromium" in tools and "promtool" in tools
