"""The copy job on a warm Spark: a long-lived Spark Connect server (adapter).

A master of the form `sc://host:port` (`ferry.spark.master`, or `ferry mirror --master`)
means Spark Connect: the cycle's own process opens a remote session and runs the same
`run_copy_job` the spark-submit path runs (lanes through `mapInArrow`, the Delta appends),
so no JVM starts per cycle. The library goes to the server as a Python artifact, so a
server on other machines imports the same code as the client (unless the server says it
runs this very library); its Python workers need Ferry's dependencies (confluent-kafka,
pyarrow, deltalake) installed.

`server_command` starts such a server with Ferry's session settings (Delta, small state
tables, no speculation), listening on loopback unless told otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from ferry.core.job import Copied
from ferry.errors import FerryError, first_line
from ferry.spark.session import spark_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ferry.config import Flow
    from ferry.runtime.kept_lanes import KeptLanes
    from ferry.runtime.recorder import Recorder

log = logging.getLogger(__name__)

SCHEME = "sc://"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
LIBRARY_CONF = "spark.ferry.library"
"""Set on a server whose Python workers import Ferry from that directory."""


def is_connect(master: str) -> bool:
    """Whether `master` names a Spark Connect endpoint (`sc://host:port`)."""
    return master.strip().startswith(SCHEME)


SERVER_HEAP = "1g"
"""The warm server's heap by default, fixed: its live data after a full GC stays near
180 MB across hundreds of cycles, but G1 grows a heap it may grow (to this maximum) instead
of collecting fully, so the server's RSS crept up cycle after cycle (+51% after 200).
Committed and touched at start (`-Xms` = `-Xmx`, `AlwaysPreTouch`, as Kafka's and
Elasticsearch's guides advise for servers), its footprint is what it is after the first
cycle."""


HEAP_SIZE = re.compile(r"[1-9][0-9]*[kmgt]")
"""A JVM heap size as `spark.driver.memory` and `-Xms` both read it: 512m, 1g, 4g."""

LEAST_HEAP = "512m"
"""The smallest heap the server takes. Spark's driver refuses to start below 450 MiB
(`UnifiedMemoryManager`: 1.5 × its 300 MiB reserve), and the JVM's usable maximum is a
little under `-Xmx`, so a round 512m is the least that starts."""

_UNIT = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def heap_bytes(heap: str) -> int:
    """`heap`, a HEAP_SIZE, in bytes."""
    return int(heap[:-1]) * _UNIT[heap[-1]]


def check_heap(heap: str) -> None:
    """Raise ValueError, in one line naming `heap`, unless it is a HEAP_SIZE of at least
    LEAST_HEAP."""
    if not HEAP_SIZE.fullmatch(heap):
        raise ValueError(f"heap {heap!r} is not a size such as 512m or 2g")
    if heap_bytes(heap) < heap_bytes(LEAST_HEAP):
        raise ValueError(f"heap {heap} is too small for a Spark driver: give at least "
                         f"{LEAST_HEAP}")


def server_command(port: int, master: str = "local[*]", host: str = "127.0.0.1",
                   name: str = "ferry-connect", spark_submit: str | None = None,
                   heap: str = SERVER_HEAP) -> list[str]:
    """spark-submit starting a Connect server on `host:port` with Ferry's settings and a
    fixed heap of `heap` (see check_heap); its Python workers run this interpreter."""
    check_heap(heap)
    log4j = Path(__file__).with_name("log4j2.properties")
    binary = spark_submit or str(Path(sys.executable).parent / "spark-submit")
    conf = spark_conf(master)
    conf.update({
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.memory": heap,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j} "
                                         f"-Xms{heap} -XX:+AlwaysPreTouch",
        LIBRARY_CONF: _library(),
    })
    command = [binary, "--class", SERVER_CLASS, "--name", name,
               "--master", conf.pop("spark.master")]
    for key, value in sorted(conf.items()):
        command += ["--conf", f"{key}={value}"]
    return command


def remote_session(url: str) -> SparkSession:
    """A session on the Connect server at `url`, with this Ferry's library as an artifact."""
    from pyspark.sql import SparkSession

    from ferry.spark.library import library_zip

    started = time.monotonic()
    _reachable(url)
    spark = SparkSession.builder.remote(url.strip()).getOrCreate()
    if spark.conf.get(LIBRARY_CONF, "") != _library():
        # Shipped per session: its Python workers start fresh (seconds), so a server that
        # runs this very library (the embedded one) is not sent it.
        spark.addArtifacts(library_zip(), pyfile=True)
    log.info("Spark Connect session on %s in %.1fs", url, time.monotonic() - started)
    return spark


def _reachable(url: str, timeout_s: float = 5.0) -> None:
    """Fail at once, naming the endpoint, when nothing listens there (the Connect client
    would retry for minutes)."""
    import socket
    from urllib.parse import urlparse

    from ferry.errors import TransientError

    parsed = urlparse(url.strip().replace(SCHEME, "tcp://", 1))
    host, port = parsed.hostname or "localhost", parsed.port or DEFAULT_PORT
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        raise TransientError(f"cannot reach the Spark Connect server at {url} ({exc}): is "
                             "it running? (ferry spark up starts the local one; or set "
                             "ferry.spark.master to a spark-submit master)") from None


def _library() -> str:
    """Where this process imports Ferry from."""
    import ferry

    return str(Path(ferry.__file__).resolve().parent)


CLOSE_TIMEOUT_S = 300.0
"""How long a loop that stops waits for its recorder's last batch: a batch that hangs (a
server that stopped answering) must not keep the process from ending."""

OPEN_TIMEOUT_S = 60.0
"""How long a loop that stops waits for a session still being opened (`prepare`), to
close it."""


class ConnectLoops:
    """The runtime of a process's continuous loops on a Spark Connect server: the sessions
    kept from one job to the next, the sessions being opened ahead of a loop's first job,
    each flow's Delta recorder and kept lanes. Made by the loop that runs (`ferry.steps.cycle`
    `run_continuously`, `run_all`), passed to what needs it, and closed when it ends: no
    module-level registry, so two loops in one process (or a test) never share one by
    accident."""

    def __init__(self) -> None:
        self._kept: dict[str, SparkSession] = {}
        """Sessions kept for the next job, by URL."""
        self._opening: dict[str, Future[SparkSession]] = {}
        """Sessions being opened ahead of a loop's first job (`prepare`), by URL."""
        self._recorders: dict[tuple[str, str], Recorder] = {}
        """The Delta recorders of the loops, by (URL, flow)."""
        self._lanes: dict[tuple[str, str], KeptLanes] = {}
        """The kept lanes of the loops, by (URL, flow)."""
        self._ends_at: float | None = None
        """When the loops end (monotonic), leaving their last Delta batch to the flow's
        next run (`end_at`); None: a loop writes it as it stops."""

    def end_at(self, when: float | None) -> None:
        """The loops end at `when` (`time.monotonic`) and close with
        `close(hand_over=True)`: their recorders, those made later too, start no batch that
        would outlast them (`Recorder.end_at`)."""
        self._ends_at = when
        for recorder in self._recorders.values():
            recorder.end_at(when)

    def prepare(self, url: str, flow: Flow) -> None:
        """Ready a continuous loop of `flow` on `url` before its first cycle, off that
        cycle's path: its recorder is made now (so the first plan, as every later one, reads
        no offset-map lag; its first batch waits for `started`). A loop whose lanes are kept
        asks the server nothing (its recorder appends with delta-rs); any other has its
        session opened in a thread beside the first sync and plan (the Spark Connect
        client's imports and the session are about half a second). A session that fails to
        open here is opened again by the next job that needs one, which reports why."""
        recorder = self._recorder(url, flow)
        if (recorder is not None and self._kept_lanes(url, flow) is not None) or (
                url in self._kept or url in self._opening):
            return
        opened: Future[SparkSession] = Future()
        self._opening[url] = opened

        def open_session() -> None:
            try:
                opened.set_result(remote_session(url))
            except BaseException as exc:  # the next job opens one, and reports why not
                opened.set_exception(exc)

        threading.Thread(target=open_session, daemon=True, name="ferry-session").start()

    def started(self, url: str, flow: Flow) -> None:
        """The loop's first cycle is done: its recorder starts a first batch now, which
        records what earlier runs left (handed over at their end, or not written), even
        should no later cycle copy. Not before: that batch's first Delta reads (pyarrow's
        imports, the table's log) took the CPU and the GIL from the first cycle, which copies
        what piled up while no run of the flow was copying, at each turn of an
        `@continuous` DAG's runs."""
        recorder = self._recorders.get((url, flow.name))
        if recorder is not None:
            recorder.catch_up()

    def records_behind(self, url: str, flow_name: str) -> bool:
        """Whether a recorder of these loops appends `flow_name`'s Delta behind its copies
        (`ferry.runtime.recorder`): it records what the target committed, so a cycle needs no
        job of its own for an offset map Delta does not hold yet."""
        return (url, flow_name) in self._recorders

    def abandoned(self, url: str, flow_name: str, run_id: str) -> None:
        """The loop abandoned the cycle of `run_id` as hung: the flow's recorder, if any, no
        longer waits for its rows (`Recorder.abandon`)."""
        recorder = self._recorders.get((url, flow_name))
        if recorder is not None:
            recorder.abandon(run_id)

    def run_job(self, config_path: str, flow_name: str, plan_path: str, url: str,
                loaded: Flow | None = None) -> Copied:
        """`run_connect_job` for a loop: the session stays open for the loop's next job,
        and the runs and the offset map are appended to Delta behind the copies, in batches
        with delta-rs (`ferry.runtime.recorder`; `close` writes the last); with the recorder,
        the lanes run in this process, their writers kept (`ferry.runtime.kept_lanes`), and the job
        opens no session at all."""
        from ferry.spark.copy_job import load_flow, run_and_report

        flow = loaded or load_flow(config_path, flow_name, plan_path)
        if flow is None:
            return Copied(2)
        recorder = self._recorder(url, flow)
        lanes = self._kept_lanes(url, flow) if recorder is not None else None
        if lanes is not None:
            # kept lanes copy in this process and the recorder appends with delta-rs: the
            # job asks the server nothing, and needs no session
            return run_and_report(None, config_path, flow, plan_path, out=sys.stderr,
                                  recorder=recorder, kept=lanes)
        kept = self._kept.pop(url, None) or self._opened(url, flow)
        spark = kept or remote_session(url)
        try:
            copied = run_and_report(spark, config_path, flow, plan_path, out=sys.stderr,
                                    recorder=recorder, kept=lanes)
        except Exception as exc:
            _stop(spark)
            if kept is None:
                raise
            # A kept session the server no longer serves (it restarted, or dropped the
            # session): a new one runs the same plan again, which the transactions make
            # safe (each range resumes from what was committed; Delta's appends are keyed).
            log.warning("the kept Spark Connect session to %s failed (%s); reconnecting and "
                        "running the job again", url, first_line(exc),
                        extra={"flow": flow.name})
            spark = remote_session(url)
            try:
                copied = run_and_report(spark, config_path, flow, plan_path, out=sys.stderr,
                                        recorder=recorder, kept=lanes)
            except BaseException:
                _stop(spark)
                raise
        except BaseException:
            _stop(spark)
            raise
        self._kept[url] = spark
        return copied

    def close(self, hand_over: bool = False) -> None:
        """Write the recorders' last batches, then close the sessions kept for later jobs. A
        last batch that fails is logged, not raised: what it held is rebuilt from the
        target's offset-map topic by the flow's next run. The kept lanes go first: their
        clients hold no open transaction between cycles. `hand_over` (a run whose next run
        follows at once): the copied ranges' rows still pending are left to the next run's
        first batch (`Recorder.close`), so the next run does not wait for a last batch."""
        for url, opening in list(self._opening.items()):
            # still opening (a run of a few seconds): closed once it is open
            with contextlib.suppress(Exception):  # it failed: nothing to close
                spark = opening.result(OPEN_TIMEOUT_S)
                self._kept.setdefault(url, spark)
                if self._kept[url] is not spark:
                    _stop(spark)
            self._opening.pop(url, None)
        while self._lanes:
            (_, name), lanes = self._lanes.popitem()
            try:
                lanes.close()
            except Exception as exc:  # best effort: the process is ending
                log.warning("closing the kept writers: %s", exc, extra={"flow": name})
        while self._recorders:
            (_, name), recorder = self._recorders.popitem()
            try:
                recorder.close(CLOSE_TIMEOUT_S, hand_over=hand_over)
            except FerryError as exc:
                log.error("%s", exc, extra={"flow": name})
        # only now: a recorder told of no end before its close would start the batch that a
        # hand-over leaves to the next run
        self._ends_at = None
        while self._kept:
            _, spark = self._kept.popitem()
            _stop(spark)

    def _opened(self, url: str, flow: Flow) -> SparkSession | None:
        """The session `prepare` opened for `url` (waited for), or None: none was being
        opened, or it failed (logged; the caller opens one, which raises why)."""
        opening = self._opening.pop(url, None)
        if opening is None:
            return None
        try:
            return opening.result()
        except Exception as exc:
            log.warning("opening the Spark Connect session to %s ahead of the first cycle "
                        "failed (%s); opening it again", url, first_line(exc),
                        extra={"flow": flow.name})
            return None

    def _recorder(self, url: str, flow: Flow) -> Recorder | None:
        """The flow's recorder (made on first use), unless its
        `ferry.state.record.interval.seconds` is 0."""
        from ferry.runtime.recorder import Recorder

        if flow.ferry.state_record_interval_seconds <= 0:
            return None
        key = (url, flow.name)
        if key not in self._recorders:
            self._recorders[key] = Recorder(flow)
            self._recorders[key].end_at(self._ends_at)
        return self._recorders[key]

    def _kept_lanes(self, url: str, flow: Flow) -> KeptLanes | None:
        """The flow's kept lanes in a loop that records behind its copies (made on first
        use), unless `ferry.continuous.lanes` is spark or the delivery at_least_once (whose
        writers claim their slots anew each cycle)."""
        from ferry.runtime.kept_lanes import KeptLanes

        if flow.ferry.continuous_lanes != "kept" or flow.ferry.delivery != "exactly_once":
            return None
        key = (url, flow.name)
        if key not in self._lanes:
            self._lanes[key] = KeptLanes(flow)
        return self._lanes[key]


def run_connect_job(config_path: str, flow_name: str, plan_path: str, url: str,
                    loaded: Flow | None = None) -> Copied:
    """The copy job of one plan file through the Connect server at `url`, in this process,
    on a session of its own, closed at its end (the server and its Spark stay warm; a loop
    keeps its session: `ConnectLoops.run_job`). Returns the exit code the spark-submit job
    would (0, 1 for a failed lane or a gap that fails the run, 2 for bad config) and the run
    as the job recorded it; its lines go to stderr, as the job's do. `loaded`: the flow as
    this process already loaded it (the config is then not read again)."""
    from ferry.spark.copy_job import load_flow, run_and_report

    flow = loaded or load_flow(config_path, flow_name, plan_path)
    if flow is None:
        return Copied(2)
    spark = remote_session(url)
    try:
        return run_and_report(spark, config_path, flow, plan_path, out=sys.stderr)
    finally:
        _stop(spark)


def _stop(spark: SparkSession) -> None:
    """Close a session; one whose server is gone cannot say goodbye, and need not."""
    try:
        spark.stop()
    except Exception as exc:  # a stale session's channel: nothing left to release
        log.debug("closing a Spark Connect session: %s", exc)
