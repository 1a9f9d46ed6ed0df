"""The warm Spark path: `ferry spark up|status|down` runs a local Spark Connect server, and a
flow whose master is `sc://...` copies through it from the cycle's own process (no
spark-submit, no JVM per cycle), exactly as the spark-submit path does."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from ferry.config import Config
from ferry.local import spark_server
from tests.support.cli import ferry
from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _status(home: Path) -> dict[str, Any]:
    answer = ferry("spark", "status", "--json", home=home)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    return dict(json.loads(answer.stdout))


def test_ferry_spark_up_keeps_a_running_server_and_it_listens_on_loopback_only(
    connect_home: Path
) -> None:
    status = _status(connect_home)
    again = ferry("spark", "up", "--json", home=connect_home)
    assert again.returncode == 0
    assert json.loads(again.stdout)["pid"] == status["pid"]  # kept, not a second server
    server = psutil.Process(status["pid"])
    listening = {(c.laddr.ip, c.laddr.port) for p in [server, *server.children(recursive=True)]
                 for c in _connections(p) if c.status == psutil.CONN_LISTEN}
    port = int(status["url"].rsplit(":", 1)[1])
    assert any(p == port for _, p in listening)
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip, _ in listening), listening


def _connections(process: psutil.Process) -> list[Any]:
    """The process's TCP connections; none for one that ended meanwhile (a Python worker
    the server let go between listing its children and reading their sockets)."""
    try:
        return list(process.net_connections(kind="tcp"))
    except psutil.NoSuchProcess:
        return []


def test_a_cycle_on_the_warm_spark_copies_exactly_through_the_server(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a flow whose Spark master is the local Connect server
    url = _status(connect_home)["url"]
    create_topic(clusters["source"], topic_name, 3)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 3)
                                             for i in range(600)])
    config = flow_config(tmp_path, clusters, topic_name, f"ferry.spark.master = {url}\n")
    flow = config.enabled_flows[0]

    # when: two cycles, the second after more records
    first = ferry("mirror", config.path, "--flow", flow.name, "--json")
    produce(clusters["source"], topic_name, [(None, f"w{i}".encode(), i % 3)
                                             for i in range(90)])
    second = ferry("mirror", config.path, "--flow", flow.name, "--json")
    idle = ferry("mirror", config.path, "--flow", flow.name, "--json")

    # then: exact, and the lanes ran inside the server (its log has them), not in a job
    # spark-submit started
    for run in (first, second, idle):
        assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(idle.stdout)["idle"] is True
    assert_exact(flow, clusters, topic_name, 3)
    server = spark_server.load(connect_home / "local" / "spark")
    assert server is not None
    log = Path(server.log).read_text()
    assert f"done [flow={flow.name} lane=" in log
    assert "SparkSubmit" not in first.stderr + second.stderr


def test_a_connect_master_nobody_listens_on_fails_the_cycle_in_one_line(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, b"v", 0)])
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = flow_config(tmp_path, clusters, topic_name,
                         f"ferry.spark.master = sc://127.0.0.1:{port}\n")

    failed = ferry("mirror", config.path, "--flow", config.enabled_flows[0].name)

    assert failed.returncode == 1
    assert f"cannot reach the Spark Connect server at sc://127.0.0.1:{port}" in failed.stderr
    assert "Traceback" not in failed.stderr


def _continuous(config: str, flow: str, *extra: str) -> subprocess.Popen[str]:
    binary = Path(sys.executable).parent / "ferry"
    return subprocess.Popen([str(binary), "mirror", config, "--flow", flow, "--continuous",
                             "--json", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _next_cycle(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        err = process.stderr.read() if process.stderr else ""
        raise AssertionError(f"no cycle reported; stderr: {err[-3000:]}")
    return dict(json.loads(line))


def warm_flow(connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path,
              count: int, extra: str = "") -> tuple[str, Config]:
    """`count` records over two source partitions, and a config mirroring them on the warm
    Spark (with the `extra` lines): the server's URL and the config."""
    url = _status(connect_home)["url"]
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"a{i}".encode(), i % 2)
                                             for i in range(count)])
    return url, flow_config(tmp_path, clusters, topic_name,
                            f"ferry.spark.master = {url}\n{extra}")


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_continuous_mode_killed_mid_cycle_loses_and_doubles_nothing(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path, runner: str
) -> None:
    # given: cycles back to back, records arriving between them, the lanes kept in the
    # loop's process (the local runner) or run as Spark tasks on the warm Spark
    _, config = warm_flow(connect_home, clusters, topic_name, tmp_path, 500,
                          f"ferry.copy.runner = {runner}\n")
    flow = config.enabled_flows[0]
    running = _continuous(config.path, flow.name, "--for", "10m")
    try:
        first = _next_cycle(running)
        assert first["idle"] is False and first["job_exit_code"] == 0
        assert first["seconds"] > 0

        # when: more records, and the process is SIGKILLed while it copies them
        produce(clusters["source"], topic_name, [(None, f"b{i}".encode(), i % 2)
                                                 for i in range(20_000)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "starting the copy job" not in (
                _stderr_so_far(running)):
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        running.kill()
        running.wait(30)

    # then: the next cycles finish the job, exactly once
    for _ in range(5):
        again = ferry("mirror", config.path, "--flow", flow.name, "--json")
        assert again.returncode == 0, again.stderr[-3000:]
        if json.loads(again.stdout)["idle"]:
            break
    assert_exact(flow, clusters, topic_name, 2)
    assert _behind(config, flow.name) == 0  # what the killed loop had not recorded is


_seen: dict[int, str] = {}


def _stderr_so_far(process: subprocess.Popen[str]) -> str:
    """What `process` wrote to stderr so far (read without blocking)."""
    import fcntl

    assert process.stderr is not None
    fd = process.stderr.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    try:
        chunk = os.read(fd, 1 << 16).decode(errors="replace")
    except BlockingIOError:
        chunk = ""
    _seen[process.pid] = _seen.get(process.pid, "") + chunk
    return _seen[process.pid]


def test_continuous_mode_stops_after_the_running_cycle_on_sigterm(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    url = _status(connect_home)["url"]
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, b"v", 0) for _ in range(50)])
    config = flow_config(tmp_path, clusters, topic_name, f"ferry.spark.master = {url}\n")
    flow = config.enabled_flows[0]
    running = _continuous(config.path, flow.name, "--pause", "1")
    try:
        assert _next_cycle(running)["idle"] is False
        running.send_signal(signal.SIGTERM)
        out, err = running.communicate(timeout=120)
    finally:
        running.kill()
    assert running.returncode == 0, err[-3000:]
    assert "stopped by signal 15 after the running cycle" in err
    assert all(json.loads(line)["job_exit_code"] == 0 for line in out.splitlines())
    assert_exact(flow, clusters, topic_name, 1)


def test_continuous_mode_runs_costly_steps_at_their_intervals_and_finds_a_new_topic_at_once(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: cycles back to back on the warm Spark, heartbeats every hour, MM2's defaults else
    url = _status(connect_home)["url"]
    create_topic(clusters["source"], topic_name, 1)
    config = flow_config(tmp_path, clusters, f"{topic_name}.*",
                         f"ferry.spark.master = {url}\n"
                         "emit.heartbeats.enabled = true\n"
                         "heartbeats.topic.replication.factor = 1\n"
                         "emit.heartbeats.interval.seconds = 3600\n")
    flow = config.enabled_flows[0]
    binary = Path(sys.executable).parent / "ferry"
    log = tmp_path / "ferry.log"
    late = f"{topic_name}-late"
    created = f"create topic {flow.remote_topic(late)} (1 partitions, replication factor 1)"
    with log.open("w") as stderr:
        running = subprocess.Popen([str(binary), "mirror", config.path, "--flow", flow.name,
                                    "--continuous", "--for", "3m", "--pause", "0.5", "--json"],
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert running.stdout is not None
        first = json.loads(running.stdout.readline() or "null")
        # when: a new topic the flow mirrors appears while it runs (create_topic returns once
        # its leaders are listed: cycles keep running meanwhile, at most one a second)
        creating = time.monotonic()
        create_topic(clusters["source"], late, 1)
        during = math.ceil(time.monotonic() - creating)
        later: list[dict[str, Any]] = []
        while line := running.stdout.readline():  # until 3 cycles after the one that found it
            later.append(json.loads(line))
            found = [i for i, c in enumerate(later) if created in c["steps"]["sync"]["changes"]]
            if found and len(later) - found[0] > 3:
                running.send_signal(signal.SIGTERM)
        later += [json.loads(line) for line in running.stdout.read().splitlines()]
        running.wait(120)
    finally:
        running.kill()
    err = log.read_text()
    assert running.returncode == 0, err[-3000:]

    # then: the first cycle ran every step; the later ones only what is due
    assert first is not None, err[-3000:]
    assert first["steps"]["heartbeat"] == [f"{flow.source}->{flow.target}"]
    assert first["steps"]["sync"]["steps"]["configs"] == "done"
    assert first["steps"]["checkpoints"]["ran"] is True
    assert len(later) >= 3
    for cycle in later:
        steps = cycle["steps"]
        assert steps["heartbeat"] == []
        assert steps["sync"]["steps"]["topics"] == "done"
        assert steps["sync"]["steps"]["configs"].startswith("not due (every 600s")
        assert steps["sync"]["steps"]["acls"].startswith("not due (every 600s")
        assert steps["checkpoints"] == {"ran": False,
                                        "why": "not due (every 60s in a long-running loop)"}
    # the new topic's remote topic was created by the next cycle or the one after the
    # creation (the next may have listed topics already), not 10 minutes later
    assert any(created in cycle["steps"]["sync"]["changes"] for cycle in later[:during + 2])


STALE_SESSION_JOB = """
import json, sys
from ferry.spark import connect
config, flow, plan, url = sys.argv[1:5]
stale = connect.remote_session(url)
stale.stop()
sessions = connect.ConnectSessions()
sessions._kept[url] = stale  # what a restarted server leaves a continuous loop holding
copied = sessions.run_job(config, flow, plan, url)
kept = sessions._kept.get(url)
sessions.close()
print(json.dumps({"code": copied.exit_code, "run": (copied.summary or {}).get("run_id"),
                  "replaced": kept is not None and kept is not stale}))
"""


def test_a_loop_whose_kept_session_no_longer_works_copies_exactly_after_replacing_it(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a continuous loop's kept session that can no longer run anything
    from ferry.steps.cycle import write_plan
    from ferry.steps.plan import prepare

    url, config = warm_flow(connect_home, clusters, topic_name, tmp_path, 200,
                            "ferry.copy.runner = spark\n")
    flow = config.enabled_flows[0]
    plan = write_plan(flow, prepare(flow, run_id="after-restart", master=url))

    # when: the loop's next job (in a process of its own, as the loop is)
    job = subprocess.run([sys.executable, "-X", "faulthandler", "-c", STALE_SESSION_JOB,
                          config.path, flow.name, plan, url], capture_output=True, text=True,
                         timeout=300)

    # then: its lane tasks failed, so it reconnected, said so, ran the job again and kept
    # the new session (the local runner asks the server nothing, so never notices)
    assert job.returncode == 0, (f"exit {job.returncode}; stdout: {job.stdout[-1000:]}; "
                                 f"stderr: {job.stderr[-3000:]}")
    assert json.loads(job.stdout.splitlines()[-1]) == {"code": 0, "run": "after-restart",
                                                        "replaced": True}
    assert "reconnecting and running the job again" in job.stderr, job.stderr[-3000:]
    assert_exact(flow, clusters, topic_name, 2)


def _delta_run_ids(flow: Any, table: str) -> set[str]:
    from ferry.state.store import DeltaStore

    try:
        return {str(r["run_id"]) for r in DeltaStore.of(flow).rows(table, flow.name)}
    except Exception:  # not created yet
        return set()


def _behind(config: Config, flow_name: str) -> int:
    answer = ferry("status", config.path, "--json")
    assert answer.returncode == 0, answer.stderr[-3000:]
    found = [f for f in json.loads(answer.stdout)["flows"] if f["flow"] == flow_name]
    return int(found[0]["state_behind_entries"])


def _hourly_batches(connect_home: Path, clusters: dict[str, str], topic: str, tmp_path: Path,
                    records: int) -> tuple[str, Config]:
    """(the warm server's URL, a config mirroring `topic` through it with Delta batches an
    hour apart); `topic` made with 2 partitions and `records` records."""
    url = _status(connect_home)["url"]
    create_topic(clusters["source"], topic, 2)
    produce(clusters["source"], topic, [(None, f"a{i}".encode(), i % 2) for i in range(records)])
    return url, flow_config(tmp_path, clusters, topic, f"ferry.spark.master = {url}\n"
                            "ferry.state.record.interval.seconds = 3600\n")


def test_a_continuous_loop_records_delta_behind_its_copies_and_all_of_it_as_it_stops(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a loop on the warm Spark whose Delta batches are an hour apart: the first is
    # written at once (as the loop starts: what earlier runs left, and the first copy if
    # it came first), the next only as the loop stops
    _, config = _hourly_batches(connect_home, clusters, topic_name, tmp_path, 300)
    flow = config.enabled_flows[0]
    running = _continuous(config.path, flow.name, "--pause", "0.2")
    try:
        first, waited = _next_cycle(running), time.monotonic() + 60
        while first["idle"]:  # a topic created moments ago may not be listed at once
            assert time.monotonic() < waited, f"no copy in 60 s: {first}"
            first = _next_cycle(running)
        assert first["job_exit_code"] == 0

        # when: more records are copied by the next cycles
        produce(clusters["source"], topic_name,
                [(None, f"b{i}".encode(), i % 2) for i in range(200)])
        later = _next_cycle(running)
        while later["idle"]:
            later = _next_cycle(running)
        assert later["job_exit_code"] == 0

        # then: committed on the target, and shown as Delta's lag, not yet in Delta
        assert_exact(flow, clusters, topic_name, 2)
        assert later["run_id"] not in _delta_run_ids(flow, "offset_map")
        assert _behind(config, flow.name) > 0

        # when: the loop stops
        running.send_signal(signal.SIGTERM)
        out, err = running.communicate(timeout=120)
    finally:
        running.kill()
    assert running.returncode == 0, err[-3000:]

    # then: its last batch recorded every copy: runs and offset map, nothing behind
    copied = {first["run_id"], later["run_id"]} | {
        c["run_id"] for c in map(json.loads, out.splitlines()) if not c["idle"]}
    assert copied <= _delta_run_ids(flow, "runs")
    assert copied <= _delta_run_ids(flow, "offset_map")
    assert _behind(config, flow.name) == 0
    assert err.count("recorded behind the copy: ") == 2, err[-3000:]  # the first, the last


HANDING_OVER_LOOP = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
from ferry.config import load_config
from ferry.runtime import recorder
from ferry.steps.cycle import run_continuously
from tests.support.kafka_data import produce
config_path, flow_name, url, seconds, source, topic, rows_path, more = sys.argv[1:9]
config = load_config(config_path)
flow = config.flow(flow_name)
handed = []
add = recorder.Recorder.add
def keep(self, run_id, rows):  # the rows as the lanes reported them
    handed.extend({k: str(v) if k == "finished_at" else v for k, v in r.items()} for r in rows)
    add(self, run_id, rows)
recorder.Recorder.add = keep
cycles = []
def report(result, _seconds):
    copied = result.planned is not None and not result.planned.idle
    cycles.append({"run_id": result.run_id, "copied": copied, "ok": result.ok})
    if copied and len([c for c in cycles if c["copied"]]) == 1:  # more for a later cycle
        produce(source, topic, [(None, f"later-{i}".encode(), i % 2) for i in range(int(more))])
run_continuously(config_path, config, flow, report, master=url, for_s=float(seconds),
                 hand_over=True)
with open(rows_path, "w") as out:
    json.dump(handed, out)
print(json.dumps(cycles))
"""


def _loop_handing_over(config: Config, flow: Any, url: str, seconds: float,
                       source: str, topic: str, rows_path: Path, more: int = 0
                       ) -> tuple[list[dict[str, Any]], str]:
    """The @continuous DAG's loop (`hand_over`) for `seconds`, in a process of its own,
    `more` records produced once its first copy is reported: (its cycles, its log)."""
    done = subprocess.run([sys.executable, "-c", HANDING_OVER_LOOP, config.path, flow.name,
                           url, str(seconds), source, topic, str(rows_path), str(more)],
                          capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_a_dag_runs_loop_leaves_its_last_batch_to_the_next_run_which_records_it_as_copied(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: the @continuous DAG's loop on the warm Spark, Delta batches an hour apart (the
    # first once its first cycle is done: what earlier runs left); a first copy, then more
    # records that a later cycle copies
    url, config = _hourly_batches(connect_home, clusters, topic_name, tmp_path, 60)
    flow = config.enabled_flows[0]

    # when: its run ends
    cycles, err = _loop_handing_over(config, flow, url, 20, clusters["source"], topic_name,
                                     tmp_path / "first.json", more=40)

    # then: its first batch, once its first cycle was done, held at most its first copy
    # (when that cycle copied); the later copies were left to the next run, not written in a
    # last batch that the next run's first cycle would have waited for; and it opened no
    # Spark Connect session: its lanes are kept, its batches appended with delta-rs

    copies = [c["run_id"] for c in cycles if c["copied"]]
    assert len(copies) >= 2 and all(c["ok"] for c in cycles), cycles
    written = set(copies) & _delta_run_ids(flow, "runs")
    assert written <= {copies[0]}, written
    left = [c for c in copies if c not in written]
    assert f"left {2 * len(left)} runs rows of {len(left)} runs to the next run" in err, \
        err[-3000:]
    assert _behind(config, flow.name) > 0
    assert_exact(flow, clusters, topic_name, 2)
    assert "Spark Connect session on" not in err, err[-3000:]

    # when: the next run starts, and finds nothing new to copy
    next_cycles, next_err = _loop_handing_over(config, flow, url, 8, clusters["source"],
                                               topic_name, tmp_path / "next.json")

    # then: its first batch, with no copy of its own, recorded the left copies with the rows
    # their lanes reported (the seconds up to the commit's own milliseconds), and Delta is
    # no longer behind
    from ferry.state.store import DeltaStore

    assert not any(c["copied"] for c in next_cycles), next_cycles
    reported = {(r["run_id"], r["partition"]): r
                for r in json.loads((tmp_path / "first.json").read_text())}
    recorded = {(r["run_id"], r["partition"]): r
                for r in DeltaStore.of(flow).rows("runs", flow.name) if r["run_id"] in copies}
    assert sorted(recorded) == sorted(reported) == sorted(
        (run_id, p) for run_id in copies for p in (0, 1))
    same = ("lane", "topic", "range_start", "range_end", "records", "bytes",
            "max_record_age_ms", "outcome", "error", "delivery", "duplicates")
    for key, row in reported.items():
        assert {k: recorded[key][k] for k in same} == {k: row[k] for k in same}
        assert row["records"] > 0 and row["max_record_age_ms"] > 0
        assert abs(recorded[key]["seconds"] - row["seconds"]) < 1.0
    assert _behind(config, flow.name) == 0, next_err[-5000:]
