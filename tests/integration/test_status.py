"""`ferry status`: the right lag per partition after producing records not mirrored yet."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ferry.cli.main import main
from tests.support.kafka_data import create_topic, flow_config, produce, run_cycle

pytestmark = pytest.mark.integration


def test_status_reports_lag_in_records_and_seconds_before_mirroring(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    config = flow_config(tmp_path, clusters, topic_name)
    run_cycle(config.enabled_flows[0])
    produce(clusters["source"], topic_name, [(None, b"late", 1)] * 7)  # not mirrored yet
    time.sleep(1)

    assert main(["status", config.path, "--json"]) == 0

    (flow,) = json.loads(capsys.readouterr().out)["flows"]
    by_partition = {p["partition"]: p for p in flow["partitions"]}
    assert (by_partition[0]["lag_records"], by_partition[0]["position"]) == (0, 20)
    assert by_partition[0]["lag_seconds"] == 0
    assert (by_partition[1]["lag_records"], by_partition[1]["source_end"]) == (7, 27)
    assert by_partition[1]["lag_seconds"] > 0  # the oldest unmirrored record's age
    assert flow["lag_records"] == 7
