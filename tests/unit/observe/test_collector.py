"""Metrics collected in the background (`ferry.observe.collector`): a scrape never waits on
the clusters; it gets the latest collection with its age."""

from __future__ import annotations

import threading
import time

import pytest

from ferry.errors import ConfigError, Problem
from ferry.observe.collector import Collector
from ferry.observe.metrics import Family, Sample


def up(value: float) -> list[Family]:
    return [Family("ferry_flow_up", "gauge", "up", (Sample((("source", "A"),), value),))]


def values(found: list[Family] | None) -> dict[str, float]:
    assert found is not None
    return {f.name: f.samples[0].value for f in found}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_scrape_during_a_hung_collection_gets_the_previous_one_with_its_age() -> None:
    # given: a first collection done at t=1000, then one that hangs (a cluster went down)
    clock, release, calls = Clock(), threading.Event(), []

    def collect() -> list[Family]:
        calls.append(clock.now)
        if len(calls) > 1:
            release.wait(30)
            return up(0)
        return up(1)

    collector = Collector(collect, interval_s=0.01, clock=clock)
    collector.collect_once()
    clock.now += 42
    collector.start()
    try:
        # when: scraped while the second collection hangs
        found = collector.latest()

        # then: at once, the first collection, 42 s old
        assert values(found) == {"ferry_flow_up": 1, "ferry_metrics_collected": 1,
                                 "ferry_metrics_age_seconds": 42,
                                 "ferry_metrics_collect_seconds": pytest.approx(0, abs=1)}
    finally:
        release.set()
        collector.stop()


def test_before_the_first_collection_a_scrape_is_served_that_nothing_is_collected_yet() -> None:
    release = threading.Event()
    collector = Collector(lambda: (release.wait(30), up(1))[1], interval_s=60).start()
    try:
        assert collector.latest(wait_s=0.05) is None
        assert values(collector.served(wait_s=0.05)) == {"ferry_metrics_collected": 0}
        release.set()
        served = values(collector.served(wait_s=30))
        assert served["ferry_flow_up"] == 1 and served["ferry_metrics_collected"] == 1
    finally:
        release.set()
        collector.stop()


def test_a_failed_collection_keeps_the_previous_metrics_and_a_broken_config_is_raised() -> None:
    outcomes: list[list[Family] | Exception] = [
        up(1), RuntimeError("boom"),
        ConfigError([Problem("A.bootstrap.servers", "missing", "set it")]), up(0)]

    def collect() -> list[Family]:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    collector = Collector(collect)
    collector.collect_once()
    collector.collect_once()  # fails: the first collection stays served
    assert values(collector.latest())["ferry_flow_up"] == 1
    collector.collect_once()  # the config broke: no metric of it can be trusted
    with pytest.raises(ConfigError, match=r"A\.bootstrap\.servers"):
        collector.latest()
    collector.collect_once()  # fixed again
    assert values(collector.latest())["ferry_flow_up"] == 0


def test_a_collector_nobody_asks_pauses_and_the_next_scrape_starts_it_again() -> None:
    # given: a collector scraped once, then not asked for longer than its idle time
    calls: list[float] = []

    def collect() -> list[Family]:
        calls.append(time.monotonic())
        return up(len(calls))

    collector = Collector(collect, interval_s=0.01, idle_s=0.2).start()
    try:
        assert collector.latest(wait_s=5) is not None
        deadline = time.monotonic() + 10
        while not collector.paused:  # collections go on until it pauses
            assert time.monotonic() < deadline, "it never paused"
            time.sleep(0.01)
        made = len(calls)
        time.sleep(0.1)
        assert len(calls) == made  # paused: the clusters are not read

        # when: scraped again
        found = collector.latest()

        # then: at once, the last collection (or the resumed one's first, had it already
        # ended); and collecting resumed
        assert values(found)["ferry_flow_up"] in (made, made + 1)
        deadline = time.monotonic() + 10
        while len(calls) == made:
            assert time.monotonic() < deadline, "it never resumed"
            time.sleep(0.01)
        assert not collector.paused
    finally:
        collector.stop()


def test_a_cluster_silent_during_a_hung_collection_is_served_down_until_it_answers() -> None:
    # given: a collection that said the flow up, then one that hangs on its source, which
    # stopped answering after the hung collection asked it
    release, silent = threading.Event(), {"A"}
    collected = [0]

    def collect() -> list[Family]:
        collected[0] += 1
        if collected[0] > 1:
            release.wait(30)
        return up(1)

    collector = Collector(collect, interval_s=0.05, silent=lambda: set(silent))
    collector.collect_once()
    collector.start()
    try:
        # when: scraped while the collection hangs
        # then: the flow is served down, its metrics otherwise as last collected
        deadline = time.monotonic() + 10
        while values(collector.latest())["ferry_flow_up"] != 0:
            assert time.monotonic() < deadline, "the silent source was never served down"
            time.sleep(0.02)
        # and up again once the source answers, the collection still hung
        silent.clear()
        while values(collector.latest())["ferry_flow_up"] != 1:
            assert time.monotonic() < deadline, "the source answering was never served"
            time.sleep(0.02)
    finally:
        release.set()
        collector.stop()
