"""The session's one Airflow (`tests.scheduler.stack`: the components `airflow standalone`
would run, loopback only) for the scheduler tier and the browser tier: `airflow_stack`,
registered in tests/conftest.py and started once, on the worker that tests/conftest.py
sends both tiers' modules to together (SHARED_SCOPES).

FERRY_CONFIG holds every flow those tests use, all manual-only (`ferry.schedule = none`),
over the session's clusters. Each flow belongs to one module and has its own aliases, its
own source topic (which the test or module that uses the flow creates), its own DAG and its
own state dir (one per module, as when each module had an Airflow of its own), so that the
tests of one module cannot disturb the other's:

- `tests/scheduler/test_flow_under_scheduler.py` (`standalone`):
  - `short_timeout`: `ferry.copy.timeout.seconds = 2`, less than spark-submit needs to
    start;
  - `unsynced_configs`: `sync.topic.configs.enabled = false`, so a remote topic keeps the
    configs a test gives it;
  - `relay`: `ferry.schedule = @continuous`, its runs RELAY_SPAN_S apart, each copying
    on for up to RELAY_HANDOVER_S more (its DAG is paused until its test unpauses it).
- `tests/scheduler/test_assets_and_connections_under_scheduler.py` (`scheduler`): `assets`
  (two DAG files, `DOWNSTREAM_DAGS`, wait downstream of it), `connected` (its source's
  connection is an `AIRFLOW_CONN_<ID>` variable in every component's environment, its
  target's is created by its test), `adopted` and `differ` (see that module's docstring).
  Only this module triggers the config's `ferry_failover` and `ferry_adopt`, and the
  downstream DAGs.
- `tests/scheduler/test_airflow_faults.py` (`faulted`): `faults`, `@continuous` (runs
  FAULTS_SPAN_S apart, each handing over to the next), whose DAG is paused until its module
  unpauses it. That module kills task processes, marks runs failed, and ends and starts
  again the stack's api-server and scheduler (`Stack.components`); it runs first of the
  tier (modules run in name order), and leaves every component running. A task going
  without a heartbeat for HEARTBEAT_TIMEOUT_S is a zombie to the scheduler.
- `tests/webui/test_ferry_page.py` (`airflow_server`): `webui`, whose lag the Ferry page
  shows, and `unconnected`, into `webui`'s target from a cluster known only by a connection
  Airflow does not have. The page is opened by VIEWER, a user with Airflow's viewer role;
  a scraper holds SCRAPE_TOKEN (`FERRY_METRICS_TOKEN`).

The `spark_default` connection is spark local[*] (the stack's default), and the one-off
flows set `ferry.copy.runner = spark` (their plans are small enough for the local runner by
default), so every one-off copy here runs through spark-submit, `cycle` -> `copy` ->
`finish`, not through the session's warm Spark Connect server; the continuous flows' loops
copy on the local runner, as by default. The hand-off is what the timeout test, the
retried mirror, the connected flow (its connections' snapshot beside the plan) and the
refused failover and adoption (a run long enough to be still in progress) are about. The
two tests left, downstream Assets and a flow's run after an adoption, could copy through
the warm server, but a stack has one `spark_default` for every flow, and the flow DAG takes
a flow's own `ferry.spark.master = sc://...` only when that connection is missing, when
spark-submit's hand-off fails instead (no master for its job files). The adopted flow's run
is about the adoption, not Spark: it copies on the runner a small plan gets by default
(`auto`: the local runner, in its `cycle` task). The downstream Assets' flow stays on
spark-submit: the refused failover and adoption need its run long enough to be in progress.

Tests trigger runs and read states, XComs and task logs through the REST API. After start-up,
and again once the session's tests have run, the stack fails if any process of Airflow
listens on an address other than loopback. After a failure, the components' logs and the
task logs are copied into test-artifacts/: a scheduler module's failed test copies them
when its module ends (the stack still runs), a failed start or final check when the stack
stops.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.airflow.adopt_dag import ADOPT_DAG
from ferry.airflow.failover_dag import FAILOVER_DAG
from ferry.config import Config, Flow, load_config
from ferry.local.cluster import SecureClusters
from tests.scheduler.stack import Airflow, Components, keep_logs, running
from tests.support.secure_data import SOURCE

VIEWER, VIEWER_PASSWORD = "ops", "ops-" + secrets.token_hex(8)
"""The browser tier's user: Airflow's viewer role."""
SCRAPE_TOKEN = "scrape-" + secrets.token_hex(16)
"""The metrics endpoint's bearer token for scrapers (`FERRY_METRICS_TOKEN`)."""

SHORT_TIMEOUT_S = 2

RETRY_DELAY_S = 10
"""The retry delay of the flows whose copy task is retried (`ferry.task.retry.delay.
seconds`; the DAG's default of 30 s would only make their tests wait): long enough for the
retry test to see its mirror wait for the retry and change the target meanwhile."""

FAULTS_SPAN_S, FAULTS_RETRY_DELAY_S = 30, 5
"""The `faults` flow's `ferry.continuous.run.seconds` (its runs hand over as `relay`'s do)
and `ferry.task.retry.delay.seconds`."""

HEARTBEAT_TIMEOUT_S = 60
"""How long a running task may go without a heartbeat before the scheduler takes it for a
zombie (`[scheduler] task_instance_heartbeat_timeout`, 300 s by default): the fault tests
wait it out. A live task's supervisor heartbeats every 5 s."""

RELAY_SPAN_S, RELAY_HANDOVER_S = 15, 300
"""The `relay` flow's `ferry.continuous.run.seconds` and `….handover.seconds`: a run goes on
far longer than the next one takes to start, even on a loaded machine (a task's start and
first cycle took over a minute in a suite run), so each run hands over to the next."""

FLOWS = {
    # name: (the letter of its aliases, its topic's prefix, its module's state dir)
    "short_timeout": ("t", "sched-timeout", "state-flow"),
    "unsynced_configs": ("u", "sched-retry", "state-flow"),
    "relay": ("r", "sched-relay", "state-flow"),
    "assets": ("a", "sched-assets", "state-assets"),
    "connected": ("c", "sched-connections", "state-assets"),
    "adopted": ("m", "sched-adopted", "state-assets"),
    "differ": ("d", "sched-differ", "state-assets"),
    "webui": ("w", "webui-orders", "state-webui"),
    "faults": ("f", "sched-faults", "state-faults"),
}
"""The config's flows between the session's plain clusters, and `connected`: the first three
are test_flow_under_scheduler's, the next four test_assets_and_connections_under_scheduler's,
test_ferry_page's (with `unconnected`, which `_config` adds), the last
test_airflow_faults'."""

ON_TOPIC, ON_FLOW = "report_on_mirrored_topic", "report_on_mirrored_flow"

DOWNSTREAM_DAGS = {
    "on_topic.py": '''"""Runs when Ferry mirrored new records of one topic, and reports them."""
from airflow.sdk import DAG, get_current_context, task

from ferry.airflow.assets import remote_topic_asset

ORDERS = remote_topic_asset({flow!r}, {topic!r})

with DAG({dag_id!r}, schedule=[ORDERS], catchup=False):

    @task(inlets=[ORDERS])
    def report() -> dict:
        return dict(get_current_context()["inlet_events"][ORDERS][-1].extra)

    report()
''',
    "on_flow.py": '''"""Runs when Ferry mirrored new records of one flow, and reports them."""
from airflow.sdk import DAG, get_current_context, task

from ferry.airflow.assets import flow_alias

MIRRORED = flow_alias({flow!r})

with DAG({dag_id!r}, schedule=[MIRRORED], catchup=False):

    @task
    def report() -> list:
        events = get_current_context()["triggering_asset_events"][MIRRORED]
        return [[event.asset.uri, dict(event.extra)] for event in events]

    report()
''',
}
"""File name -> source of the two DAGs downstream of the `assets` flow, written as
docs/airflow.md shows: one on its topic's Asset, one on its AssetAlias."""


@dataclass(frozen=True)
class FlowUnderTest:
    flow: Flow
    topic: str
    """The one source topic the flow mirrors (not created yet: the test creates it)."""

    @property
    def dag_id(self) -> str:
        return self.flow.dag_id


class Stack(Airflow):
    """The session's Airflow, and every flow of its config."""

    def __init__(self, airflow: Airflow, components: Components, home: Path,
                 config: Config, flows: dict[str, FlowUnderTest], tag: str) -> None:
        super().__init__(airflow.url)
        self.components = components
        """Its running components, each of which a fault test may end and start again."""
        self.home = home
        """Its AIRFLOW_HOME: the SQLite database, and each component's log."""
        self.config = config
        """FERRY_CONFIG as the DAG file reads it (no connection looked up)."""
        self.flows = flows
        """`FLOWS`' name -> the flow."""
        self.target_connection = f"kafka_target_{tag}"
        """The id of the `connected` flow's target connection (created by its test)."""
        self.unconnected = f"far_src_{tag}->{flows['webui'].flow.target}"
        """The flow from a cluster known only by a connection Airflow does not have."""
        self.missing_connection = f"kafka_gone_{tag}"
        """The id of that connection."""


def _config(base: Path, clusters: dict[str, str],
            tag: str) -> tuple[Config, dict[str, FlowUnderTest]]:
    """The tier's config (aliases and topics unique to this stack: the brokers are shared),
    and each flow by name. `connected`'s clusters name connections only, and so does the
    source of `unconnected` (not in FLOWS), a connection Airflow does not have."""
    pairs = {name: (f"src_{letter}{tag}", f"tgt_{letter}{tag}")
             for name, (letter, _, _) in FLOWS.items()}
    topics = {name: f"{prefix}-{tag}" for name, (_, prefix, _) in FLOWS.items()}
    lines = [f"clusters = {', '.join(a for pair in pairs.values() for a in pair)}"]
    for name, (source, target) in pairs.items():
        if name == "connected":
            lines += [f"{source}.ferry.connection = kafka_source_{tag}",
                      f"{target}.ferry.connection = kafka_target_{tag}"]
        else:
            lines += [f"{source}.bootstrap.servers = {clusters['source']}",
                      f"{target}.bootstrap.servers = {clusters['target']}"]
        lines += [f"{source}->{target}.enabled = true",
                  f"{source}->{target}.topics = {topics[name]}",
                  f"{source}->{target}.ferry.state.dir = {base / FLOWS[name][2]}"]
    far, page_target = f"far_src_{tag}", pairs["webui"][1]
    lines[0] += f", {far}"
    lines += [f"{far}.ferry.connection = kafka_gone_{tag}",
              f"{far}->{page_target}.enabled = true",
              f"{far}->{page_target}.topics = {topics['webui']}",
              f"{far}->{page_target}.ferry.state.dir = {base / FLOWS['webui'][2]}"]
    short, unsynced = "->".join(pairs["short_timeout"]), "->".join(pairs["unsynced_configs"])
    relay, faults = "->".join(pairs["relay"]), "->".join(pairs["faults"])
    adopted = "->".join(pairs["adopted"])
    lines += [f"{short}.ferry.copy.timeout.seconds = {SHORT_TIMEOUT_S}",
              f"{short}.ferry.task.retry.delay.seconds = {RETRY_DELAY_S}",
              f"{unsynced}.ferry.task.retry.delay.seconds = {RETRY_DELAY_S}",
              f"{unsynced}.sync.topic.configs.enabled = false",
              f"{relay}.ferry.schedule = @continuous",
              f"{relay}.ferry.continuous.run.seconds = {RELAY_SPAN_S}",
              f"{relay}.ferry.continuous.handover.seconds = {RELAY_HANDOVER_S}",
              f"{faults}.ferry.schedule = @continuous",
              f"{faults}.ferry.continuous.run.seconds = {FAULTS_SPAN_S}",
              f"{faults}.ferry.continuous.handover.seconds = {RELAY_HANDOVER_S}",
              f"{faults}.ferry.task.retry.delay.seconds = {FAULTS_RETRY_DELAY_S}",
              # the tier's one-off runs are about spark-submit's hand-off (see above),
              # which their small plans would not get by default; the continuous flows'
              # loops copy on the local runner, as by default
              "ferry.copy.runner = spark", f"{relay}.ferry.copy.runner = auto",
              f"{faults}.ferry.copy.runner = auto", f"{adopted}.ferry.copy.runner = auto",
              "ferry.schedule = none", "replication.factor = 1",
              "checkpoints.topic.replication.factor = 1", "emit.heartbeats.enabled = false",
              # The brokers are shared: another test's `heartbeats` topic is not these flows'.
              "heartbeats.replication.enabled = false"]
    path = base / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    # as the DAG file reads it: the connections are not looked up here (the test process
    # has neither of `connected`'s)
    config = load_config(path, connections=False)
    return config, {name: FlowUnderTest(config.flow("->".join(pair)), topics[name])
                    for name, pair in pairs.items()}


def _source_connection(sc: SecureClusters) -> str:
    """The secure source as the Kafka provider's connection, in Airflow's JSON form: a
    librdkafka client config in its extra (SCRAM-SHA-512 over SASL_SSL, as `ferry`)."""
    return json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": sc.bootstrap[SOURCE], "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ferry",
        "sasl.password": sc.passwords["ferry"], "ssl.ca.location": str(sc.ca)}})


@pytest.fixture(scope="session")
def airflow_stack(clusters: dict[str, str], secure_clusters: SecureClusters,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The session's Airflow, ready (every DAG parsed) and listening on loopback only;
    stopped after the session, when it must still listen on loopback only."""
    base = tmp_path_factory.mktemp("airflow-stack")
    tag = uuid.uuid4().hex[:6]
    config, flows = _config(base, clusters, tag)
    assets = flows["assets"]
    downstream = {name: source.format(flow=assets.flow.name, topic=assets.topic, dag_id=dag_id)
                  for (name, source), dag_id in zip(DOWNSTREAM_DAGS.items(),
                                                    (ON_TOPIC, ON_FLOW), strict=True)}
    environment = {f"AIRFLOW_CONN_KAFKA_SOURCE_{tag.upper()}": _source_connection(
        secure_clusters), "FERRY_METRICS_TOKEN": SCRAPE_TOKEN,
                   "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT":
                       str(HEARTBEAT_TIMEOUT_S)}
    stopped_clean = False
    try:
        with running(base, base / "mm2.properties",
                     (*(f.dag_id for f in flows.values()), FAILOVER_DAG, ADOPT_DAG,
                      ON_TOPIC, ON_FLOW),
                     extra_env=environment, dag_files=downstream,
                     viewers={VIEWER: VIEWER_PASSWORD}) as (airflow, components):
            yield Stack(airflow, components, base / "airflow", config, flows, tag)
        stopped_clean = True
    finally:
        # a failed scheduler test's module kept the logs already
        # (tests/scheduler/conftest.py: `logs_of_a_failed_module`)
        if not stopped_clean:
            keep_logs(base / "airflow", "session")
