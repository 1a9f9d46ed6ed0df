"""promtool (Debian's, unpacked by scripts/test-tools.sh) accepts the alert rules Ferry ships,
runs their unit tests (deploy/prometheus/ferry-rules.test.yml), and lints Ferry's
exposition. A program runs, so these live here; the pure checks of the same files are in
tests/unit/observe/test_shipped_monitoring.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ferry.config import load_config
from ferry.core.planner import Range
from ferry.core.takeover import Named
from ferry.observe.metrics import SOURCE
from ferry.runtime.slots import write_slots
from tests.support.monitoring import PROMETHEUS, alert_rules, exposition


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: scripts/test-tools.sh unpacks it into .venv/bin"
    return subprocess.run([tool, *args], input=stdin, capture_output=True, text=True,
                          cwd=PROMETHEUS, timeout=60, check=False)


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", "ferry-rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout
    tested = promtool("test", "rules", "ferry-rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_promtool_finds_ferrys_own_metric_names_clean() -> None:
    # MM2's names (record_count as a counter, *_ms) are kept as the JMX exporter writes them,
    # so dashboards built for MM2 work; promtool's naming advice may only concern those.
    linted = promtool("check", "metrics", stdin=exposition())
    problems = [line for line in (linted.stdout + linted.stderr).splitlines() if line.strip()]
    assert linted.returncode in (0, 3), problems  # 3: lint advice only, the text parsed
    assert problems, "expected promtool's advice on MM2's names: did the lint run at all?"
    for line in problems:
        assert line.startswith(("kafka_connect_mirror_", SOURCE)), line


class Newer:
    """The flow's newest run as a lane reads it: a run started after the lane's."""

    def read(self) -> Named:
        return Named("r3")


def latest_run(tmp_path: Path, outcome: str) -> list[dict[str, Any]]:
    """The `runs` rows of a run whose lane found a newer run of the flow writing its
    partition (as the copy job writes them: `write_slots`), or of a range that failed."""
    if outcome == "failed":
        return [{"run_id": "r2", "lane": 0, "topic": "orders", "partition": 0,
                 "range_start": 100, "range_end": 120, "records": 0, "bytes": 0,
                 "seconds": 0.1, "max_record_age_ms": 0, "outcome": "failed",
                 "error": "boom", "delivery": "exactly_once", "duplicates": 0}]
    (tmp_path / "mm2.properties").write_text(
        "clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\n"
        "a->b.enabled = true\na->b.topics = orders\n")
    flow = load_config(tmp_path / "mm2.properties").flow("a->b")
    return write_slots(flow, "r2", [(0, [Range("orders", 0, 100, 120)])], "", newest=Newer())


@pytest.mark.parametrize(("outcome", "fires"), [("handed-over", False), ("failed", True)])
def test_a_latest_run_that_handed_over_fires_no_run_failed_alert_and_a_failed_one_does(
    tmp_path: Path, outcome: str, fires: bool
) -> None:
    # given: what a scrape exports for a flow whose latest run handed over to a newer run
    # (or failed), held for half an hour (a flow gone quiet after a turn: no later run
    # copied anything)
    (line,) = [line for line in exposition(latest_run(tmp_path, outcome)).splitlines()
               if line.startswith("ferry_last_run_success")]
    series, value = line.rsplit(" ", 1)
    shipped = yaml.safe_load((PROMETHEUS / "ferry-rules.test.yml").read_text())["tests"]
    firing = next(c["exp_alerts"] for case in shipped for c in case["alert_rule_test"]
                  if c["alertname"] == "FerryRunFailed" and c.get("exp_alerts"))
    (tmp_path / "turn.test.yml").write_text(yaml.safe_dump({
        "rule_files": [str(PROMETHEUS / "ferry-rules.yml")],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m",
                   "input_series": [{"series": series, "values": f"{value}x30"}],
                   "alert_rule_test": [{"eval_time": "20m", "alertname": "FerryRunFailed",
                                        "exp_alerts": firing if fires else []}]}]}))

    # when: promtool evaluates Ferry's rules over it
    tested = promtool("test", "rules", str(tmp_path / "turn.test.yml"))

    # then: FerryRunFailed is quiet for a hand-over, and fires for a failure
    assert tested.returncode == 0, tested.stdout + tested.stderr
