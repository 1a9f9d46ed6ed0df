"""promtool (Debian's, unpacked by scripts/setup.sh) accepts the alert rules Ferry ships,
runs their unit tests (deploy/prometheus/ferry-rules.test.yml), and lints Ferry's
exposition. A program runs, so these live here; the pure checks of the same files are in
tests/unit/observe/test_shipped_monitoring.py."""

from __future__ import annotations

import shutil
import subprocess

from ferry.observe.metrics import SOURCE
from tests.support.monitoring import PROMETHEUS, alert_rules, exposition


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: scripts/setup.sh unpacks it into .venv/bin"
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
