"""The exposition on `prometheus_client`: the text format or OpenMetrics by the scrape's
`Accept`, MM2's names kept as the JMX exporter writes them, Ferry's counters named by the
conventions, the process's own series, and label values and special floats round-tripped
through Prometheus's own parsers."""

from __future__ import annotations

import math

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

from ferry.observe.exposition import TEXT, expose
from ferry.observe.metrics import (
    DEFINITIONS,
    SOURCE,
    STRIMZI_SOURCE,
    Family,
    Sample,
    to_json,
)
from tests.support.monitoring import PROMETHEUS_ACCEPT, scraped

OPENMETRICS = "application/openmetrics-text; version=1.0.0"

WEIRD = 'a"b\\c\nd'


def read(accept: str | None, found: list[Family], process: bool = False) -> dict[str, object]:
    """The families a scrape with `accept` reads back, by the parser of the format it got."""
    body, kind = expose(found, accept, process=process)
    parse = openmetrics_families if kind.startswith("application/openmetrics-text") \
        else text_families
    return {f.name: f for f in parse(body.decode())}


@pytest.mark.parametrize(("accept", "kind"), [
    (None, TEXT),
    ("*/*", TEXT),
    ("text/plain", TEXT),
    ("application/openmetrics-text; version=1.0.0", OPENMETRICS),
    (PROMETHEUS_ACCEPT,
     OPENMETRICS),  # what Prometheus sends
], ids=["nothing", "anything", "text", "openmetrics", "prometheus"])
def test_a_scrape_gets_the_format_its_accept_header_asks_for(
        accept: str | None, kind: str) -> None:
    body, got = expose(scraped(), accept, process=False)
    assert got.startswith(kind)
    assert body.decode().endswith("# EOF\n") == (kind == OPENMETRICS)


@pytest.mark.parametrize("accept", [None, OPENMETRICS], ids=["text", "openmetrics"])
def test_every_sample_reads_back_as_collected_and_as_json_says(accept: str | None) -> None:
    found = scraped()
    back = read(accept, found)
    as_json = {f["name"]: f for f in to_json(found)}
    for name, family in as_json.items():
        kind = DEFINITIONS[name][0]
        parsed = back[name.removesuffix("_total") if kind == "counter" else name]
        assert parsed.type == {"untyped": "unknown"}.get(kind, kind)  # type: ignore[attr-defined]
        assert [(s.labels, s.value) for s in parsed.samples  # type: ignore[attr-defined]
                if not s.name.endswith("_created")] == \
            [(s["labels"], s["value"]) for s in family["samples"]], name


@pytest.mark.parametrize("accept", [None, OPENMETRICS], ids=["text", "openmetrics"])
def test_mm2s_names_are_kept_exactly_and_ferrys_counters_end_in_total(
        accept: str | None) -> None:
    text = expose(scraped(), accept, process=False)[0].decode()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    for kept in (SOURCE + "record_count", SOURCE + "byte_count",
                 STRIMZI_SOURCE + "record_count", "ferry_records_copied_total",
                 "ferry_bytes_copied_total", "ferry_gap_records_total"):
        assert kept in names, kept
    assert SOURCE + "record_count_total" not in names


@pytest.mark.parametrize("accept", [None, OPENMETRICS], ids=["text", "openmetrics"])
def test_label_values_and_special_floats_round_trip(accept: str | None) -> None:
    found = [Family("ferry_lag_records", "gauge", "Lag.\nSecond line", (
        Sample((("topic", WEIRD), ("partition", "0")), 7.0),
        Sample((("topic", "x"), ("partition", "1")), math.inf),
        Sample((("topic", "y"), ("partition", "2")), 1e20))),
        Family("ferry_flow_up", "gauge", "Up.", (Sample((), 1.0),))]
    back = read(accept, found)
    lag = back["ferry_lag_records"]
    assert [(s.labels, s.value) for s in lag.samples] == [  # type: ignore[attr-defined]
        ({"topic": WEIRD, "partition": "0"}, 7.0),
        ({"topic": "x", "partition": "1"}, math.inf),
        ({"topic": "y", "partition": "2"}, 1e20)]
    assert lag.documentation == "Lag.\nSecond line"  # type: ignore[attr-defined]


def test_the_serving_process_adds_its_own_series() -> None:
    back = read(None, scraped(), process=True)
    for name in ("process_resident_memory_bytes", "process_cpu_seconds",
                 "process_open_fds", "process_start_time_seconds"):
        assert name in back, sorted(back)
    assert "process_resident_memory_bytes" not in read(None, scraped())


def test_nothing_collected_yet_is_an_empty_but_valid_exposition() -> None:
    assert expose([], None, process=False)[0] == b""
    assert expose([], OPENMETRICS, process=False)[0] == b"# EOF\n"


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_every_definition_is_a_kind_prometheus_client_exposes_under_its_own_name(
        name: str) -> None:
    kind, text = DEFINITIONS[name]
    assert kind in ("counter", "gauge", "untyped")
    assert (kind == "counter") == name.endswith("_total"), name
    found = [Family(name, kind, text, (Sample((("flow", "a"),), 1.0),))]
    assert f"{name}{{" in expose(found, OPENMETRICS, process=False)[0].decode()


def test_a_counter_not_ending_in_total_is_refused() -> None:
    with pytest.raises(ValueError, match="must end in _total"):
        expose([Family("ferry_copied", "counter", "x", (Sample((), 1.0),))], None)
