"""Metrics and status on real brokers and Delta: the right lag after producing N records
and before mirroring, MM2's counters from what the copy job recorded, the lag history, and
`ferry metrics --serve` behind its scrape token."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # an Airflow dependency, without type hints
import pytest

from ferry.cli.main import main
from ferry.config import Config, load_config
from ferry.core.tables import CHECKPOINTS_DDL, RUNS_DDL, StatePaths
from ferry.errors import FerryError
from ferry.observe.collect import collect
from ferry.observe.metrics import SOURCE
from ferry.state import digest
from ferry.state.reader import rows
from ferry.state.writer import append
from ferry.steps.lag import record_lag
from tests.support.kafka_data import create_topic, down_cluster, flow_config, produce, run_cycle
from tests.support.monitoring import PROMETHEUS_ACCEPT, value_of

pytestmark = pytest.mark.integration


def metrics_json(config: Config, capsys: pytest.CaptureFixture[str]
                 ) -> dict[str, dict[tuple[tuple[str, str], ...], Any]]:
    """`ferry metrics FILE --json`, as {name: {labels: value}}."""
    assert main(["metrics", config.path, "--json"]) == 0
    return {f["name"]: {tuple(s["labels"].items()): s["value"] for s in f["samples"]}
            for f in json.loads(capsys.readouterr().out)["metrics"]}


def where(config: Config, topic: str, partition: int) -> tuple[tuple[str, str], ...]:
    flow = config.enabled_flows[0]
    return (("source", flow.source), ("target", flow.target),
            ("topic", flow.remote_topic(topic)), ("partition", str(partition)))


def test_status_and_metrics_report_the_lag_of_records_produced_before_mirroring(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given 30 records on partition 0 and 12 on partition 1, nothing mirrored yet, of a
    # topic that keeps records for a day
    create_topic(clusters["source"], topic_name, 2, {"retention.ms": "86400000"})
    records: list[tuple[bytes | None, bytes | None, int]] = [(None, b"v", 0)] * 30
    produce(clusters["source"], topic_name, records + [(None, b"v", 1)] * 12)
    config = flow_config(tmp_path, clusters, topic_name)
    time.sleep(1)  # the oldest record is a second old at least

    # when status and metrics are read
    assert main(["status", config.path, "--json"]) == 0
    (status,) = json.loads(capsys.readouterr().out)["flows"]
    found = metrics_json(config, capsys)

    # then both say every record is lag, per partition, in records and in seconds
    assert [(p["partition"], p["lag_records"], p["position"]) for p in status["partitions"]] \
        == [(0, 30, None), (1, 12, None)]
    assert found["ferry_lag_records"] == {where(config, topic_name, 0): 30,
                                          where(config, topic_name, 1): 12}
    assert all(v > 0 for v in found["ferry_lag_seconds"].values())
    assert found["ferry_source_end_offset"] == found["ferry_lag_records"]
    # and how old a record may get before retention deletes it, for the alert on time left
    assert [p["retention_seconds"] for p in status["partitions"]] == [86400.0, 86400.0]
    assert found["ferry_source_retention_seconds"] == {where(config, topic_name, 0): 86400.0,
                                                       where(config, topic_name, 1): 86400.0}
    assert "ferry_position_offset" not in found  # nothing copied: no position yet
    flow = config.enabled_flows[0]
    assert found["ferry_flow_up"] == {(("source", flow.source), ("target", flow.target)): 1}
    assert SOURCE + "record_count" not in found  # no run recorded anything


def test_lag_history_records_one_row_per_partition_and_run(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, b"v", i % 2) for i in range(20)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]

    assert record_lag(flow, "before") == 2
    run_cycle(flow)
    produce(clusters["source"], topic_name, [(None, b"late", 1)] * 3)
    assert record_lag(flow, "after") == 2

    written = rows(StatePaths(flow.ferry.state_dir).lag, flow.name)
    by_run = {(r["run_id"], r["partition"]): (r["lag_records"], r["position"]) for r in written}
    assert by_run == {("before", 0): (10, None), ("before", 1): (10, None),
                      ("after", 0): (0, 10), ("after", 1): (3, 10)}
    (snap,) = collect(config)  # the page's chart: one point per run, partitions summed
    assert sorted((r["run_id"], r["lag_records"]) for r in snap.lag) == [("after", 3),
                                                                         ("before", 20)]


def two_sources_into_one_target(tmp: Path, clusters: dict[str, str], topic: str
                                ) -> Config:
    """Flows `src_<id>->tgt_<id>` and `edge_<id>->tgt_<id>` (the edge alias names the same
    source cluster), both mirroring `topic`, created with one partition."""
    create_topic(clusters["source"], topic, 1)
    config = flow_config(tmp, clusters, topic)
    flow = config.enabled_flows[0]
    edge = "edge_" + flow.source[4:]
    path = Path(config.path)
    text = path.read_text().replace(f"clusters = {flow.source}, ",
                                    f"clusters = {flow.source}, {edge}, ")
    path.write_text(text + f"{edge}.bootstrap.servers = {clusters['source']}\n"
                    f"{edge}->{flow.target}.enabled = true\n"
                    f"{edge}->{flow.target}.topics = {topic}\n")
    return load_config(path)


def test_the_clusters_of_the_flows_into_a_target_are_looked_up_once_per_refresh(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
) -> None:
    config = two_sources_into_one_target(tmp_path, clusters, topic_name)
    main_flow, edge_flow = config.enabled_flows
    asked: list[set[str]] = []

    def resolve(aliases: Collection[str]) -> Config:
        asked.append(set(aliases))
        return load_config(config.path)

    snaps = collect(config, lag_window=None, resolve=resolve)

    assert asked == [{main_flow.source, edge_flow.source, main_flow.target}]
    assert [(s.flow, s.error) for s in snaps] == [(main_flow.name, None), (edge_flow.name, None)]


def test_when_one_flows_clusters_cannot_be_looked_up_the_others_flows_still_show(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
) -> None:
    config = two_sources_into_one_target(tmp_path, clusters, topic_name)
    main_flow, edge_flow = config.enabled_flows
    missing = f"cluster {edge_flow.source}: the Airflow connection 'ferry_edge' does not exist"
    asked: list[set[str]] = []

    def resolve(aliases: Collection[str]) -> Config:
        asked.append(set(aliases))
        if edge_flow.source in aliases:
            raise FerryError(missing)
        return load_config(config.path)

    snaps = collect(config, lag_window=None, resolve=resolve)

    assert asked == [{main_flow.source, edge_flow.source, main_flow.target},
                     {main_flow.source, main_flow.target},
                     {edge_flow.source, edge_flow.target}]
    assert [(s.flow, s.error) for s in snaps] == [(main_flow.name, None),
                                                  (edge_flow.name, missing)]


def runs_row(run: int, partition: int, outcome: str = "copied") -> dict[str, Any]:
    finished = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=run)
    return {"flow": "a->b", "run_id": f"r{run:02}", "lane": 0, "topic": "orders",
            "partition": partition, "range_start": 10 * run, "range_end": 10 * run + 10,
            "records": 10, "bytes": 100, "seconds": 0.1, "max_record_age_ms": run,
            "outcome": outcome, "error": None, "delivery": "exactly_once", "duplicates": 0,
            "finished_at": finished, "schema_version": 1}


def test_growing_tables_are_read_as_aggregates_and_the_few_runs_shown(tmp_path: Path) -> None:
    # given 15 runs of partition 0, partition 1 copied in run 2 only (failed in run 14)
    runs = str(tmp_path / "runs")
    append(runs, RUNS_DDL, [runs_row(r, 0) for r in range(1, 16)] + [runs_row(2, 1)])
    append(runs, RUNS_DDL, [runs_row(14, 1, "failed")])
    append(runs, RUNS_DDL, [runs_row(1, 0) | {"flow": "c->d"}])  # another flow's
    checkpoints = str(tmp_path / "checkpoints")
    append(checkpoints, CHECKPOINTS_DDL, [
        {"flow": "a->b", "run_id": f"r{m}", "group_id": "g", "source_topic": "orders",
         "source_partition": 0, "source_offset": m, "target_topic": "a.orders",
         "target_offset": m, "status": "ok", "emitted": True, "group_synced": False,
         "translated_at": datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=m),
         "schema_version": 1} for m in (1, 5, 3)])

    # then the counters cover every copied range, the rows only the newest runs and the
    # partitions' latest copied runs
    assert digest.copied_totals(runs, "a->b") == {("orders", 0): (150, 1500),
                                                  ("orders", 1): (10, 100)}
    shown = digest.recent_runs(runs, "a->b", newest=3)
    assert sorted({(r["run_id"], r["partition"]) for r in shown}) == [
        ("r02", 0), ("r02", 1), ("r13", 0), ("r14", 0), ("r14", 1), ("r15", 0)]
    assert [(r["group_id"], r["translated_at"].minute) for r in
            digest.latest_checkpoints(checkpoints, "a->b")] == [("g", 5)]
    assert digest.newest(checkpoints, "a->b", "translated_at") == \
        datetime(2026, 11, 1, 0, 5, tzinfo=UTC)
    assert digest.recent_runs(str(tmp_path / "missing"), "a->b") == []


@pytest.mark.spark
def test_metrics_count_what_the_copy_job_recorded(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given one real run of the copy job (spark-submit) over 2 partitions
    create_topic(clusters["source"], topic_name, 2)
    records: list[tuple[bytes | None, bytes | None, int]] = [
        (f"k{i}".encode(), f"value-{i}".encode(), i % 2) for i in range(50)]
    produce(clusters["source"], topic_name, records)
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    ferry = Path(sys.executable).parent / "ferry"
    mirrored = subprocess.run([str(ferry), "mirror", config.path, "--flow", flow.name],
                              capture_output=True, text=True, timeout=600, check=False)
    assert mirrored.returncode == 0, mirrored.stderr[-3000:]
    produce(clusters["source"], topic_name, [(b"k", b"late", 0)] * 4)

    found = metrics_json(config, capsys)

    # then MM2's counters add up the run's ranges, and the lag is what came after it
    for p in (0, 1):
        mine = [r for r in records if r[2] == p]
        at = where(config, topic_name, p)
        assert found[SOURCE + "record_count"][at] == 25
        assert found[SOURCE + "byte_count"][at] == sum(len(k or b"") + len(v or b"")
                                                      for k, v, _ in mine)
        assert found[SOURCE + "record_age_ms"][at] > 0
        assert found[SOURCE + "replication_latency_ms"][at] >= \
            found[SOURCE + "record_age_ms"][at]
        assert found["ferry_position_offset"][at] == 25
    assert found["ferry_lag_records"] == {where(config, topic_name, 0): 4,
                                          where(config, topic_name, 1): 0}
    pair = (("source", flow.source), ("target", flow.target))
    assert found["ferry_last_run_success"] == {pair: 1}
    assert abs(found["ferry_last_run_timestamp_seconds"][pair] - time.time()) < 600


def serve(config_path: str, *extra: str, env: dict[str, str] | None = None
          ) -> tuple[dict[str, Any], subprocess.Popen[str]]:
    """`ferry metrics FILE --serve 127.0.0.1:0 --json -v ...`: (its start-up line, the
    process)."""
    ferry = Path(sys.executable).parent / "ferry"
    process = subprocess.Popen(
        [str(ferry), "metrics", config_path, "--serve", "127.0.0.1:0", "--json", "-v", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 60)
    assert ready, "ferry metrics --serve did not start"
    line = process.stdout.readline()
    assert line, f"ferry metrics --serve exited: {process.communicate()[1][-2000:]}"
    return json.loads(line), process


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(15)


@pytest.mark.parametrize("how", ["stopped", "hung"])
def test_with_the_target_down_every_scrape_answers_within_a_second_and_the_flow_is_down(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, how: str
) -> None:
    # given: a flow whose target is down, its Kafka calls bounded to 3 s at the top level
    create_topic(clusters["source"], topic_name, 1)
    with down_cluster(how) as target:
        config = flow_config(tmp_path, {"source": clusters["source"], "target": target},
                             topic_name, "ferry.kafka.retry.seconds = 3\n")
        flow = config.enabled_flows[0]
        started, process = serve(config.path, "--refresh", "1")
        url = started["serving"]
        try:
            # when: scraped again and again while the collections wait on the target
            answers = scrapes(url)

            # then: each scrape answered 200 within a second (only "nothing collected yet"
            # until the first collection ended), and the flow is reported down, with the
            # age of what was served
            assert {s for s, _, _ in answers} == {200}, answers[-1][1]
            assert max(took for _, _, took in answers) < 1.0, answers
            last = answers[-1][1]
            assert value_of(last, "ferry_flow_up", source=flow.source, target=flow.target) == 0
            assert value_of(last, "ferry_metrics_age_seconds") is not None
            # and status says so within the same budget, naming the cluster
            done = subprocess.run([str(Path(sys.executable).parent / "ferry"), "status",
                                   config.path], capture_output=True, text=True, timeout=60,
                                  check=False)
            assert done.returncode == 1
            assert f"cluster {flow.target}" in done.stderr
            assert "ferry.kafka.retry.seconds=3" in done.stderr
        finally:
            stop(process)


@pytest.fixture
def serving(clusters: dict[str, str], topic_name: str, tmp_path: Path
            ) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """`ferry metrics FILE --serve 127.0.0.1:0 --json` with a scrape token: (url, token,
    process); stopped at teardown."""
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, b"v", 0)] * 5)
    config = flow_config(tmp_path, clusters, topic_name)
    token = "scrape-" + os.urandom(8).hex()
    started, process = serve(config.path, env={"FERRY_METRICS_TOKEN": token})
    try:
        assert started["token_required"] is True
        yield started["serving"], token, process
    finally:
        stop(process)


def get(url: str, authorization: str | None = None, accept: str | None = None
        ) -> tuple[int, str]:
    return get_typed(url, authorization, accept)[:2]


def get_typed(url: str, authorization: str | None = None, accept: str | None = None
              ) -> tuple[int, str, str]:
    """(status, body, content type) of a GET."""
    request = urllib.request.Request(url)
    if authorization:
        request.add_header("Authorization", authorization)
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode(), answer.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers["Content-Type"]


def scrapes(url: str, authorization: str | None = None
            ) -> list[tuple[int, str, float]]:
    """Scrapes until one is not "nothing collected yet" (the first background collection
    still running), 90 s at most: each one's (status, body, seconds it took)."""
    answers: list[tuple[int, str, float]] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        started = time.monotonic()
        status, body = get(url, authorization)
        answers.append((status, body, time.monotonic() - started))
        if status != 200 or value_of(body, "ferry_metrics_collected") != 0:
            break
        time.sleep(0.2)
    return answers


def test_metrics_serve_answers_only_scrapes_with_the_token_and_never_logs_it(
    serving: tuple[str, str, subprocess.Popen[str]], topic_name: str,
) -> None:
    url, token, process = serving

    assert get(url)[0] == 401
    assert get(url, "Bearer not-the-token")[0] == 401
    assert get(url, f"Basic {token}")[0] == 401
    status, body, _ = scrapes(url, f"Bearer {token}")[-1]

    assert status == 200
    assert "# TYPE ferry_lag_records gauge" in body
    (lag,) = [line for line in body.splitlines()
              if line.startswith("ferry_lag_records{") and f'.{topic_name}"' in line]
    assert float(lag.rsplit(" ", 1)[1]) == 5
    process.terminate()
    _, logged = process.communicate(timeout=15)
    assert token not in logged


def test_a_scrape_as_prometheus_sends_it_gets_openmetrics_with_the_servers_process_series(
    serving: tuple[str, str, subprocess.Popen[str]], topic_name: str,
) -> None:
    url, token, process = serving
    scrapes(url, f"Bearer {token}")  # the first collection ended

    # when: scraped with the Accept header Prometheus sends
    status, body, kind = get_typed(url, f"Bearer {token}", PROMETHEUS_ACCEPT)

    # then: OpenMetrics, ending in its EOF line, with the flow's lag and the serving
    # process's own series (its memory, CPU and start)
    assert status == 200 and kind.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")
    lags = [line for line in body.splitlines()
            if line.startswith("ferry_lag_records{") and f'.{topic_name}"' in line]
    assert len(lags) == 1 and float(lags[0].rsplit(" ", 1)[1]) == 5
    rss = value_of(body, "process_resident_memory_bytes")
    assert rss is not None and rss > 10 * 2**20
    assert value_of(body, "process_start_time_seconds") == pytest.approx(
        psutil.Process(process.pid).create_time(), abs=2)
    # and a scrape that asks for nothing gets the text format
    assert get_typed(url, f"Bearer {token}")[2].startswith("text/plain; version=0.0.4")


def test_with_both_clusters_unreachable_a_scrape_within_seconds_of_start_says_the_flow_is_down(
    tmp_path: Path
) -> None:
    # given: a flow whose clusters both refuse every connection, its calls bounded to the
    # default two minutes (what a collection waited out before each cluster was probed)
    import time

    with down_cluster("stopped") as source, down_cluster("hung") as target:
        config = flow_config(tmp_path, {"source": source, "target": target}, "orders")
        flow = config.enabled_flows[0]
        began = time.monotonic()
        started, process = serve(config.path)
        try:
            # when: scraped from the start
            answers = scrapes(started["serving"])
            first_known = time.monotonic() - began
        finally:
            stop(process)

    # then: every scrape answered 200 in under a second; within 10 s of the start the flow
    # and both its clusters are reported down
    assert {s for s, _, _ in answers} == {200}
    assert max(took for _, _, took in answers) < 1.0, answers
    assert first_known < 10.0, first_known
    last = answers[-1][1]
    assert value_of(last, "ferry_flow_up", source=flow.source, target=flow.target) == 0
    assert value_of(last, "ferry_cluster_up", cluster=flow.source) == 0
    assert value_of(last, "ferry_cluster_up", cluster=flow.target) == 0
    assert value_of(last, "ferry_metrics_collected") == 1
