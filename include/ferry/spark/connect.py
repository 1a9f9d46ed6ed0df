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
from ferry.errors import first_line
from ferry.spark.session import spark_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ferry.config import Flow

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
                   heap: str = SERVER_HEAP, max_cores: int | None = None) -> list[str]:
    """spark-submit starting a Connect server on `host:port` with Ferry's settings and a
    fixed heap of `heap` (see check_heap); its Python workers run this interpreter.
    `max_cores`: the most cores its application takes of a cluster manager's
    (`spark.cores.max`): on a standalone master, an application given none takes every
    core, and spark-submit copies on the same master would wait for ever."""
    check_heap(heap)
    if max_cores is not None and max_cores < 1:
        raise ValueError(f"max cores {max_cores}: give at least 1")
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
    if max_cores is not None:
        conf["spark.cores.max"] = str(max_cores)
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


OPEN_TIMEOUT_S = 60.0
"""How long a loop that stops waits for a session still being opened (`prepare`), to
close it."""


class ConnectSessions:
    """The Spark runner's sessions kept from one job of a continuous loop to the next, by
    Connect server URL, and those being opened ahead of a loop's first job. Made with the
    loop's runtime (`ferry.runtime.loop.Loop`) and closed with it: no module-level
    registry. A spark-submit master keeps nothing: its jobs are processes of their own."""

    def __init__(self) -> None:
        from ferry.spark.installed import SparkCheck

        self.check = SparkCheck()
        """The check of this environment's Spark before each job (warns once a loop)."""
        self._kept: dict[str, SparkSession] = {}
        """Sessions kept for the next job, by URL."""
        self._opening: dict[str, Future[SparkSession]] = {}
        """Sessions being opened ahead of a loop's first job (`prepare`), by URL."""

    def prepare(self, master: str) -> None:
        """Open a session to `master`, when it is a Connect server, in a thread beside the
        loop's first sync and plan (the Spark Connect client's imports and the session are
        about half a second). A session that fails to open here is opened again by the next
        job that needs one, which reports why."""
        if not is_connect(master) or master in self._kept or master in self._opening:
            return
        opened: Future[SparkSession] = Future()
        self._opening[master] = opened

        def open_session() -> None:
            try:
                opened.set_result(remote_session(master))
            except BaseException as exc:  # the next job opens one, and reports why not
                opened.set_exception(exc)

        threading.Thread(target=open_session, daemon=True, name="ferry-session").start()

    def run_job(self, config_path: str, flow_name: str, plan_path: str, url: str,
                loaded: Flow | None = None) -> Copied:
        """`run_connect_job` for a loop: the session stays open for the loop's next job."""
        from ferry.spark.copy_job import load_flow, run_and_report

        flow = loaded or load_flow(config_path, flow_name, plan_path)
        if flow is None:
            return Copied(2)
        kept = self._kept.pop(url, None) or self._opened(url, flow)
        spark = kept or remote_session(url)
        try:
            copied = run_and_report(spark, config_path, flow, plan_path, out=sys.stderr)
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
                copied = run_and_report(spark, config_path, flow, plan_path, out=sys.stderr)
            except BaseException:
                _stop(spark)
                raise
        except BaseException:
            _stop(spark)
            raise
        self._kept[url] = spark
        return copied

    def close(self) -> None:
        """Close the sessions kept for later jobs, and those still being opened once open."""
        for url, opening in list(self._opening.items()):
            # still opening (a run of a few seconds): closed once it is open
            with contextlib.suppress(Exception):  # it failed: nothing to close
                spark = opening.result(OPEN_TIMEOUT_S)
                self._kept.setdefault(url, spark)
                if self._kept[url] is not spark:
                    _stop(spark)
            self._opening.pop(url, None)
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


def run_connect_job(config_path: str, flow_name: str, plan_path: str, url: str,
                    loaded: Flow | None = None) -> Copied:
    """The copy job of one plan file through the Connect server at `url`, in this process,
    on a session of its own, closed at its end (the server and its Spark stay warm; a loop
    keeps its session: `ConnectSessions.run_job`). Returns the exit code the spark-submit job
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
