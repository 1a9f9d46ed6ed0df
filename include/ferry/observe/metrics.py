"""Prometheus metrics of Ferry's flows, named as MirrorMaker 2's through the JMX exporter
(pure: samples in, exposition text or JSON out).

MM2 reports `kafka.connect.mirror:type=MirrorSourceConnector,source=S,target=T,topic=<remote
topic>,partition=N` attributes (`record-count`, `byte-count`, `replication-latency-ms`,
`record-age-ms`, ...) and `type=MirrorCheckpointConnector,...,group=G` `checkpoint-latency-ms`.
The Prometheus JMX exporter's usual MM2 rules turn them into
`kafka_connect_mirror_source_connector_record_count{source,target,topic,partition}` and so on:
Ferry exports the same names and labels, so dashboards and alerts built for MM2 keep
working, plus what MM2 lacks (`ferry_*`: lag per partition in records and seconds, the last
run, heartbeats, gaps, verify results).

The exposition itself (text format or OpenMetrics, with `process_*`) is
`ferry.observe.exposition`, on `prometheus_client`.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ferry.observe.snapshot import (
    FlowSnapshot,
    epoch,
    gap_records,
    latest_checkpoints,
    latest_verify,
    mismatched,
    partition_totals,
    run_summaries,
)

TOKEN_ENV = "FERRY_METRICS_TOKEN"
"""The environment variable holding the scrape token (never logged)."""

SOURCE = "kafka_connect_mirror_source_connector_"
CHECKPOINT = "kafka_connect_mirror_checkpoint_connector_"
STRIMZI_SOURCE = "kafka_connect_mirror_mirrorsourceconnector_"
STRIMZI_CHECKPOINT = "kafka_connect_mirror_mirrorcheckpointconnector_"
"""The names Strimzi's MM2 metrics config gives the same attributes (its dashboards query
them): served beside the generic exporter rule's names."""

# name -> (type, help). The order here is the order of the exposition. MM2's counters are
# `untyped`, as the JMX exporter's rules expose them: a `counter` must end in `_total`
# (`prometheus_client` and OpenMetrics name counters so).
DEFINITIONS: dict[str, tuple[str, str]] = {
    SOURCE + "record_count": (
        "untyped", "Records mirrored to the remote topic partition (MM2 record-count)."),
    SOURCE + "byte_count": (
        "untyped", "Bytes (key + value) mirrored to the remote topic partition "
                   "(MM2 byte-count counts values only)."),
    SOURCE + "replication_latency_ms": (
        "gauge", "Latest run: ms from the timestamp of the oldest record of the partition's "
                 "latest range to its commit on the target (MM2 replication-latency-ms)."),
    SOURCE + "replication_latency_ms_max": (
        "gauge", "Latest run: the largest replication latency of the partition's ranges "
                 "(MM2 replication-latency-ms-max)."),
    SOURCE + "record_age_ms": (
        "gauge", "Latest run: age in ms of the oldest record of the partition's latest range "
                 "when it was read (MM2 record-age-ms)."),
    SOURCE + "record_age_ms_max": (
        "gauge", "Latest run: the largest record age of the partition's ranges "
                 "(MM2 record-age-ms-max)."),
    CHECKPOINT + "checkpoint_latency_ms": (
        "gauge", "ms since the group partition's offset was last translated to the target "
                 "(MM2 checkpoint-latency-ms; Ferry translates once per run)."),
    STRIMZI_SOURCE + "record_count": ("gauge", "Strimzi's name for MM2 record-count."),
    STRIMZI_SOURCE + "byte_count": ("gauge", "Strimzi's name for MM2 byte-count (key + value)."),
    STRIMZI_SOURCE + "record_rate": (
        "gauge", "Strimzi's name for MM2 record-rate: records per second while the "
                 "partition's latest run copied it."),
    STRIMZI_SOURCE + "byte_rate": (
        "gauge", "Strimzi's name for MM2 byte-rate: bytes per second while the partition's "
                 "latest run copied it."),
    STRIMZI_SOURCE + "replication_latency_ms": (
        "gauge", "Strimzi's name for MM2 replication-latency-ms."),
    STRIMZI_SOURCE + "replication_latency_ms_max": (
        "gauge", "Strimzi's name for MM2 replication-latency-ms-max."),
    STRIMZI_SOURCE + "replication_latency_ms_avg": (
        "gauge", "Strimzi's name for MM2 replication-latency-ms-avg: Ferry records each "
                 "range's oldest record, so this is the latest range's (an upper bound)."),
    STRIMZI_SOURCE + "record_age_ms": ("gauge", "Strimzi's name for MM2 record-age-ms."),
    STRIMZI_SOURCE + "record_age_ms_max": (
        "gauge", "Strimzi's name for MM2 record-age-ms-max."),
    STRIMZI_SOURCE + "record_age_ms_avg": (
        "gauge", "Strimzi's name for MM2 record-age-ms-avg: the latest range's oldest "
                 "record's age (an upper bound)."),
    STRIMZI_CHECKPOINT + "checkpoint_latency_ms": (
        "gauge", "Strimzi's name for MM2 checkpoint-latency-ms."),
    "ferry_lag_records": (
        "gauge", "Source records not mirrored yet: source end (last stable offset) minus "
                 "the flow's position."),
    "ferry_lag_seconds": (
        "gauge", "Age in seconds of the oldest source record not mirrored yet (0 when caught "
                 "up)."),
    "ferry_source_retention_seconds": (
        "gauge", "How long the source topic keeps a record (retention.ms); absent when it "
                 "keeps records for ever or only compacts. ferry_lag_seconds reaching it "
                 "means records may be deleted before they are mirrored."),
    "ferry_source_end_offset": (
        "gauge", "The source partition's last stable offset (read_committed end)."),
    "ferry_position_offset": (
        "gauge", "The next source offset the flow copies (absent before the first copy)."),
    "ferry_gap_records_total": (
        "counter", "Source records deleted by retention before they were mirrored (the gaps "
                   "table)."),
    "ferry_verify_mismatched_records": (
        "gauge", "Records the partition's latest verify found altered, missing or extra on "
                 "the target."),
    "ferry_verify_checked_records": (
        "gauge", "Records the partition's latest verify compared."),
    "ferry_last_run_timestamp_seconds": (
        "gauge", "When the flow's latest copy job finished (Unix time; an idle run starts "
                 "none)."),
    "ferry_last_run_success": (
        "gauge", "1 when every range of the flow's latest copy job was copied, 0 when one "
                 "failed."),
    "ferry_heartbeat_latency_seconds": (
        "gauge", "Latest heartbeat: seconds from its emission on the source to its arrival on "
                 "the target."),
    "ferry_heartbeat_age_seconds": (
        "gauge", "Seconds since the latest heartbeat of the flow was emitted."),
    "ferry_checkpoint_age_seconds": (
        "gauge", "Seconds since the flow last translated consumer-group offsets."),
    "ferry_state_behind_entries": (
        "gauge", "Offset-map entries committed on the target that the Delta offset map does "
                 "not hold yet (their runs rows are not in Delta either; 0 when caught up)."),
    "ferry_state_behind_seconds": (
        "gauge", "Seconds since the oldest offset-map entry not in Delta yet was committed on "
                 "the target (0 when Delta holds every entry)."),
    "ferry_records_copied_total": (
        "counter", "Records copied to the remote partition, ever (the MM2 record-count, named "
                   "by Prometheus's conventions)."),
    "ferry_bytes_copied_total": (
        "counter", "Bytes (key + value) copied to the remote partition, ever (the MM2 "
                   "byte-count, named by Prometheus's conventions)."),
    "ferry_build_info": (
        "gauge", "Always 1; its label `version` is the Ferry serving these metrics."),
    "ferry_cluster_up": (
        "gauge", "1 when the cluster answered the latest collection's probe (its metadata, "
                 "within 5 s), 0 when it did not: the flows it is a side of are down."),
    "ferry_flow_up": (
        "gauge", "1 when the flow's clusters answered the latest collection, 0 when they did "
                 "not (the page names the error)."),
    "ferry_metrics_collected": (
        "gauge", "1 once a collection of the metrics has ended; 0 while the first one still "
                 "runs (nothing else is known yet: every other series is absent)."),
    "ferry_metrics_age_seconds": (
        "gauge", "Seconds since the metrics served were collected (collected in the "
                 "background: a scrape never waits on the clusters)."),
    "ferry_metrics_collect_seconds": (
        "gauge", "How long the latest collection of the metrics took."),
}


@dataclass(frozen=True)
class Sample:
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    """`counter` (its name ends in `_total`), `gauge` or `untyped`."""
    help: str
    samples: tuple[Sample, ...]


def mark_down(families: Sequence[Family], silent: Collection[str]) -> list[Family]:
    """`families` with the `silent` clusters down: their `ferry_cluster_up` 0, and
    `ferry_flow_up` 0 for every flow whose source or target is one of them (pure)."""
    def down(sample: Sample, keys: tuple[str, ...]) -> Sample:
        labels = dict(sample.labels)
        return Sample(sample.labels, 0.0) if any(labels.get(k) in silent for k in keys) \
            else sample

    keys = {"ferry_flow_up": ("source", "target"), "ferry_cluster_up": ("cluster",)}
    return [replace(f, samples=tuple(down(s, keys[f.name]) for s in f.samples))
            if f.name in keys and silent else f for f in families]


@dataclass
class Registry:
    """Collects samples by metric name; `families()` gives them in `DEFINITIONS` order,
    leaving out names without samples."""

    found: dict[str, list[Sample]] = field(default_factory=dict)

    def add(self, name: str, labels: Mapping[str, str | int], value: float | None) -> None:
        """Record one sample; a None value (not known) records nothing."""
        if name not in DEFINITIONS:
            raise KeyError(f"undefined metric {name}")
        if value is not None:
            self.found.setdefault(name, []).append(
                Sample(tuple((k, str(v)) for k, v in labels.items()), float(value)))

    def families(self) -> list[Family]:
        return [Family(name, kind, text, tuple(self.found[name]))
                for name, (kind, text) in DEFINITIONS.items() if name in self.found]


def format_value(value: float) -> str:
    """Integers without a decimal point, NaN and infinities as Prometheus spells them (for
    JSON, which has no NaN)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def to_json(families: Iterable[Family]) -> list[dict[str, Any]]:
    """The same samples as JSON (`ferry metrics --json`); NaN and infinities as strings."""
    def value(v: float) -> float | str:
        return v if math.isfinite(v) else format_value(v)

    return [{"name": f.name, "type": f.kind, "help": f.help,
             "samples": [{"labels": dict(s.labels), "value": value(s.value)}
                         for s in f.samples]} for f in families]


def token_allows(authorization: str | None, token: str | None) -> bool:
    """Whether an `Authorization` header carries the configured scrape token (`Bearer
    <token>`); always False when no token is configured. Constant-time comparison."""
    if not token or not authorization:
        return False
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode())


def families(snapshots: Iterable[FlowSnapshot], now: float) -> list[Family]:
    """Every metric of `snapshots`; `now` (Unix seconds) dates the checkpoint latencies."""
    from ferry import __version__

    registry = Registry()
    registry.add("ferry_build_info", {"version": __version__}, 1)
    clusters: dict[str, int] = {}
    for snap in snapshots:
        _flow_samples(registry, snap, now)
        for alias in (snap.source, snap.target):
            if alias in snap.down:
                clusters[alias] = 0
            elif snap.status is not None:
                clusters.setdefault(alias, 1)
    for alias, up in sorted(clusters.items()):
        registry.add("ferry_cluster_up", {"cluster": alias}, up)
    return registry.families()


def _flow_samples(registry: Registry, snap: FlowSnapshot, now: float) -> None:
    pair: dict[str, str | int] = {"source": snap.source, "target": snap.target}

    def where(topic: str, partition: int) -> dict[str, str | int]:
        return pair | {"topic": snap.remote(topic), "partition": partition}

    registry.add("ferry_flow_up", pair, 0 if snap.status is None else 1)
    for (topic, partition), totals in partition_totals(snap.runs, snap.copied).items():
        at = where(topic, partition)
        # the generic exporter rule's names, and Strimzi's (its dashboards query them)
        both: dict[str, float | None] = {
            "record_count": totals.records, "byte_count": totals.bytes,
            "replication_latency_ms": totals.latency_ms,
            "replication_latency_ms_max": totals.latency_ms_max,
            "record_age_ms": totals.record_age_ms,
            "record_age_ms_max": totals.record_age_ms_max}
        strimzi_only: dict[str, float | None] = {
            "record_rate": totals.record_rate, "byte_rate": totals.byte_rate,
            "replication_latency_ms_avg": totals.latency_ms,
            "record_age_ms_avg": totals.record_age_ms}
        for suffix, value in both.items():
            registry.add(SOURCE + suffix, at, value)
        for suffix, value in (both | strimzi_only).items():
            registry.add(STRIMZI_SOURCE + suffix, at, value)
        registry.add("ferry_records_copied_total", at, totals.records)
        registry.add("ferry_bytes_copied_total", at, totals.bytes)
    for seen in latest_checkpoints(snap.checkpoints):
        group_at = pair | {"group": seen.group, "topic": snap.remote(seen.topic),
                           "partition": seen.partition}
        latency = max(0, round(1000 * (now - epoch(seen.translated_at))))
        registry.add(CHECKPOINT + "checkpoint_latency_ms", group_at, latency)
        registry.add(STRIMZI_CHECKPOINT + "checkpoint_latency_ms", group_at, latency)
    if snap.status is not None:
        for p in snap.status.partitions:
            at = where(p.topic, p.partition)
            registry.add("ferry_lag_records", at, p.lag_records)
            registry.add("ferry_lag_seconds", at, p.lag_seconds)
            if p.retention_seconds is not None:
                registry.add("ferry_source_retention_seconds", at, p.retention_seconds)
            registry.add("ferry_source_end_offset", at, p.source_end)
            registry.add("ferry_position_offset", at, p.position)
    # Every mirrored partition carries the counter, 0 until records are lost, so the first
    # loss is an increase Prometheus sees (a series born at N shows no increase).
    lost = gap_records(snap.gaps)
    watched = {(p.topic, p.partition) for p in snap.status.partitions} if snap.status else set()
    for topic, partition in sorted(watched | set(lost)):
        registry.add("ferry_gap_records_total", where(topic, partition),
                     lost.get((topic, partition), 0))
    for (topic, partition), row in latest_verify(snap.verify).items():
        registry.add("ferry_verify_mismatched_records", where(topic, partition), mismatched(row))
        registry.add("ferry_verify_checked_records", where(topic, partition),
                     int(row["checked"] or 0))
    latest = run_summaries(snap.runs, limit=1)
    if latest:
        registry.add("ferry_last_run_timestamp_seconds", pair, epoch(latest[0].finished_at))
        # a run that handed over to a newer run of the flow did not fail (takeover)
        registry.add("ferry_last_run_success", pair, 0 if latest[0].outcome.failed else 1)
    if snap.checkpoints:
        newest = max(epoch(row["translated_at"]) for row in snap.checkpoints)
        registry.add("ferry_checkpoint_age_seconds", pair, round(max(0.0, now - newest), 3))
    if snap.status is not None:
        registry.add("ferry_heartbeat_latency_seconds", pair, snap.status.heartbeat_latency_s)
        registry.add("ferry_heartbeat_age_seconds", pair, snap.status.heartbeat_age_s)
        registry.add("ferry_state_behind_entries", pair, snap.status.state_behind_entries)
        registry.add("ferry_state_behind_seconds", pair, snap.status.state_behind_seconds)
