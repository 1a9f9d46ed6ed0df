"""`ferry maintain`: the maintenance DAG's path from the command line (no cluster is read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.cli.main import main


def config(tmp_path: Path) -> str:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = "
                    f"b:9092\nA->B.enabled = true\nferry.state.dir = {tmp_path / 'state'}\n")
    return str(path)


def test_maintain_reports_every_state_table_as_json(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["maintain", config(tmp_path), "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is True and report["retention_hours"] == 168
    assert {t["table"] for t in report["tables"]} >= {
        "offset_map", "runs", "gaps", "syncs", "checkpoints", "verify", "lag"}
    assert not any(t["present"] for t in report["tables"])  # nothing written yet


def test_without_execute_maintain_only_says_what_it_would_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["maintain", config(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dry_run"] is True
    assert main(["maintain", config(tmp_path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("add --execute to apply")


def test_a_retention_below_a_day_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["maintain", config(tmp_path), "--retention-hours", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "retention 2 hours" in err[0] and "--retention-hours" in err[0]
