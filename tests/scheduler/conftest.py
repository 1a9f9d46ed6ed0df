"""A real Airflow scheduler for the flow DAGs (`tests.scheduler.stack`: the components
`airflow standalone` would run, loopback only), once per test module.

FERRY_CONFIG is a config of two manual-only flows (`ferry.schedule = none`) over the
session's clusters, each with its own aliases and its own source topic, which the test that
uses the flow creates:

- `short_timeout`: `ferry.mirror.timeout.seconds = 2`, less than spark-submit needs to start;
- `unsynced_configs`: `sync.topic.configs.enabled = false`, so a remote topic keeps the
  configs a test gives it.

Tests trigger runs and read states, XComs and task logs through the REST API. After start-up,
and again once the module's tests have passed, the fixture fails if any process of Airflow
listens on an address other than loopback. After a failure, the components' logs and the
task logs are copied into test-artifacts/.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.config import Flow, load_config
from tests.scheduler.stack import Airflow, keep_logs, running

SHORT_TIMEOUT_S = 2


@dataclass(frozen=True)
class FlowUnderTest:
    flow: Flow
    topic: str
    """The one source topic the flow mirrors (not created yet: the test creates it)."""

    @property
    def dag_id(self) -> str:
        return self.flow.dag_id


class Standalone(Airflow):
    """The module's Airflow, and its two flows."""

    def __init__(self, airflow: Airflow, home: Path, short_timeout: FlowUnderTest,
                 unsynced_configs: FlowUnderTest) -> None:
        super().__init__(airflow.url)
        self.home = home
        """Its AIRFLOW_HOME: the SQLite database, and each component's log."""
        self.short_timeout = short_timeout
        self.unsynced_configs = unsynced_configs


def _config(base: Path, clusters: dict[str, str]) -> tuple[FlowUnderTest, FlowUnderTest]:
    """The two flows' config (aliases unique to this module: the brokers are shared)."""
    tag = uuid.uuid4().hex[:6]
    short, unsynced = (f"src_t{tag}", f"tgt_t{tag}"), (f"src_u{tag}", f"tgt_u{tag}")
    topics = {short: f"sched-timeout-{tag}", unsynced: f"sched-retry-{tag}"}
    lines = [f"clusters = {', '.join(short + unsynced)}"]
    for source, target in (short, unsynced):
        lines += [f"{source}.bootstrap.servers = {clusters['source']}",
                  f"{target}.bootstrap.servers = {clusters['target']}",
                  f"{source}->{target}.enabled = true",
                  f"{source}->{target}.topics = {topics[(source, target)]}"]
    lines += [f"{short[0]}->{short[1]}.ferry.mirror.timeout.seconds = {SHORT_TIMEOUT_S}",
              f"{unsynced[0]}->{unsynced[1]}.sync.topic.configs.enabled = false",
              "ferry.schedule = none", "replication.factor = 1",
              "checkpoints.topic.replication.factor = 1", "emit.heartbeats.enabled = false",
              # The brokers are shared: another test's `heartbeats` topic is not these flows'.
              "heartbeats.replication.enabled = false", f"ferry.state.dir = {base / 'state'}"]
    path = base / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    config = load_config(path)
    short_flow, unsynced_flow = (config.flow(f"{s}->{t}") for s, t in (short, unsynced))
    return (FlowUnderTest(short_flow, topics[short]),
            FlowUnderTest(unsynced_flow, topics[unsynced]))


@pytest.fixture(scope="module")
def standalone(clusters: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
               request: pytest.FixtureRequest) -> Iterator[Standalone]:
    base = tmp_path_factory.mktemp("scheduler")
    short_timeout, unsynced_configs = _config(base, clusters)
    failures = request.session.testsfailed
    passed = False
    try:
        with running(base, base / "mm2.properties",
                     (short_timeout.dag_id, unsynced_configs.dag_id)) as (airflow, _):
            yield Standalone(airflow, base / "airflow", short_timeout, unsynced_configs)
            passed = request.session.testsfailed == failures
    finally:
        if not passed:
            keep_logs(base / "airflow", request.module.__name__.rsplit(".", 1)[-1])
