"""librdkafka's own log lines go through Python logging, naming the cluster, at their own
level up to WARNING, each distinct line at most once a minute, and in the log format chosen
(`FERRY_LOG_FORMAT`), never as raw `%3|…|FAIL|rdkafka#…` lines on stderr (which an Airflow
task would log as errors, and a log shipper could not parse): a verb against a cluster that
refuses every connection says so in a handful of lines, not hundreds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kafka_data import create_topic, down_cluster, flow_config

pytestmark = pytest.mark.integration


def status_with_the_target_down(clusters: dict[str, str], topic_name: str, tmp_path: Path,
                                log_format: str) -> tuple[str, str]:
    """`ferry status` on a flow whose target refuses every connection: (the target's alias,
    stderr)."""
    create_topic(clusters["source"], topic_name, 1)
    with down_cluster("stopped") as target:
        config = flow_config(tmp_path, {"source": clusters["source"], "target": target},
                             topic_name, "ferry.kafka.retry.seconds = 3\n")
        done = subprocess.run([str(Path(sys.executable).parent / "ferry"), "status",
                               config.path], capture_output=True, text=True, timeout=60,
                              check=False, env={**os.environ, "FERRY_LOG_FORMAT": log_format})
    assert done.returncode == 1, done.stderr
    return config.enabled_flows[0].target, done.stderr


def test_librdkafka_lines_are_log_lines_of_their_own_logger_and_level(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    target, stderr = status_with_the_target_down(clusters, topic_name, tmp_path, "text")

    lines = stderr.splitlines()
    assert not [line for line in lines if line.startswith("%")], stderr[:2000]
    client = [line for line in lines if " ferry.kafka.librdkafka: " in line]
    assert any(f" WARNING ferry.kafka.librdkafka: cluster {target}: FAIL " in line and
               "Connection refused" in line for line in client), stderr[:2000]
    assert not [line for line in client if "[rdkafka#" in line or "[thrd:" in line], client
    assert len(client) == len(set(client)), client  # each distinct line once a minute
    assert lines[-1].startswith("ferry: ") and f"cluster {target}" in lines[-1]


def test_with_json_logs_every_line_is_json_the_final_error_included(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    target, stderr = status_with_the_target_down(clusters, topic_name, tmp_path, "json")

    entries = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert any(e["logger"] == "ferry.kafka.librdkafka" and e["level"] == "warning"
               and "Connection refused" in e["message"] for e in entries)
    assert entries[-1]["level"] == "error" and f"cluster {target}" in entries[-1]["message"]


def test_a_plan_against_a_cluster_that_refuses_connections_ends_in_its_bound_in_a_few_lines(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a flow whose source refuses every connection, its clients retrying every 10 ms
    # (Ferry's reconnect backoff), and calls that wait out transient states for 10 s
    import time

    with down_cluster("stopped") as source:
        config = flow_config(tmp_path, {"source": source, "target": clusters["target"]},
                             topic_name, "ferry.kafka.retry.seconds = 10\n")
        flow = config.enabled_flows[0]

        # when
        began = time.monotonic()
        done = subprocess.run([str(Path(sys.executable).parent / "ferry"), "plan",
                               config.path, "--flow", flow.name], capture_output=True,
                              text=True, timeout=120, check=False)
        took = time.monotonic() - began

    # then: it ends within its bound (and a process's start), in at most ten lines, none a
    # raw client line, the last naming the cluster and what to check
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done.stderr[-2000:]
    assert took < 10 + 15, took
    assert len(lines) <= 10, done.stderr[-3000:]
    assert not [line for line in lines if "[rdkafka#" in line or line.startswith("%")], lines
    assert lines[-1].startswith(f"ferry: cluster {flow.source}") and "reachable" in lines[-1]
