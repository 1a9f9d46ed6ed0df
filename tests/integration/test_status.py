"""`ferry status`: the right lag per partition after producing records not mirrored yet."""

from __future__ import annotations

import json
import re
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


def test_status_and_metrics_say_how_far_delta_is_behind_the_offset_map_topic(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given: a run whose copies (and offset-map entries) are committed on the target and
    # not yet recorded in Delta, as a continuous loop leaves them between its batches
    from ferry.core.internal import offset_map_topic
    from ferry.core.tables import StatePaths
    from ferry.runtime.recording import record_offset_map
    from ferry.state.writer import append
    from tests.support.kafka_data import read_all

    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    started = time.time()
    run_cycle(flow, "copied-not-recorded")
    entries = [r for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    time.sleep(1.5)

    # when: another process (the exporter, an operator) asks
    assert main(["status", config.path, "--json"]) == 0
    (behind,) = json.loads(capsys.readouterr().out)["flows"]
    assert main(["status", config.path]) == 0
    said = capsys.readouterr().out
    assert main(["metrics", config.path, "--json"]) == 0
    exported = {f["name"]: [s["value"] for s in f["samples"]]
                for f in json.loads(capsys.readouterr().out)["metrics"]}

    # then: every entry is counted, dated by the oldest commit
    assert behind["state_behind_entries"] == len(entries) == 2
    assert 1.5 <= behind["state_behind_seconds"] <= time.time() - started + 1
    assert re.search(r"Delta behind the target by 2 offset-map entries, the oldest \d+s old",
                     said), said
    assert exported["ferry_state_behind_entries"] == [2]
    assert exported["ferry_state_behind_seconds"][0] >= 1.5

    # and once Delta records them (as the loop's next batch does), nothing is behind
    record_offset_map(append, flow, StatePaths(flow.ferry.state_dir))
    assert main(["status", config.path, "--json"]) == 0
    (caught_up,) = json.loads(capsys.readouterr().out)["flows"]
    assert (caught_up["state_behind_entries"], caught_up["state_behind_seconds"]) == (0, 0.0)
