"""Lost state under a running continuous loop, on real brokers and delta-rs: the Delta
state directory deleted, its last commit truncated (a disk that filled mid-write), the
positions group deleted by an operator who "cleans up" groups. Each fault is struck
between two cycles (from the loop's own report of a cycle, so the interleaving is forced),
while records stream in. Ferry rebuilds what it can from Kafka (the offset-map topic, G9)
or stops with one line naming the fix; nothing is lost or doubled on the target, and
`ferry verify` agrees afterwards."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from ferry.config import Flow
from ferry.core.internal import positions_group
from ferry.core.takeover import Named
from ferry.steps.cycle import CycleResult, run_continuously
from ferry.steps.verify import verify
from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce
from tests.support.polling import wait_until
from tests.support.stream import PARTITIONS, Feeder, caught_up, records

pytestmark = [pytest.mark.integration]


def struck(clusters: dict[str, str], topic: str, tmp_path: Path,
           fault: Callable[[Flow], None]) -> tuple[Flow, list[CycleResult], list[BaseException]]:
    """A continuous loop of `topic` while records stream in; after its third cycle
    reported, `fault(flow)` is struck in the loop's own thread (before its next cycle),
    and the loop runs on until it caught up. The flow, the cycles, what the loop raised."""
    create_topic(clusters["source"], topic, PARTITIONS)
    produce(clusters["source"], topic, records(200))
    config = flow_config(tmp_path, clusters, topic,
                         "ferry.writers = 2\nferry.copy.runner = local\n")
    flow = config.enabled_flows[0]
    reported: list[CycleResult] = []
    raised: list[BaseException] = []
    stop, struck_at = threading.Event(), threading.Event()

    def on_cycle(result: CycleResult, _s: float) -> None:
        reported.append(result)
        if len(reported) == 3:
            fault(flow)
            struck_at.set()

    def loop() -> None:
        try:
            run_continuously(config.path, config, flow, on_cycle, stop=stop.is_set,
                             owner=Named("continuous-run", 1_000))
        except BaseException as exc:  # reported by the test
            raised.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    with Feeder(clusters["source"], topic) as feeder:
        thread.start()
        try:
            assert struck_at.wait(120), (raised, [r.steps() for r in reported])
            wait_until(lambda: len(reported) >= 6 or not thread.is_alive(),
                       "three cycles after the fault", timeout=120)
            feeder.stop()
            wait_until(lambda: not thread.is_alive() or caught_up(clusters, flow, topic)(),
                       "the loop caught up", timeout=120)
        finally:
            stop.set()
            thread.join(120)
    return flow, reported, raised


def verified(flow: Flow, topic: str) -> list[Any]:
    """`ferry verify`'s partition checks that found something wrong."""
    return [c for c in verify(flow, topic) if c.mismatches or c.skipped or c.extra]


def delete_positions(flow: Flow) -> None:
    """The positions group deleted, as an operator "cleaning up" groups would."""
    admin = AdminClient(flow.target_admin.confluent())
    admin.delete_consumer_groups([positions_group(flow)])[positions_group(flow)].result(30)


def delete_state(flow: Flow) -> None:
    """The Delta state directory deleted, every table in it."""
    shutil.rmtree(flow.ferry.state_dir)


@pytest.mark.parametrize("fault", [delete_positions, delete_state],
                         ids=["positions-group-deleted", "state-directory-deleted"])
def test_state_lost_under_a_running_loop_is_rebuilt_from_kafka_and_nothing_is_copied_twice(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, fault: Callable[[Flow], None]
) -> None:
    flow, reported, raised = struck(clusters, topic_name, tmp_path, fault)

    assert raised == [] and all(r.ok for r in reported), [r.steps() for r in reported]
    assert_exact(flow, clusters, topic_name, PARTITIONS)
    assert verified(flow, topic_name) == []


def test_a_torn_last_commit_of_the_offset_map_is_set_aside_and_its_rows_recorded_again(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture
) -> None:
    torn: list[Path] = []

    def tear_last_commit(flow: Flow) -> None:
        log = Path(flow.ferry.state_dir) / "offset_map" / "_delta_log"
        wait_until(lambda: any(log.glob("*.json")), "the offset map's first commit")
        last = sorted(log.glob("*.json"))[-1]
        text = last.read_bytes()
        last.write_bytes(text[: len(text) // 2])  # a disk that filled mid-write
        torn.append(last)

    flow, reported, raised = struck(clusters, topic_name, tmp_path, tear_last_commit)

    # then: the loop went on, the torn commit was set aside in one line naming the table,
    # and what it held was recorded again: verify finds every record paired
    assert raised == [] and all(r.ok for r in reported), [r.steps() for r in reported]
    assert_exact(flow, clusters, topic_name, PARTITIONS)
    (commit,) = torn
    assert list(commit.parent.glob(f"{commit.name}.torn-*")), "the torn commit not set aside"
    said = [r.getMessage() for r in caplog.records if "was torn" in r.getMessage()]
    assert len(said) == 1 and "offset_map" in said[0], said
    assert verified(flow, topic_name) == []
