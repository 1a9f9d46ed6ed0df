"""Ferry's Prometheus alert rules, each alert linked to its section of Ferry's runbook.

The rules (`rules.yml` in this package) carry `runbook_url: "RUNBOOK_URL#<alert>"`; printed,
`RUNBOOK_URL` becomes where the runbook is served: the Ferry page of the team's Airflow
(`<Airflow's base URL>/ferry/runbook`, sections anchored by the alert's name in lower
case). As a `PrometheusRule` (the Prometheus Operator) the same groups go into `spec`.
The repository's `deploy/` files are these texts for the demo's Airflow (a test keeps
them so).
"""

from __future__ import annotations

from importlib import resources

from ferry.errors import UsageError

RUNBOOK_PATH = "/ferry/runbook"
PLACEHOLDER = "RUNBOOK_URL"
DEMO_AIRFLOW = "http://localhost:8080"
AIRFLOW_URL_ENV = "AIRFLOW__API__BASE_URL"

_OPERATOR_HEAD = """\
# Ferry's alert rules for the Prometheus Operator: the groups `ferry rules` prints, each
# alert's runbook_url its section of Ferry's runbook on the Ferry page (print them for your
# Airflow with `ferry rules --kubernetes --runbook-url https://AIRFLOW/ferry/runbook`).
# Match the labels to your Prometheus's ruleSelector.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: ferry
  labels:
    app.kubernetes.io/name: ferry
    role: alert-rules
spec:
"""


def runbook_url(airflow_url: str | None) -> str:
    """Where the runbook is served for an Airflow at `airflow_url` (its `[api] base_url`,
    a path included); the demo's Airflow without one."""
    base = (airflow_url or "").strip() or DEMO_AIRFLOW
    return base.rstrip("/") + RUNBOOK_PATH


def anchor(alert: str) -> str:
    """An alert's section in the runbook: its name in lower case."""
    return alert.lower()


def check_url(url: str) -> str:
    """`url` if it is an absolute http(s) URL without a fragment; else a usage error."""
    if not url.startswith(("http://", "https://")) or "#" in url or " " in url:
        raise UsageError(f"--runbook-url {url}: give the runbook's absolute address without "
                         "a #fragment, e.g. https://airflow.example.com/ferry/runbook")
    return url.rstrip("/")


def alert_rules(runbook: str) -> str:
    """The rules file (`rule_files:`), each alert's runbook_url under `runbook`."""
    template = (resources.files("ferry.observe") / "rules.yml").read_text()
    return template.replace(PLACEHOLDER, runbook)


def prometheus_rule(runbook: str) -> str:
    """The same groups as a `PrometheusRule` resource."""
    text = alert_rules(runbook)
    groups = text[text.index("groups:"):]
    return _OPERATOR_HEAD + "".join(f"  {line}" if line.strip() else line
                                    for line in groups.splitlines(keepends=True))
