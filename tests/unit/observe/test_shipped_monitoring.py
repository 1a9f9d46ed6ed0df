"""The Prometheus alert rules and the Grafana dashboard Ferry ships (deploy/) ask only for
metrics Ferry exports, by labels they carry, and read as their tools expect."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ferry.observe.metrics import DEFINITIONS

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
RULES = yaml.safe_load((DEPLOY / "prometheus" / "ferry-alerts.yml").read_text())
DASHBOARD = json.loads((DEPLOY / "grafana" / "ferry-dashboard.json").read_text())
LABELS = {"source", "target", "topic", "partition", "group"}
METRIC = re.compile(r"\b(?:ferry|kafka_connect_mirror)_[a-z_]+\b")


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
    assert names and names <= set(DEFINITIONS), names - set(DEFINITIONS)
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
