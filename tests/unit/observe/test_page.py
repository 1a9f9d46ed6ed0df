"""The Ferry page and its summaries of the state tables (pure: rows in, HTML out)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from ferry.observe.page import lag_chart, render_page
from ferry.observe.snapshot import FlowSnapshot, LagPoint, lag_series, run_summaries, to_json
from ferry.observe.status import FlowStatus, PartitionStatus
from tests.support.runs import NOW, run_row


def lag_row(run_id: str, partition: int, lag: int, seconds: float,
            at: datetime) -> dict[str, object]:
    return {"flow": "a->b", "run_id": run_id, "topic": "orders", "partition": partition,
            "source_end": 100, "position": 100 - lag, "lag_records": lag,
            "lag_seconds": seconds, "recorded_at": at}


def test_lag_series_has_one_point_per_run_summing_partitions_oldest_first() -> None:
    t1, t2 = NOW - timedelta(minutes=10), NOW - timedelta(minutes=5)
    rows = [lag_row("r2", 0, 3, 2.0, t2), lag_row("r1", 0, 10, 50.0, t1),
            lag_row("r1", 1, 5, 80.0, t1), lag_row("r2", 1, 0, 0.0, t2)]
    assert lag_series(rows) == [LagPoint(t1.timestamp(), 15, 80.0),
                                LagPoint(t2.timestamp(), 3, 2.0)]
    assert [p.records for p in lag_series(rows, max_points=1)] == [3]  # the newest kept


def test_run_summaries_are_one_line_per_run_newest_first_failed_when_any_range_failed(
) -> None:
    rows = [run_row("r1", 0, 0, 10, NOW - timedelta(minutes=2)),
            run_row("r2", 0, 10, 30, NOW - timedelta(minutes=1), seconds=2.0),
            run_row("r2", 1, 0, 5, NOW - timedelta(minutes=1), outcome="failed")]
    newest, oldest = run_summaries(rows)
    assert (newest.run_id, newest.ranges, newest.records, newest.outcome, newest.error,
            newest.seconds) == ("r2", 2, 25, "failed", "boom", 2.0)
    assert (oldest.run_id, oldest.outcome) == ("r1", "copied")
    assert [s.run_id for s in run_summaries(rows, limit=1)] == ["r2"]


def test_chart_draws_one_point_per_recorded_run_scaled_to_the_peak() -> None:
    points = [LagPoint(NOW.timestamp() + i * 60, lag, 1.0) for i, lag in enumerate([0, 50, 100])]
    svg = lag_chart(points, width=200, height=100)
    (line,) = re.findall(r'<polyline points="([^"]+)"', svg)
    coords = [tuple(map(float, pair.split(","))) for pair in line.split()]
    xs, ys = zip(*coords, strict=True)
    assert len(coords) == 3 and list(xs) == sorted(xs)
    assert ys[0] > ys[1] > ys[2]  # more lag is higher up (smaller y)
    assert ">100<" in svg  # the peak is labelled


def test_chart_without_history_says_where_history_comes_from() -> None:
    assert "<svg" not in lag_chart([]) and "each flow run records" in lag_chart([])


def page_snapshot() -> FlowSnapshot:
    status = FlowStatus("a->b", "a", "b", [
        PartitionStatus("orders", 0, 120, 100, 20, 35.5, "a.orders"),
        PartitionStatus("orders", 1, 50, 50, 0, 0.0, "a.orders")])
    return FlowSnapshot(
        "a->b", "a", "b", status, remote_topics={"orders": "a.orders"},
        runs=[run_row("r1", 0, 0, 100, NOW - timedelta(minutes=1))],
        gaps=[{"topic": "orders", "partition": 1, "gap_start": 0, "gap_end": 4, "records": 4,
               "action": "warn", "run_id": "r1", "detected_at": NOW}],
        verify=[{"topic": "orders", "partition": 0, "source_start": 0, "source_end": 100,
                 "checked": 100, "altered": 1, "missing": 0, "extra": 0, "outcome": "mismatch",
                 "mismatches": "orders-0@42 altered", "verified_at": NOW}],
        lag=[lag_row("r1", 0, 20, 35.5, NOW)])


def test_page_shows_each_flow_with_lag_per_partition_runs_gaps_verify_and_chart() -> None:
    html = render_page([page_snapshot()], NOW.timestamp(), "/etc/ferry/mm2.properties")
    assert 'data-flow="a-&gt;b"' in html and "a → b" in html
    rows = re.findall(r'<tr data-topic="orders" data-partition="(\d)" data-lag-records="(\d+)">'
                      r'<td>orders</td><td class="num">\d</td><td>a\.orders</td>', html)
    assert rows == [("0", "20"), ("1", "0")]
    assert '<span class="total-lag">20</span>' in html
    assert "r1" in html and "[0, 4)" in html and "orders-0@42 altered" in html
    assert 'class="chart lag-chart"' in html and "/etc/ferry/mm2.properties" in html
    assert "http://" not in html and "https://" not in html  # nothing from a CDN


def test_page_escapes_what_it_shows() -> None:
    snap = page_snapshot()
    snap.error = '<img src=x onerror="alert(1)">'
    html = render_page([snap], NOW.timestamp(), "<cfg>")
    assert "<img" not in html and "&lt;img" in html and "&lt;cfg&gt;" in html


def test_page_shows_a_config_problem_instead_of_flows() -> None:
    html = render_page([], NOW.timestamp(), "mm2.properties", "clusters is missing")
    assert 'class="error">clusters is missing<' in html and "data-flow" not in html


def test_json_api_carries_what_the_page_shows() -> None:
    data = to_json(page_snapshot(), NOW.timestamp())
    assert [p["lag_records"] for p in data["status"]["partitions"]] == [20, 0]
    assert data["status"]["partitions"][0]["remote_topic"] == "a.orders"
    assert [r["run_id"] for r in data["runs"]] == ["r1"]
    assert data["gaps"][0]["records"] == 4 and data["verify"][0]["mismatched"] == 1
    assert data["lag_history"] == [{"at": NOW.astimezone(UTC).isoformat(timespec="seconds"),
                                    "records": 20, "seconds": 35.5}]


def test_a_run_that_handed_over_is_summed_up_and_shown_as_handed_over_not_failed() -> None:
    rows = [run_row("r1", 0, 0, 10, NOW - timedelta(minutes=1)),
            run_row("r1", 1, 0, 5, NOW, outcome="handed-over")]
    (summary,) = run_summaries(rows)
    assert (summary.outcome, summary.error) == ("handed-over", None)
    snap = page_snapshot()
    snap.runs = rows
    html = render_page([snap], NOW.timestamp(), "mm2.properties")
    assert "handed over" in html and ">failed<" not in html
    assert to_json(snap, NOW.timestamp())["runs"][0]["outcome"] == "handed-over"
