"""Two runs of an `@continuous` flow at a turn, on real brokers and the warm Spark: the run
before copies on while the next one starts, and hands over to it once the next one's lanes
name it the flow's newest (`ferry.core.takeover`). Kafka fences the earlier run's writers,
so records streaming in all the while are on the target once each, in order."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ferry
from tests.support.kafka_data import assert_exact, create_topic, flow_config, written

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LOOP = """
import faulthandler, json, logging, sys
faulthandler.enable()
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
from ferry.config import load_config
from ferry.core.takeover import Named
from ferry.steps.cycle import run_continuously
config_path, flow_name, url, seconds, run, since = sys.argv[1:7]
config = load_config(config_path)
flow = config.flow(flow_name)
cycles = []
def report(result, _seconds):
    copied = result.planned is not None and not result.planned.idle
    cycles.append({"run_id": result.run_id, "copied": copied, "ok": result.ok})
last = run_continuously(config_path, config, flow, report, master=url, for_s=float(seconds),
                        hand_over=True, owner=Named(run, int(since)))
print(json.dumps({"cycles": cycles, "handed_to": last.handed_to if last else None,
                  "ok": last is None or last.ok}))
"""


def _loop(config_path: str, flow: str, url: str, seconds: float, run: str, since_ms: int
          ) -> subprocess.Popen[str]:
    """A run of the `@continuous` DAG's loop (`run_continuously` with its owner) for at most
    `seconds`, in a process of its own."""
    return subprocess.Popen([sys.executable, "-c", LOOP, config_path, flow, url, str(seconds),
                             run, str(since_ms)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])


def _ended(loop: subprocess.Popen[str], timeout: float) -> tuple[dict[str, Any], str]:
    out, err = loop.communicate(timeout=timeout)
    assert loop.returncode == 0, err[-4000:]
    return json.loads(out.splitlines()[-1]), err


class Stream:
    """Records into a topic of two partitions, about `rate` a second, until `stop`."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 40) -> None:
        from confluent_kafka import Producer

        self.topic, self.rate = topic, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True, "log_level": 3})
        self.sent, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(self.rate // 10):
                self.producer.produce(self.topic, value=f"r{self.sent}".encode(),
                                      partition=self.sent % 2)
                self.sent += 1
            self.producer.poll(0)
            self._stop.wait(0.1)
        assert self.producer.flush(60) == 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def _wait(condition: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.2)


def test_a_continuous_run_hands_over_to_the_next_while_records_stream_in_exactly_once(
    connect_url: str, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a flow on the warm Spark, and records streaming into its topic all along
    create_topic(clusters["source"], topic_name, 2)
    config = flow_config(tmp_path, clusters, topic_name,
                         f"ferry.spark.master = {connect_url}\n"
                         "ferry.continuous.interval.seconds = 0.2\n")
    flow = config.enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    stream = Stream(clusters["source"], topic_name)
    earlier = _loop(config.path, flow.name, connect_url, 240, "scheduled__1", 1_000)
    later: subprocess.Popen[str] | None = None
    try:
        # when: the earlier run copies, then the later run starts beside it
        _wait(lambda: written(clusters["target"], remote, 2) > 0, "the earlier run's copy")
        later = _loop(config.path, flow.name, connect_url, 45, "scheduled__2", 2_000)

        # then: the earlier run hands over to the later one and ends, neither failed
        handed, err = _ended(earlier, 180)
        assert handed["handed_to"] == "scheduled__2", err[-4000:]
        # its last cycle may have yielded: a hand-over, no failed cycle
        assert handed["ok"] and all(c["ok"] for c in handed["cycles"]), handed["cycles"]
        assert "this run hands over to it and ends" in err
        assert any(c["copied"] for c in handed["cycles"])

        # when: a try of the earlier run starts again while the later one runs
        again, again_err = _ended(_loop(config.path, flow.name, connect_url, 60,
                                        "scheduled__1", 1_000), 120)

        # then: it hands over at once, copying nothing
        assert again == {"cycles": [], "handed_to": "scheduled__2", "ok": True}, again_err

        # when: the stream stops, and the later run comes to its end
        stream.stop()
        going_on, later_err = _ended(later, 120)
    finally:
        stream.stop()
        for loop in (earlier, later):
            if loop is not None and loop.poll() is None:
                loop.kill()

    # then: the later run went on to its end; with what it had no time left for copied by
    # one more cycle, every record is on the target once, in order (Kafka fenced whatever
    # the earlier run's writers still had open)
    assert going_on["handed_to"] is None and going_on["ok"], later_err[-4000:]
    assert all(c["ok"] for c in going_on["cycles"]), going_on["cycles"]
    assert sum(c["copied"] for c in going_on["cycles"]) >= 1
    rest = ferry("mirror", config.path, "--flow", flow.name)
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert stream.sent > 0
    assert_exact(flow, clusters, topic_name, 2)
    # and the runs table holds no failed range: what the earlier run left at the turn is
    # recorded as handed over
    from ferry.core.tables import StatePaths
    from ferry.state.reader import rows

    recorded = rows(StatePaths(flow.ferry.state_dir).runs, flow.name)
    assert recorded and {r["outcome"] for r in recorded} <= {"copied", "skipped", "handed-over"}, \
        [(r["run_id"], r["outcome"], r["error"]) for r in recorded if r["outcome"] == "failed"]
