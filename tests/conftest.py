"""Session-wide real services: one pair of local Kafka clusters, one pair of secure ones
(SASL + ACLs + TLS), a third cluster, one local Spark Connect server, and one SparkSession
per worker; and for the one module each that restarts brokers, an expiring and a
replicated pair it owns.

Started lazily (only when a test asks for them) and once per session, shared by every
xdist worker (`tests/support/services.py`); each test creates its own topics so tests
can share the brokers. Set FERRY_TEST_KEEP=1 to leave the services running after the
session (for debugging), FERRY_TEST_DIR to choose where (each in its own subdirectory).
What the session writes goes to a folder of its own on a tmpfs when the machine has one
with room (`services.scratch`; FERRY_TEST_SCRATCH=0: the system's temporary folder).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ferry.local import cluster
from tests.support import services, toxiproxy
from tests.support.airflow_stack import airflow_stack  # noqa: F401  # the session's one Airflow

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TESTS = Path(__file__).resolve().parent
TIERS = {
    "unit": ("unit",),
    "integration": ("integration",),
    "dags": ("integration", "dags"),
    "scheduler": ("integration", "scheduler"),
    "webui": ("integration", "webui"),
}
"""Folder under tests/ -> the tier markers its tests carry (`pytest -m unit` is the
broker-free tier, `-m integration` everything on real services)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test gets the markers of its folder's tier; a test of a `MINUTES_LONG` scope
    without a timeout of its own gets `LONG_TIMEOUT_S`."""
    for item in items:
        relative = item.path.resolve().relative_to(TESTS)
        for name in TIERS[relative.parts[0]]:
            item.add_marker(name)
        if (f"tests/{relative.as_posix()}".startswith(MINUTES_LONG)
                and item.get_closest_marker("timeout") is None):
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))


SHARED_SCOPES = (("tests/scheduler/", "tests/webui/"),)
"""Groups of folders whose modules run on one worker, one after the other, as one scope
(named by its first folder): they share a service a worker starts once (the session's
Airflow stack, `airflow_stack`)."""


MINUTES_LONG = ("tests/scheduler/", "tests/integration/test_adopt.py",
                "tests/integration/test_lane.py", "tests/integration/test_exactness.py",
                "tests/dags/test_flow_dags.py", "tests/integration/test_rolling_bounce.py",
                "tests/integration/test_mirror_cli.py",
                "tests/integration/test_dependency_ranges.py", "tests/dags/test_backfill_dag.py",
                "tests/integration/test_failover.py", "tests/integration/test_lifetime.py",
                "tests/integration/test_spark_standalone.py",
                "tests/integration/test_spark_connect.py", "tests/dags/test_secure_flow_dag.py",
                "tests/integration/test_sync_topics_at_scale.py")
"""Scopes whose tests run several spark-submit jobs, Airflow runs or broker restarts one
after another (their timeout: `LONG_TIMEOUT_S`)."""

LONGEST_FIRST = (
    # 480 s, but mostly waiting out its faults: first, so the others use the cores meanwhile
    "tests/integration/test_network_faults.py",
    "tests/scheduler/",  # with tests/webui/: 560 s
    "tests/integration/test_lane.py",  # 380 s
    "tests/dags/test_flow_dags.py",  # 360 s
    "tests/integration/test_mirror_cli.py",  # 360 s
    "tests/integration/test_dependency_ranges.py",  # 270 s
    "tests/integration/test_adopt.py",  # 260 s
    "tests/integration/test_rolling_bounce.py",  # 230 s
    "tests/integration/test_exactness.py",  # 225 s
    "tests/integration/test_spark_connect.py",  # 215 s
    "tests/integration/test_maintenance.py",  # 215 s
    "tests/dags/test_backfill_dag.py",  # 150 s
    "tests/integration/test_spark_standalone.py",  # 140 s
    "tests/integration/test_failover.py",  # 130 s
    "tests/integration/test_recording.py",  # 125 s
    "tests/dags/test_secure_flow_dag.py",  # 125 s
    "tests/integration/test_backfill_cli.py",  # 125 s
    "tests/integration/test_sync_topics_at_scale.py",  # 120 s (245 s with its brokers on disk)
    "tests/integration/test_lifetime.py",  # 100 s
    "tests/integration/test_wheel_install.py",  # 95 s
    "tests/integration/test_mm1_setup.py",  # 90 s
    "tests/integration/test_state_faults.py",  # 90 s
    "tests/integration/test_kept_lanes.py",  # 85 s
    "tests/integration/test_incarnations.py",  # 85 s
    "tests/integration/test_transient_states.py",  # 75 s
    "tests/dags/test_assets.py",  # 75 s
    "tests/integration/test_first_cycles.py",  # 70 s
    "tests/integration/test_handover.py",  # 60 s, one test
    "tests/integration/test_failover_operation.py",  # 55 s
    "tests/dags/test_concurrent_flows.py",  # 55 s, one test
)
"""Scopes of a minute or more, longest first (a full run's times with four workers on two
cores), handed out in this order before all others: the longest scopes start first and the
last ones handed out are short, so the workers end within a minute of each other. xdist
orders scopes by their count of tests, which left the rolling restarts (two tests, three
minutes) or the secure DAG (two tests, over a minute) to start last while the other workers
had nothing left to do; with only the slowest fifteen first, one-test modules of a minute
(the hand-over, two flows at once) still started last, and one worker ended 75 s after
another. A scope that grew short only starts early; a new one of minutes belongs here."""

LONG_TIMEOUT_S = 1500
"""pytest-timeout's limit for a test of a `MINUTES_LONG` scope (the others keep
pyproject's 600 s). Their tests run several spark-submit jobs, Airflow runs or broker
restarts one after another, and their time follows the machine's: with the suite held to
0.8 of the 2 cores (about CI's pace: 42 minutes where an idle machine takes 17), the flow
DAG's three runs went past 600 s and the scheduler's spark-submit copies took minutes. A
hang still ends, within CI's budget."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadscope`: whole modules per worker as xdist does, except that the
    modules of a `SHARED_SCOPES` folder go to one worker together, `LONGEST_FIRST` scopes
    go out first, in its order, and a worker gets its next scope only when it starts the
    last test of those it has (xdist's default, with two tests left, lets a worker hold a two-test
    scope of minutes that another worker, soon idle, could have run)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopes(LoadScopeScheduling):
        long_first = False

        def _split_scope(self, nodeid: str) -> str:
            shared = next((group[0] for group in SHARED_SCOPES
                           if nodeid.startswith(group)), None)
            return shared or super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.long_first:  # the queue is whole at the first assignment
                self.long_first = True
                for prefix in reversed(LONGEST_FIRST):
                    for scope in [s for s in self.workqueue if s.startswith(prefix)]:
                        self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            # A worker runs its last test only once it knows the next (or is told to
            # stop): one test left is the least it can be given more at.
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    return SharedScopes(config, log)


@pytest.fixture(autouse=True)
def copy_runner(request: pytest.FixtureRequest) -> Iterator[None]:
    """The runner this test's copies run on (`tests.support.runner`): spark-submit for
    tests marked `spark_submit` and in the broker-free tier; the session's warm Spark
    Connect server, started on first use, for tests marked `spark`; the local runner
    for the rest."""
    from tests.support import runner

    if request.node.get_closest_marker("spark_submit") or request.node.get_closest_marker("unit"):
        runner.use("submit")
    elif request.node.get_closest_marker("spark"):
        runner.use("warm", lambda: str(request.getfixturevalue("connect_url")))
    else:
        runner.use("local")
    try:
        yield
    finally:
        runner.use("submit")


JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
"""What every JVM the suite starts runs with (brokers, Spark, MirrorMaker 2), unless
JAVA_TOOL_OPTIONS says otherwise: C1 compiles only. These JVMs live seconds to minutes and
move little data, so C2's compiles cost more CPU than they win back (a broker's start
3.7 -> 2.2 s of CPU here); the suite is CPU-bound on 2 cores."""


@pytest.hookimpl(tryfirst=True)  # before pytest's own reads the base of tmp_path
def pytest_configure(config: pytest.Config) -> None:
    """The session's own process chooses where it writes (`services.scratch`: pytest's
    tmp_path, TMPDIR and the shared services' folder, on a tmpfs when there is one with
    room), names the folder its shared services live in and the JVMs' options, before its
    workers start (they inherit all of it)."""
    if not hasattr(config, "workerinput"):
        scratch = services.scratch()
        if scratch is not None:
            config.stash[SCRATCH] = scratch
            if config.option.basetemp is None:
                config.option.basetemp = str(scratch / "pytest")
            (scratch / "tmp").mkdir()
            os.environ["TMPDIR"] = str(scratch / "tmp")
            tempfile.tempdir = None  # read TMPDIR again
        services.name_folder(scratch)
        os.environ.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)


SCRATCH = pytest.StashKey[Path]()
"""The session's scratch folder on a tmpfs, when it has one (`services.scratch`)."""


_timeline: dict[str, list[Any]] = {}
"""nodeid -> [worker, first start, last stop] of each test's setup, call and teardown."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Where and when each test ran (in the session's own process, which sees every
    worker's reports), for `timeline.tsv` beside the JUnit file: which tests overlapped
    when the machine sat idle or was overloaded."""
    node = getattr(report, "node", None)  # the xdist worker that sent it
    worker = node.gateway.id if node is not None else "main"
    entry = _timeline.setdefault(report.nodeid, [worker, report.start, report.stop])
    entry[1], entry[2] = min(entry[1], report.start), max(entry[2], report.stop)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's own process stops the shared services once every worker is done, and
    writes the timeline (`timeline.tsv`: worker, start in seconds from the first test,
    seconds, test) beside the JUnit file when there is one."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        services.stop_all()
    finally:
        if SCRATCH in session.config.stash:
            services.remove_scratch(session.config.stash[SCRATCH])
    xml = session.config.option.xmlpath
    if xml and _timeline:
        first = min(start for _, start, _ in _timeline.values())
        lines = [f"{worker}\t{start - first:.1f}\t{stop - start:.1f}\t{nodeid}"
                 for nodeid, (worker, start, stop) in
                 sorted(_timeline.items(), key=lambda item: item[1][1])]
        Path(xml).with_name("timeline.tsv").write_text("\n".join(lines) + "\n")


QUIET_WHEN_IDLE = {"metadata.max.idle.interval.ms": "10000"}
"""For the session's shared brokers, idle for much of it: the controller appends a no-op
record to the metadata log every 10 s instead of every 0.5 s (Kafka's default, which
keeps the log's high watermark moving), a third less CPU for an idle broker. The replicated
pair keeps the default: its rolling restarts wait on brokers catching up."""


@pytest.fixture(scope="session")
def clusters() -> dict[str, str]:
    """alias -> bootstrap servers of two running local clusters, `source` and `target`
    (direct: `network` reaches them through Toxiproxy)."""
    return {s.alias: s.bootstrap for s in _session_clusters()[0]}


def _session_clusters() -> tuple[list[cluster.ClusterState], toxiproxy.Toxiproxy]:
    """The session's two clusters, each behind a proxy of the session's Toxiproxy, which
    is started with them (binding the proxies' ports they advertise at once)."""
    with services.starting("kafka") as root:
        states = cluster.up(("source", "target"), root, extra=QUIET_WHEN_IDLE,
                            behind_proxy=True)
        with services.starting(services.TOXIPROXY) as proxy_root:
            proxy = toxiproxy.serve(proxy_root, states)
    return states, proxy


@pytest.fixture(scope="session")
def _toxiproxy(clusters: dict[str, str]) -> toxiproxy.Toxiproxy:
    return _session_clusters()[1]


@pytest.fixture
def network(_toxiproxy: toxiproxy.Toxiproxy) -> Iterator[toxiproxy.Toxiproxy]:
    """The session's Toxiproxy, its proxies `source` and `target` in front of `clusters`
    (`Toxiproxy.bootstrap`); every proxy is reset after the test."""
    yield _toxiproxy
    _toxiproxy.reset()


@pytest.fixture(scope="session")
def third_cluster() -> str:
    """Bootstrap servers of a third local cluster, for fan-in, chains and cycles. Unlike the
    others it creates a topic a client asks for (`auto.create.topics.enable`, Kafka's
    default), as many production clusters do."""
    with services.starting("kafka-third") as root:
        (state,) = cluster.up(("third",), root,
                              extra={**QUIET_WHEN_IDLE, "auto.create.topics.enable": "true"})
    return state.bootstrap


@contextmanager
def owned_clusters(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A folder for clusters one module starts and owns; they are stopped (a half-started
    set too) when the block ends, unless FERRY_TEST_KEEP=1."""
    base = os.environ.get("FERRY_TEST_DIR")
    root = Path(base) / name if base else tmp_path_factory.mktemp(name)
    try:
        yield root
    finally:
        if not os.environ.get("FERRY_TEST_KEEP"):
            cluster.down(root, wipe=True)


@pytest.fixture(scope="module")
def replicated_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """alias -> bootstrap servers of a `source` and a `target` cluster of three KRaft nodes
    each, as production runs them: replication factor 3 and min ISR 2 for every internal and
    default topic. `"root"` is their directory, for `cluster.bounce_node`. The module that
    bounces their nodes owns them: they stop when it ends (six idle brokers would cost the
    rest of the session a third of a core)."""
    with owned_clusters(tmp_path_factory, "kafka-replicated") as root:
        states = cluster.up(("source", "target"), root, brokers=3,
                            extra=cluster.FAST_FAILURE_DETECTION)
        yield {s.alias: s.bootstrap for s in states} | {"root": str(root)}


@pytest.fixture(scope="module")
def heavy_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """alias -> bootstrap servers of a `source` and a `target` cluster owned by one module,
    for tests whose load would stall the shared pair: a broker applies a metadata change
    (thousands of new partitions, their logs created) before it lists any later one, so
    other tests' new topics stayed unlisted for a minute and their cycles planned nothing.
    They stop when the module ends."""
    with owned_clusters(tmp_path_factory, "kafka-heavy") as root:
        states = cluster.up(("source", "target"), root, extra=QUIET_WHEN_IDLE)
        yield {s.alias: s.bootstrap for s in states}


EXPIRING_OFFSETS = {"offsets.retention.minutes": "1",
                    "offsets.retention.check.interval.ms": "2000"}
"""Broker settings that compress a week of idleness into a minute: a group offset not
committed again for 60 s is deleted (Kafka's minimum), checked every 2 s."""


@pytest.fixture(scope="module")
def expiring_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """alias -> bootstrap servers of a `source` and a `target` cluster whose brokers expire
    group offsets a minute after their last commit (`EXPIRING_OFFSETS`), for lifetime tests.
    `restart_target` below restarts the target on the same data. Owned by the module that
    uses them: they stop when it ends."""
    with owned_clusters(tmp_path_factory, "kafka-expiring") as root:
        states = cluster.up(("source", "target"), root, extra=EXPIRING_OFFSETS)
        yield {s.alias: s.bootstrap for s in states} | {"root": str(root)}


def restart_target(clusters: dict[str, str]) -> None:
    """Stop the expiring pair's target broker (SIGTERM, as an operator's restart) and start
    it again on the same data and ports; returns once it answers again."""
    root = Path(clusters["root"])
    (target,) = [s for s in cluster.states_in(root) if s.alias == "target"]
    if target.pid is not None and cluster.is_our_broker(target):
        os.kill(target.pid, signal.SIGTERM)
        while cluster.is_our_broker(target):
            time.sleep(0.2)
    (state,) = cluster.up(("target",), root, extra=EXPIRING_OFFSETS)
    assert state.bootstrap == clusters["target"], "the restarted target moved ports"


@pytest.fixture(scope="session")
def secure_clusters() -> cluster.SecureClusters:
    """Two running secure local clusters, `ssource` and `starget`: SASL_SSL on `bootstrap`,
    SASL_PLAINTEXT on `plaintext_bootstrap`, PLAIN and SCRAM-SHA-512 for the users `admin`
    (super user), `ferry`, `alice` and `mallory` (`passwords`), StandardAuthorizer with no
    ACLs to begin with, TLS trusting `ca`. `client(alias, user, mechanism, tls)` gives
    librdkafka settings. ACLs only ever get added: each test grants on its own topics."""
    with services.starting("kafka-secure") as root:
        states = cluster.up(("ssource", "starget"), root, secure=True,
                            extra=QUIET_WHEN_IDLE)
    return cluster.SecureClusters.of(root, states)


@pytest.fixture(scope="session")
def spark(connect_url: str) -> Iterator[SparkSession]:
    """A session on the session's warm Spark Connect server, whose Spark has Delta as the
    copy job's has (the job runs there too). Not a local Spark per worker: each cost a
    JVM's start and 15-50 s of CPU over the session, idle most of it."""
    from ferry.spark.connect import remote_session

    session = remote_session(connect_url)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def connect_home() -> Path:
    """A FERRY_HOME whose local Spark Connect server (`ferry spark up`) runs for the
    session, shared by its workers; its URL: `ferry spark status --json`, or
    `spark_server.load(...).url`."""
    with services.starting(services.SPARK_HOME_NAME) as home:
        services.ferry_spark(home, "up")
    return home


@pytest.fixture(scope="session")
def connect_url(connect_home: Path) -> str:
    """The session's local Spark Connect server, `sc://127.0.0.1:<port>`."""
    from ferry.local import spark_server

    state = spark_server.load(connect_home / "local" / "spark")
    assert state is not None
    return state.url


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (tests share the brokers)."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]
    return f"{base}-{uuid.uuid4().hex[:6]}"
