"""The Prometheus alert rules and the Grafana dashboard Ferry ships (deploy/) ask only for
metrics Ferry's exposition carries, by labels they carry, and read as their tools expect.
promtool's own checks (it is a program) are in tests/integration/test_prometheus_rules.py."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ferry.observe.collector import Collector
from ferry.observe.metrics import DEFINITIONS, families, render
from ferry.observe.rules import alert_rules as alert_rules_text
from ferry.observe.rules import prometheus_rule, runbook_url
from ferry.observe.runbook import render_runbook, sections
from ferry.observe.snapshot import FlowSnapshot
from ferry.observe.status import FlowStatus, PartitionStatus

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
RULES = yaml.safe_load((PROMETHEUS / "ferry-rules.yml").read_text())
DASHBOARD = json.loads((DEPLOY / "grafana" / "ferry.json").read_text())
LABELS = {"source", "target", "topic", "partition", "group"}
METRIC = re.compile(r"\b(?:ferry|kafka_connect_mirror)_[a-z_]+\b")
NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def exposition() -> str:
    """The text a scrape returns for a flow that has every kind of history: copied ranges,
    translated groups, a gap, a verify, and live lag and heartbeats."""
    status = FlowStatus("a->b", "a", "b", [PartitionStatus("orders", 0, 120, 100, 20, 35.5,
                                                           "a.orders", 604800.0)],
                        heartbeat_latency_s=0.25, heartbeat_age_s=4.0)
    run = {"flow": "a->b", "run_id": "r1", "lane": 0, "topic": "orders", "partition": 0,
           "range_start": 0, "range_end": 100, "records": 100, "bytes": 1000, "seconds": 0.5,
           "max_record_age_ms": 900, "outcome": "copied", "error": None,
           "delivery": "exactly_once", "duplicates": 0, "finished_at": NOW}
    snap = FlowSnapshot("a->b", "a", "b", status=status, remote_topics={"orders": "a.orders"})
    snap.runs = [run]
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
    return render(found)


EXPOSED = set(re.findall(r"^# TYPE (\S+) ", exposition(), re.MULTILINE))


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in RULES["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in DASHBOARD["panels"] for target in panel["targets"]]


def balanced(expr: str) -> bool:
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for char in expr:
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            if depth[closing[char]] < 0:
                return False
    return not any(depth.values())


EXPRS = [pytest.param(r["expr"], id=r["alert"]) for r in alert_rules()] + [
    pytest.param(e, id=f"panel-{i}") for i, e in enumerate(dashboard_exprs())]


@pytest.mark.parametrize("expr", EXPRS)
def test_each_query_asks_for_exported_metrics_by_their_labels(expr: str) -> None:
    names = set(METRIC.findall(expr))
    # Prometheus's own `up` of the ferry job is the one series not Ferry's (exporter down)
    assert names or 'up{job="ferry"}' in expr, expr
    assert names <= EXPOSED, names - EXPOSED
    for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
        assert {label.strip() for label in clause.split(",")} <= LABELS, clause
    assert balanced(expr), expr


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    rules = alert_rules()
    assert len({r["alert"] for r in rules}) == len(rules)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule["alert"]


def test_records_lost_and_a_flow_down_alert_at_once_or_soon() -> None:
    rules = {r["alert"]: r for r in alert_rules()}
    assert "ferry_gap_records_total" in rules["FerryRecordsLost"]["expr"]
    assert "for" not in rules["FerryRecordsLost"]  # a loss is never transient
    assert rules["FerryFlowDown"]["labels"]["severity"] == "critical"


def test_the_dashboard_is_importable_and_filters_every_panel_by_flow() -> None:
    assert DASHBOARD["uid"] == "ferry-mirror" and DASHBOARD["title"]
    variables = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert variables == {"datasource", "source", "target"}
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for panel in DASHBOARD["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert 'source=~"$source", target=~"$target"' in target["expr"], panel["title"]


def test_the_exposition_carries_every_defined_metric() -> None:
    assert set(DEFINITIONS) == EXPOSED


def test_the_rules_unit_tests_cover_every_alert_firing_and_quiet() -> None:
    cases = yaml.safe_load((PROMETHEUS / "ferry-rules.test.yml").read_text())["tests"]
    checks = [c for case in cases for c in case["alert_rule_test"]]
    for rule in alert_rules():
        mine = [c for c in checks if c["alertname"] == rule["alert"]]
        assert any(c.get("exp_alerts") for c in mine), f"{rule['alert']} never seen firing"
        assert any(not c.get("exp_alerts") for c in mine), f"{rule['alert']} never seen quiet"


def test_the_shipped_rules_are_what_ferry_rules_prints_for_the_demos_airflow() -> None:
    demo = runbook_url(None)
    assert demo == "http://localhost:8080/ferry/runbook"
    assert (PROMETHEUS / "ferry-rules.yml").read_text() == alert_rules_text(demo)
    assert (DEPLOY / "kubernetes" / "ferry-prometheusrule.yaml").read_text() == \
        prometheus_rule(demo)


def test_the_prometheus_operator_rules_are_the_rules_file_and_the_monitor_is_the_ferry_job(
) -> None:
    kubernetes = DEPLOY / "kubernetes"
    rule = yaml.safe_load((kubernetes / "ferry-prometheusrule.yaml").read_text())
    monitor = yaml.safe_load((kubernetes / "ferry-podmonitor.yaml").read_text())

    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"]["groups"] == RULES["groups"]
    assert monitor["kind"] == "PodMonitor"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["authorization"]["type"] == "Bearer"
    assert {"targetLabel": "job", "replacement": "ferry"} in endpoint["relabelings"]


@pytest.mark.parametrize(
    ("airflow", "runbook"),
    [(None, "http://localhost:8080/ferry/runbook"),
     ("https://airflow.example.com", "https://airflow.example.com/ferry/runbook"),
     ("https://example.com/airflow/", "https://example.com/airflow/ferry/runbook")],
    ids=["the-demo", "an-airflow", "an-airflow-under-a-path"],
)
def test_every_alert_links_to_its_section_of_the_runbook_the_ferry_page_serves(
    airflow: str | None, runbook: str
) -> None:
    assert runbook_url(airflow) == runbook
    rules = yaml.safe_load(alert_rules_text(runbook_url(airflow)))
    page = render_runbook()
    for rule in (r for group in rules["groups"] for r in group["rules"]):
        link = rule["annotations"]["runbook_url"]
        assert link == f"{runbook}#{rule['alert'].lower()}"
        assert f'id="{rule["alert"].lower()}"' in page, rule["alert"]


def test_every_alert_has_a_section_in_the_runbook() -> None:
    assert {r["alert"] for r in alert_rules()} <= set(sections())
