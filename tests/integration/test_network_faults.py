"""Faults of the network between Ferry and its clusters, on real sockets: the session's
clusters seen through Toxiproxy (`tests.support.toxiproxy`), while a continuous loop
copies and records stream in. Each fault starts at a forced point of the copy (a lane
held at its commit, or mid-read), lasts its time, and is lifted; then every record is on
the target once and in order, checked through the direct listeners, and the loop caught up
by itself within `RECOVERY_S` of the network's return."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ferry.core.takeover import Named
from ferry.kafka.lane import Lane
from ferry.logs import CLIENT_LOGGER, Repeats
from ferry.steps.cycle import CycleResult, run_continuously
from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce
from tests.support.monitoring import value_of
from tests.support.polling import wait_until
from tests.support.stream import PARTITIONS, RATE, Feeder, caught_up, lag, records
from tests.support.toxiproxy import Toxiproxy

pytestmark = [pytest.mark.integration]

RECOVERY_S = 30.0
"""How soon after the network returns the loop must have caught up by itself."""

Copying = tuple[list[CycleResult], list[BaseException], threading.Thread]
"""The cycles a copier reported, what it raised, its thread."""


@contextmanager
def copying(config: Any, flow: Any, mode: str) -> Iterator[Copying]:
    """`flow` copied in a thread until the block ends, as `mode` says: "loop", one
    continuous loop (the local runner, as the `@continuous` DAG runs it), whose failure
    ends it; "scheduled", runs of one cycle 2 s apart, as a schedule starts them, where a
    run that fails (as it may while the network is faulty) is reported and the next one
    starts on time."""
    from ferry.errors import FerryError
    from ferry.steps.cycle import run

    reported: list[CycleResult] = []
    raised: list[BaseException] = []
    stop = threading.Event()

    def loop() -> None:
        try:
            run_continuously(config.path, config, flow,
                             lambda result, _s: reported.append(result), stop=stop.is_set,
                             owner=Named("continuous-run", 1_000))
        except BaseException as exc:  # reported by the test
            raised.append(exc)

    def scheduled() -> None:
        while not stop.is_set():
            try:
                reported.append(run(config.path, config, flow))
            except FerryError as exc:  # a failed run: the next one is scheduled still
                raised.append(exc)
            stop.wait(2.0)

    thread = threading.Thread(target=loop if mode == "loop" else scheduled, daemon=True)
    thread.start()
    try:
        yield reported, raised, thread
    finally:
        stop.set()
        thread.join(180)


def held_at_commit(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Every writer's first commit after `arm` is set waits at its start until `release`
    is set (after setting `reached`). Returns (arm, release); `reached` is arm's partner."""
    arm, reached, release = threading.Event(), threading.Event(), threading.Event()
    commit = Lane.commit

    def held(self: Lane, producer: Any, metadata: Any, parts: Any) -> None:
        if arm.is_set() and not reached.is_set():
            reached.set()
            release.wait(60)
        commit(self, producer, metadata, parts)

    monkeypatch.setattr(Lane, "commit", held)
    arm.reached = reached  # type: ignore[attr-defined]
    return arm, release


class Scraper:
    """`ferry metrics CONFIG --serve` beside the loop, scraped every second: when, and
    the flow's `ferry_flow_up`."""

    def __init__(self, config_path: str, flow: Any) -> None:
        from tests.integration.test_metrics import serve

        self.pair = {"source": flow.source, "target": flow.target}
        started, self.process = serve(config_path, "--refresh", "1")
        self.url = started["serving"]
        self.seen: list[tuple[float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scrape, daemon=True)
        self._thread.start()

    def _scrape(self) -> None:
        from tests.integration.test_metrics import get

        while not self._stop.wait(1.0):
            _, body = get(self.url)
            up = value_of(body, "ferry_flow_up", **self.pair)
            self.seen.append((time.monotonic(), None if up is None else int(up)))

    def between(self, start: float, end: float) -> list[int | None]:
        return [up for at, up in self.seen if start <= at <= end]

    def close(self) -> None:
        from tests.integration.test_metrics import stop

        self._stop.set()
        self._thread.join(30)
        stop(self.process)


@dataclass
class Faulted:
    """What a fault did: the loop's cycles, the log during the fault, when the network
    returned, how long the loop took to catch up after, the flow's `ferry_flow_up`."""

    reported: list[CycleResult]
    during: list[logging.LogRecord]
    recovered_s: float
    behind: int
    """Records the target was behind the source as the network returned."""
    up_during: list[int | None]
    """`ferry_flow_up` from 15 s into the fault to its end (the collector probes the
    clusters every 5 s, each probe waiting 5 s at most)."""

    def loud(self) -> list[str]:
        return [f"{r.levelname} {r.name}: {r.getMessage()}" for r in self.during
                if r.levelno >= logging.WARNING]


def under_fault(clusters: dict[str, str], network: Toxiproxy, topic: str, tmp_path: Path,
                caplog: pytest.LogCaptureFixture, fault: Callable[[], Any], seconds: float,
                held: tuple[threading.Event, threading.Event] | None = None,
                mode: str = "loop", size: int = 0) -> tuple[Any, Faulted]:
    """A continuous loop copying `topic` through the proxies while records stream in; once
    it ran two cycles, `fault()` (a context manager) is entered for `seconds` (with `held`,
    (arm, release) of `held_at_commit`: entered while a writer is held at its commit, which
    then goes on into it); then the loop runs on until it caught up. `mode`: "loop" (a
    continuous run) or "scheduled" (runs of one cycle, `scheduled`). `size`: the streamed
    records' value size. Returns the flow and what happened."""
    # the clients' lines as every Ferry process lets them through (`ferry.logs.setup`)
    clients = logging.getLogger(CLIENT_LOGGER)
    repeats = Repeats()
    clients.addFilter(repeats)
    try:
        return _under_fault(clusters, network, topic, tmp_path, caplog, fault, seconds, held,
                            mode, size)
    finally:
        clients.removeFilter(repeats)


def _under_fault(clusters: dict[str, str], network: Toxiproxy, topic: str, tmp_path: Path,
                 caplog: pytest.LogCaptureFixture, fault: Callable[[], Any], seconds: float,
                 held: tuple[threading.Event, threading.Event] | None, mode: str, size: int
                 ) -> tuple[Any, Faulted]:
    create_topic(clusters["source"], topic, PARTITIONS)
    produce(clusters["source"], topic, records(200))
    config = flow_config(tmp_path, dict(network.bootstrap), topic,
                         "ferry.writers = 2\nferry.copy.runner = local\n")
    flow = config.enabled_flows[0]
    scraper = Scraper(config.path, flow)
    try:
        with Feeder(clusters["source"], topic, size) as feeder, \
                copying(config, flow, mode) as (reported, raised, thread):
            wait_until(lambda: len(reported) >= 2, "the loop ran two cycles")
            wait_until(lambda: scraper.seen[-1:] == [(scraper.seen[-1][0], 1)]
                       if scraper.seen else False, "the flow is up")
            if held is not None:
                arm = held[0]
                arm.set()
                assert arm.reached.wait(60)  # type: ignore[attr-defined]
            caplog.clear()
            began = time.monotonic()
            with fault():
                if held is not None:
                    held[1].set()
                time.sleep(seconds)
                during = list(caplog.records)
            returned = time.monotonic()
            feeder.stop()
            behind = lag(clusters, flow, topic)
            wait_until(lambda: not thread.is_alive() or caught_up(clusters, flow, topic)(),
                       "the loop caught up", timeout=120)
            recovered = time.monotonic() - returned
            assert thread.is_alive(), (raised, [r.steps() for r in reported if not r.ok])
            if mode == "scheduled":  # the loop's failed cycles are below
                print("runs that failed:", [str(e)[:300] for e in raised])
            wait_until(lambda: scraper.seen[-1][1] == 1, "the flow is up again",
                       timeout=RECOVERY_S)
    finally:
        scraper.close()
    faulted = Faulted(reported, during, recovered, behind,
                      scraper.between(began + 15, returned))
    print(f"{behind} records behind as the network returned, caught up "
          f"{recovered:.1f} s after; {len(during)} log "
          f"lines during the fault, {len(faulted.loud())} warnings or worse; "
          f"{len(reported)} cycles, {sum(not r.ok for r in reported)} failed; "
          f"ferry_flow_up during {faulted.up_during}")
    for line in faulted.loud()[:30]:
        print(line[:400])
    return flow, faulted


def assert_recovered(flow: Any, faulted: Faulted, cluster: str,
                     within_s: float = RECOVERY_S) -> None:
    """Caught up by itself `within_s` (and up again: `under_fault`); the flow down during
    the fault (`FerryFlowDown`'s expression held); the fault said in a few lines naming
    the cluster."""
    assert faulted.recovered_s <= within_s
    assert faulted.up_during and set(faulted.up_during) == {0}, faulted.up_during
    loud = faulted.loud()
    assert 1 <= len(loud) <= 12, loud
    assert any(f"cluster {cluster}" in line for line in loud), loud


@pytest.mark.parametrize("mode", ["loop", "scheduled"])
def test_a_target_black_holed_for_a_minute_mid_commit_loses_and_doubles_nothing(
    clusters: dict[str, str], network: Toxiproxy, topic_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    # given: a continuous loop (or scheduled runs) copying through the proxies, records
    # streaming in; when: a writer held at its commit, the target black-holed, the commit
    # let go into the black hole, and the network back a minute later
    flow, faulted = under_fault(clusters, network, topic_name, tmp_path, caplog,
                                lambda: network.black_hole("target"), 60,
                                held=held_at_commit(monkeypatch), mode=mode)
    # then: every record on the target once, in order; caught up by itself soon after
    assert_exact(flow, clusters, topic_name, PARTITIONS)
    assert_recovered(flow, faulted, flow.target, RECOVERY_S)


SOURCE_FAULTS: dict[str, tuple[Callable[[Toxiproxy], Any], float]] = {
    # the source answers 5 s late for 20 s, then its connections are cut and new ones
    # refused for 30 s, while the loop reads
    "stalled-then-cut-mid-read": (lambda n: n.stalled_then_cut("source", 5_000, 20), 30),
    # the link to the source stops forwarding anything for 45 s, closing nothing
    "held-half-open": (lambda n: n.black_hole("source"), 45),
}


@pytest.mark.parametrize("fault", SOURCE_FAULTS)
def test_a_source_link_that_stalls_or_is_cut_loses_and_doubles_nothing(
    clusters: dict[str, str], network: Toxiproxy, topic_name: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    start, seconds = SOURCE_FAULTS[fault]
    flow, faulted = under_fault(clusters, network, topic_name, tmp_path, caplog,
                                lambda: start(network), seconds)
    assert_exact(flow, clusters, topic_name, PARTITIONS)
    assert_recovered(flow, faulted, flow.source)


def test_a_slow_link_to_the_target_for_minutes_loses_and_doubles_nothing(
    clusters: dict[str, str], network: Toxiproxy, topic_name: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture
) -> None:
    # when: what Ferry sends to the target is held to 1 KB/s, a twentieth of what streams in
    # (100 records/s of 200 bytes), for a minute and a half
    flow, faulted = under_fault(clusters, network, topic_name, tmp_path, caplog,
                                lambda: network.slow("target", 1), 90, size=200)
    # then: exact, and the backlog caught up soon after; a slow link is no outage: the
    # flow stays up, and no cycle fails
    assert_exact(flow, clusters, topic_name, PARTITIONS)
    assert faulted.behind > RATE * 10, "the link was not slower than the stream"
    assert faulted.recovered_s <= RECOVERY_S
    assert set(faulted.up_during) == {1}, faulted.up_during
    assert all(r.ok for r in faulted.reported)
    # (a batch crawling to the target for over 10 s is said, once a batch and writer)
    assert len(faulted.loud()) <= 12, faulted.loud()


SILENT_AT = {
    # the link stops forwarding before the writer starts: its first look at the topic's
    # metadata waits on the source
    "its-metadata": "before the writer starts",
    # the link stops forwarding once the writer knows the topic, before its first fetch
    "its-reads": "once the writer has read the topic's metadata",
}


@pytest.mark.parametrize("at", SILENT_AT)
def test_a_writer_whose_source_goes_silent_says_so_within_seconds_and_copies_on_its_return(
    clusters: dict[str, str], network: Toxiproxy, topic_name: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    from ferry.kafka import lane_topics
    from ferry.steps.plan import prepare

    # given: a writer's range planned over records on the source, reached through the proxy
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, b"v" * 100, 0)] * 2_000)
    flow = flow_config(tmp_path, dict(network.bootstrap), topic_name,
                       "ferry.writers = 1\nferry.copy.runner = local\n").enabled_flows[0]
    prepared = prepare(flow, run_id="silent")
    learned, silent = threading.Event(), threading.Event()
    if at == "its-reads":  # the writer waits, its metadata read, until the link is silent
        learn = lane_topics.learn_topics

        def learn_then_wait(lane: Lane, consumer: Any, topics: Any) -> None:
            learn(lane, consumer, topics)
            learned.set()
            assert silent.wait(60)

        monkeypatch.setattr(lane_topics, "learn_topics", learn_then_wait)
    else:
        learned.set()
    done: list[object] = []
    writer = threading.Thread(target=lambda: done.append(
        Lane(flow, prepared.plan.ranges, "silent").run()), daemon=True)
    caplog.set_level(logging.INFO, logger="ferry")

    # when: the link to the source stops forwarding (SILENT_AT) for 15 s
    if at == "its-reads":
        writer.start()
    assert learned.wait(60)
    with network.black_hole("source"):
        silent.set()
        if not writer.is_alive():
            writer.start()
        time.sleep(15)
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    # then: within seconds, one line names the source and what the writer waits for
    # (a busy target may also be slow to lead the offset-map topic the writer creates:
    # that is said too, naming the target, and is not the silence)
    of_source = [line for line in said if f"cluster {flow.source}" in line]
    assert of_source, (f"15 s of silence from the source {SILENT_AT[at]}, and the writer said "
                       f"nothing of it: {[r.getMessage()[:200] for r in caplog.records][-8:]}, "
                       f"{done}")
    assert len(of_source) <= 2, of_source
    assert not [line for line in said if line not in of_source and "do not answer" in line], \
        said
    # and once the link is back the writer copies the range, and says how the wait ended
    writer.join(120)
    assert done, "the writer did not finish after the link came back"
    assert_exact(flow, clusters, topic_name, 1)
    ended = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO
             and f"cluster {flow.source}" in r.getMessage()]
    assert ended, [r.getMessage() for r in caplog.records][-10:]
    print("said:", said, "then:", ended)
