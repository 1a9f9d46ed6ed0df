"""Prometheus metrics: MM2's names and labels, and how the state tables' rows become samples
(the exposition itself: `test_exposition.py`)."""

from __future__ import annotations

import math
import re
from datetime import timedelta

import pytest

from ferry.errors import UsageError
from ferry.observe.metrics import (
    CHECKPOINT,
    DEFINITIONS,
    SOURCE,
    STRIMZI_SOURCE,
    Family,
    Registry,
    Sample,
    families,
    format_value,
    token_allows,
)
from ferry.observe.serve import parse_listen
from ferry.observe.snapshot import FlowSnapshot
from ferry.observe.status import FlowStatus, PartitionStatus
from tests.support.runs import NOW, run_row


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0"), (42.0, "42"), (-3.0, "-3"), (1.5, "1.5"), (0.001, "0.001"),
    (1e20, "1e+20"), (math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf"),
], ids=["zero", "int", "negative", "fraction", "small", "huge", "nan", "inf", "minus-inf"])
def test_values_are_written_as_prometheus_reads_them(value: float, text: str) -> None:
    assert format_value(value) == text


def test_registry_keeps_definition_order_skips_unknown_values_and_refuses_undefined_names(
) -> None:
    registry = Registry()
    registry.add("ferry_flow_up", {"source": "a"}, 1)
    registry.add(SOURCE + "record_count", {"source": "a"}, 3)
    registry.add("ferry_position_offset", {"source": "a"}, None)  # not known: no sample
    assert [f.name for f in registry.families()] == [SOURCE + "record_count", "ferry_flow_up"]
    with pytest.raises(KeyError):
        registry.add("ferry_made_up", {}, 1)


def test_every_defined_name_is_a_valid_prometheus_name_with_help_and_a_type() -> None:
    for name, (kind, text) in DEFINITIONS.items():
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name), name
        assert kind in ("counter", "gauge", "untyped"), name
        assert text.endswith((".", ")")), name


@pytest.mark.parametrize(("header", "token", "allowed"), [
    ("Bearer s3cret", "s3cret", True),
    ("bearer s3cret", "s3cret", True),
    ("Bearer  s3cret ", "s3cret", True),
    ("Bearer wrong", "s3cret", False),
    ("Basic s3cret", "s3cret", False),
    ("s3cret", "s3cret", False),
    (None, "s3cret", False),
    ("Bearer ", "", False),
    ("Bearer anything", None, False),
], ids=["bearer", "scheme-case", "spaces", "wrong", "basic", "no-scheme", "no-header",
        "empty-token", "no-token-configured"])
def test_scrape_token_must_come_as_bearer_and_match(header: str | None, token: str | None,
                                                    allowed: bool) -> None:
    assert token_allows(header, token) is allowed


@pytest.mark.parametrize(("value", "listen"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:80", ("0.0.0.0", 80)),
    ("metrics.local:9000", ("metrics.local", 9000)),
    ("[::1]:9464", ("::1", 9464)),
    ("127.0.0.1:0", ("127.0.0.1", 0)),
], ids=["loopback", "any", "name", "ipv6", "any-free-port"])
def test_serve_takes_host_and_port(value: str, listen: tuple[str, int]) -> None:
    assert parse_listen(value) == listen


@pytest.mark.parametrize("value", ["9464", "host", "host:", ":9464", "host:99999", "::1:9464"],
                         ids=["port-only", "host-only", "no-port", "no-host", "port-too-big",
                              "ipv6-without-brackets"])
def test_serve_refuses_anything_else_naming_the_fix(value: str) -> None:
    with pytest.raises(UsageError, match=r"expected HOST:PORT.*e\.g\. --serve 127\.0\.0\.1:9464"):
        parse_listen(value)




def snapshot(**extra: object) -> FlowSnapshot:
    status = FlowStatus("a->b", "a", "b", [
        PartitionStatus("orders", 0, 120, 100, 20, 35.5, "a.orders"),
        PartitionStatus("orders", 1, 50, None, 50, 60.0, "a.orders")],
        heartbeat_latency_s=0.25, heartbeat_age_s=4.0)
    snap = FlowSnapshot("a->b", "a", "b", status=status,
                        remote_topics={"orders": "a.orders"})
    for key, value in extra.items():
        setattr(snap, key, value)
    return snap


def samples(found: list[Family], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    (family,) = [f for f in found if f.name == name]
    return {s.labels: s.value for s in family.samples}


def at(partition: int) -> tuple[tuple[str, str], ...]:
    return (("source", "a"), ("target", "b"), ("topic", "a.orders"),
            ("partition", str(partition)))


def test_record_and_byte_counts_add_up_copied_ranges_under_the_remote_topic() -> None:
    runs = [run_row("r1", 0, 0, 60, NOW - timedelta(minutes=2)),
            run_row("r2", 0, 60, 100, NOW - timedelta(minutes=1)),
            run_row("r3", 0, 100, 110, NOW, outcome="failed")]  # aborted: counts nothing
    found = families([snapshot(runs=runs)], NOW.timestamp())
    assert samples(found, SOURCE + "record_count") == {at(0): 100}
    assert samples(found, SOURCE + "byte_count") == {at(0): 1000}
    assert samples(found, "ferry_last_run_success") == {(("source", "a"), ("target", "b")): 0}
    assert samples(found, "ferry_last_run_timestamp_seconds") == {
        (("source", "a"), ("target", "b")): NOW.timestamp()}


def test_record_age_and_latency_describe_the_latest_run_of_each_partition() -> None:
    runs = [run_row("r1", 0, 0, 50, NOW - timedelta(minutes=5), age_ms=90_000),  # older run
            run_row("r2", 0, 50, 80, NOW - timedelta(seconds=2), age_ms=4000, seconds=1.0),
            run_row("r2", 0, 80, 100, NOW - timedelta(seconds=1), age_ms=3000, seconds=0.25)]
    found = families([snapshot(runs=runs)], NOW.timestamp())
    assert samples(found, SOURCE + "record_age_ms") == {at(0): 3000}  # latest range
    assert samples(found, SOURCE + "record_age_ms_max") == {at(0): 4000}  # over run r2
    assert samples(found, SOURCE + "replication_latency_ms") == {at(0): 3250}
    assert samples(found, SOURCE + "replication_latency_ms_max") == {at(0): 5000}


def test_strimzis_names_carry_the_same_values_and_the_latest_runs_rates() -> None:
    # given: run r2 copied 50 records (500 bytes) of partition 0 in 1.25 s
    runs = [run_row("r1", 0, 0, 50, NOW - timedelta(minutes=5), age_ms=90_000),
            run_row("r2", 0, 50, 80, NOW - timedelta(seconds=2), age_ms=4000, seconds=1.0),
            run_row("r2", 0, 80, 100, NOW - timedelta(seconds=1), age_ms=3000, seconds=0.25)]
    found = families([snapshot(runs=runs)], NOW.timestamp())

    # then: what Strimzi's MM2 metrics config names kafka_connect_mirror_mirrorsourceconnector_*
    for suffix in ("record_count", "byte_count", "replication_latency_ms",
                   "replication_latency_ms_max", "record_age_ms", "record_age_ms_max"):
        assert samples(found, STRIMZI_SOURCE + suffix) == samples(found, SOURCE + suffix)
    assert samples(found, STRIMZI_SOURCE + "record_rate") == {at(0): 40.0}
    assert samples(found, STRIMZI_SOURCE + "byte_rate") == {at(0): 400.0}
    assert samples(found, STRIMZI_SOURCE + "record_age_ms_avg") == {at(0): 3000}
    assert samples(found, STRIMZI_SOURCE + "replication_latency_ms_avg") == {at(0): 3250}


def test_lag_per_partition_in_records_and_seconds_and_positions_once_known() -> None:
    found = families([snapshot()], NOW.timestamp())
    assert samples(found, "ferry_lag_records") == {at(0): 20, at(1): 50}
    assert samples(found, "ferry_lag_seconds") == {at(0): 35.5, at(1): 60.0}
    assert samples(found, "ferry_source_end_offset") == {at(0): 120, at(1): 50}
    assert samples(found, "ferry_position_offset") == {at(0): 100}  # partition 1: none yet
    pair = (("source", "a"), ("target", "b"))
    assert samples(found, "ferry_heartbeat_latency_seconds") == {pair: 0.25}
    assert samples(found, "ferry_flow_up") == {pair: 1}


def test_checkpoint_latency_per_group_partition_is_the_time_since_its_latest_translation(
) -> None:
    rows = [{"group_id": g, "source_topic": "orders", "source_partition": 0,
             "translated_at": NOW - timedelta(seconds=s)}
            for g, s in (("billing", 90), ("billing", 30), ("audit", 5))]
    found = families([snapshot(checkpoints=rows)], NOW.timestamp())
    labels = (("source", "a"), ("target", "b"), ("topic", "a.orders"), ("partition", "0"))
    assert samples(found, CHECKPOINT + "checkpoint_latency_ms") == {
        (("source", "a"), ("target", "b"), ("group", "audit"), *labels[2:]): 5000,
        (("source", "a"), ("target", "b"), ("group", "billing"), *labels[2:]): 30000}
    assert samples(found, "ferry_checkpoint_age_seconds") == {labels[:2]: 5.0}


def test_gaps_and_the_latest_verify_per_partition_are_reported() -> None:
    gaps = [{"topic": "orders", "partition": 1, "records": n, "detected_at": NOW}
            for n in (5, 7)]
    verify = [{"topic": "orders", "partition": 0, "checked": c, "altered": a, "missing": m,
               "extra": 0, "verified_at": NOW - timedelta(hours=h)}
              for c, a, m, h in ((100, 1, 2, 2), (120, 0, 0, 1))]
    found = families([snapshot(gaps=gaps, verify=verify)], NOW.timestamp())
    # every mirrored partition carries the counter from 0: the first loss is an increase
    assert samples(found, "ferry_gap_records_total") == {at(0): 0, at(1): 12}
    assert samples(found, "ferry_verify_mismatched_records") == {at(0): 0}
    assert samples(found, "ferry_verify_checked_records") == {at(0): 120}


def test_a_flow_whose_clusters_did_not_answer_is_down_but_keeps_its_recorded_history(
) -> None:
    snap = snapshot(runs=[run_row("r1", 0, 0, 10, NOW)])
    snap.status, snap.error = None, "source: broker unreachable"
    found = families([snap], NOW.timestamp())
    assert samples(found, "ferry_flow_up") == {(("source", "a"), ("target", "b")): 0}
    assert samples(found, SOURCE + "record_count") == {at(0): 10}
    assert not [f for f in found if f.name == "ferry_lag_records"]


def test_counters_cover_every_copied_range_while_ages_come_from_the_latest_rows() -> None:
    # the collector reads the counters as aggregates and only the latest runs' rows
    snap = snapshot(runs=[run_row("r9", 0, 900, 1000, NOW, age_ms=700)],
                    copied={("orders", 0): (1000, 9000), ("orders", 1): (5, 50)})
    found = families([snap], NOW.timestamp())
    assert samples(found, SOURCE + "record_count") == {at(0): 1000, at(1): 5}
    assert samples(found, SOURCE + "byte_count") == {at(0): 9000, at(1): 50}
    assert samples(found, SOURCE + "record_age_ms") == {at(0): 700}  # none known for 1


def test_a_latest_run_that_handed_over_to_a_newer_run_is_a_success_not_a_failure() -> None:
    # given: the earlier run of a turn copied, then left partition 1 to the run after it,
    # which found nothing more to copy (so the earlier run's rows are the latest)
    runs = [run_row("r1", 0, 0, 60, NOW - timedelta(seconds=2)),
            run_row("r1", 1, 0, 40, NOW, outcome="handed-over")]
    found = families([snapshot(runs=runs)], NOW.timestamp())
    assert samples(found, "ferry_last_run_success") == {(("source", "a"), ("target", "b")): 1}
    # the handed-over range counts no records (the run after it copies them)
    assert samples(found, SOURCE + "record_count") == {at(0): 60, at(1): 0}


def test_a_latest_run_with_a_failed_range_beside_a_hand_over_is_a_failure() -> None:
    runs = [run_row("r1", 0, 0, 60, NOW, outcome="failed"),
            run_row("r1", 1, 0, 40, NOW, outcome="handed-over")]
    found = families([snapshot(runs=runs)], NOW.timestamp())
    assert samples(found, "ferry_last_run_success") == {(("source", "a"), ("target", "b")): 0}


def test_how_far_delta_is_behind_the_offset_map_topic_is_exported_per_flow() -> None:
    # given: 12 offset-map entries on the target that Delta lacks, the oldest 95.5 s old
    snap = snapshot()
    assert snap.status is not None
    snap.status.state_behind_entries, snap.status.state_behind_seconds = 12, 95.5

    found = families([snap], NOW.timestamp())

    pair = (("source", "a"), ("target", "b"))
    assert samples(found, "ferry_state_behind_entries") == {pair: 12}
    assert samples(found, "ferry_state_behind_seconds") == {pair: 95.5}


def test_a_delta_caught_up_is_exported_as_zero_and_an_unread_target_as_nothing() -> None:
    caught_up = snapshot()
    assert caught_up.status is not None
    caught_up.status.state_behind_entries, caught_up.status.state_behind_seconds = 0, 0.0
    unread = snapshot()  # the offset-map topic could not be read: not known, not 0

    pair = (("source", "a"), ("target", "b"))
    found = families([caught_up], NOW.timestamp())
    assert samples(found, "ferry_state_behind_entries") == {pair: 0}
    assert samples(found, "ferry_state_behind_seconds") == {pair: 0}
    assert not [f for f in families([unread], NOW.timestamp())
                if f.name.startswith("ferry_state_behind")]


def test_a_cluster_that_did_not_answer_is_down_and_so_is_every_flow_it_is_a_side_of() -> None:
    # given: a->b read; c, the target of a->c and b->c, did not answer the probe
    up = snapshot()
    down = [FlowSnapshot("a->c", "a", "c", error="cluster c did not answer", down=("c",)),
            FlowSnapshot("b->c", "b", "c", error="cluster c did not answer", down=("c",))]

    found = families([up, *down], NOW.timestamp())

    assert samples(found, "ferry_cluster_up") == {
        (("cluster", "a"),): 1, (("cluster", "b"),): 1, (("cluster", "c"),): 0}
    assert samples(found, "ferry_flow_up") == {
        (("source", "a"), ("target", "b")): 1, (("source", "a"), ("target", "c")): 0,
        (("source", "b"), ("target", "c")): 0}


def test_silent_clusters_mark_their_clusters_and_every_flow_of_them_down() -> None:
    from ferry.observe.metrics import Family, mark_down

    families = [
        Family("ferry_flow_up", "gauge", "", (
            Sample((("source", "A"), ("target", "B")), 1.0),
            Sample((("source", "C"), ("target", "A")), 1.0),
            Sample((("source", "C"), ("target", "D")), 1.0))),
        Family("ferry_cluster_up", "gauge", "", tuple(
            Sample((("cluster", c),), 1.0) for c in "ABCD")),
        Family("ferry_lag_records", "gauge", "", (Sample((("source", "A"),), 7.0),)),
    ]

    marked = {f.name: [s.value for s in f.samples] for f in mark_down(families, {"A"})}

    assert marked == {"ferry_flow_up": [0.0, 0.0, 1.0], "ferry_cluster_up": [0.0, 1.0, 1.0, 1.0],
                      "ferry_lag_records": [7.0]}
    assert mark_down(families, set()) == families
