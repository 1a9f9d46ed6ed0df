"""Ferry's metric families exposed through `prometheus_client`: the Prometheus text format
(0.0.4) or OpenMetrics 1.0, whichever the scrape's `Accept` header asks for, with the
serving process's own `process_*` series beside them.

A custom collector hands the families collected in the background
(`ferry.observe.collector`) to a registry made for one scrape, so a scrape never reads a
cluster. MirrorMaker 2's names (`kafka_connect_mirror_*_record_count`, `..._byte_count`)
are kept exactly as the JMX exporter writes them: a counter in `prometheus_client` would
be renamed `..._total`, so they are exposed untyped, as the exporter's default rules expose
them (OpenMetrics: `unknown`); Ferry's own counters follow the conventions
(`ferry_records_copied_total`, `ferry_bytes_copied_total`, `ferry_gap_records_total`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from ferry.observe.metrics import Family

TEXT = "text/plain; version=0.0.4; charset=utf-8"
"""The content type of the text format (a scrape that asks for nothing gets it)."""


class Families:
    """A `prometheus_client` collector of Ferry's families, as collected."""

    def __init__(self, families: Sequence[Family]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield _metric(family)


def _metric(family: Family) -> Metric:
    """A family as `prometheus_client` exposes it (see the module for the kinds)."""
    metric: Metric
    if family.kind == "counter":
        if not family.name.endswith("_total"):
            raise ValueError(f"counter {family.name} must end in _total")
        metric = CounterMetricFamily(family.name, family.help)
    elif family.kind == "gauge":
        metric = GaugeMetricFamily(family.name, family.help)
    elif family.kind == "untyped":
        metric = UnknownMetricFamily(family.name, family.help)
    else:
        raise ValueError(f"metric {family.name}: unknown kind {family.kind!r}")
    for sample in family.samples:
        metric.add_sample(metric.name + ("_total" if family.kind == "counter" else ""),
                          dict(sample.labels), sample.value)
    return metric


def expose(families: Sequence[Family], accept: str | None = None,
           process: bool = True) -> tuple[bytes, str]:
    """(body, content type) of a scrape: OpenMetrics when `accept` asks for
    `application/openmetrics-text`, the text format otherwise; `process`: with this
    process's `process_*` series (CPU, memory, open files, start time)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families(families))
    if process:
        ProcessCollector(registry=registry)
    encode, content_type = choose_encoder(accept or "")
    return encode(registry), content_type
