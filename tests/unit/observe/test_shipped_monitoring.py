"""The Prometheus alert rules and the Grafana dashboard Ferry ships (deploy/) ask only for
metrics Ferry's exposition carries, by labels they carry, and read as their tools expect.
promtool's own checks (it is a program) are in tests/integration/test_prometheus_rules.py."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from ferry.observe.metrics import DEFINITIONS
from ferry.observe.rules import alert_rules as alert_rules_text
from ferry.observe.rules import prometheus_rule, runbook_url
from ferry.observe.runbook import render_runbook, sections
from tests.support.monitoring import DEPLOY, PROMETHEUS, RULES, alert_rules, exposition

DASHBOARD = json.loads((DEPLOY / "grafana" / "ferry.json").read_text())
LABELS = {"source", "target", "topic", "partition", "group"}
METRIC = re.compile(r"\b(?:ferry|kafka_connect_mirror)_[a-z_]+\b")




EXPOSED = set(re.findall(r"^# TYPE (\S+) ", exposition(), re.MULTILINE))




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


def test_the_exposition_carries_every_defined_metric_beside_the_process_series() -> None:
    assert set(DEFINITIONS) == {n for n in EXPOSED if not n.startswith("process_")}
    assert "process_resident_memory_bytes" in EXPOSED


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
    # Strimzi's MM2 dashboard selects its series by these
    labels = {r["targetLabel"] for r in endpoint["relabelings"]}
    assert {"strimzi_io_kind", "strimzi_io_cluster"} <= labels
    assert {"targetLabel": "strimzi_io_kind", "replacement": "KafkaMirrorMaker2"} in \
        endpoint["relabelings"]


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
