"""The monitoring Ferry ships (deploy/): its alert rules, and the exposition a scrape of a
flow with every kind of history returns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from ferry.observe.collector import Collector
from ferry.observe.exposition import expose
from ferry.observe.metrics import Family, families
from ferry.observe.snapshot import FlowSnapshot
from ferry.observe.status import FlowStatus, PartitionStatus

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.9,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
"""The Accept header of a Prometheus scrape (its default `scrape_protocols`, roughly)."""

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


PROMETHEUS = DEPLOY / "prometheus"


RULES = yaml.safe_load((PROMETHEUS / "ferry-rules.yml").read_text())


NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def exposition(latest: list[dict[str, Any]] | None = None) -> str:
    """The text a scrape returns for a flow that has every kind of history: copied ranges,
    translated groups, a gap, a verify, and live lag and heartbeats. `latest`: the `runs`
    rows of a run after the one that copied (as its copy job wrote them)."""
    return expose(scraped(latest))[0].decode()


def scraped(latest: list[dict[str, Any]] | None = None) -> list[Family]:
    """The families behind `exposition(latest)`."""
    status = FlowStatus("a->b", "a", "b", [PartitionStatus("orders", 0, 120, 100, 20, 35.5,
                                                           "a.orders", 604800.0)],
                        heartbeat_latency_s=0.25, heartbeat_age_s=4.0,
                        state_behind_entries=3, state_behind_seconds=42.0)
    run = {"flow": "a->b", "run_id": "r1", "lane": 0, "topic": "orders", "partition": 0,
           "range_start": 0, "range_end": 100, "records": 100, "bytes": 1000, "seconds": 0.5,
           "max_record_age_ms": 900, "outcome": "copied", "error": None,
           "delivery": "exactly_once", "duplicates": 0, "finished_at": NOW}
    snap = FlowSnapshot("a->b", "a", "b", status=status, remote_topics={"orders": "a.orders"})
    # the later run's rows finished after the first's, whenever the test runs
    snap.runs = [run] + [row | {"flow": "a->b", "finished_at": NOW + timedelta(seconds=1)}
                         for row in latest or []]
    snap.checkpoints = [{"group_id": "billing", "source_topic": "orders", "source_partition": 0,
                         "translated_at": NOW - timedelta(seconds=30)}]
    snap.gaps = [{"topic": "orders", "partition": 0, "records": 5, "detected_at": NOW}]
    snap.verify = [{"topic": "orders", "partition": 0, "checked": 100, "altered": 1,
                    "missing": 0, "extra": 0, "verified_at": NOW}]
    served = Collector(lambda: families([snap], NOW.timestamp()),
                       clock=lambda: NOW.timestamp() + 5)  # as a scrape gets it
    served.collect_once()
    found = served.latest()
    assert found is not None
    return found


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in RULES["groups"] for rule in group["rules"]]


def value_of(body: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name{labels}` in a scrape's text (either format), read by
    Prometheus's own parser; None when the scrape has no such sample."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics,
    )
    from prometheus_client.parser import text_string_to_metric_families as text

    parse = openmetrics if body.rstrip().endswith("# EOF") else text
    return next((s.value for family in parse(body) for s in family.samples
                 if s.name == name and s.labels == labels), None)
