"""Exact failover (G5): a group that committed on the source resumes on the target at
exactly the first record it had not committed: no record read twice, none skipped,
counted record by record on real brokers."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    TopicPartition,
)

from ferry.cli.main import main
from ferry.core.checkpoints import Translated
from ferry.steps.checkpoints import checkpoints_topic, run, translate_groups
from tests.support.failover import (
    SYNC,
    assert_exact_failover,
    commit_source,
    read_checkpoints,
    resume_on_target,
)
from tests.support.kafka_data import (
    COMPACTION_EXCLUDE,
    compacted_topic,
    create_topic,
    flow_config,
    produce,
    produce_transactions,
    read_all,
    run_cycle,
    wait_lso,
)

EXACT, BOUNDED = Translated.EXACT, Translated.BOUNDED

pytestmark = pytest.mark.integration








def test_plain_topic_several_partitions_different_progress_one_at_the_end(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 3)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 3)
                                             for i in range(300)])
    flow = flow_config(tmp_path, clusters, topic_name, SYNC).enabled_flows[0]
    run_cycle(flow)
    group = f"{topic_name}-app"
    offsets = {0: 0, 1: 37, 2: 100}  # the start, the middle, exactly the end
    commit_source(clusters["source"], group, topic_name, offsets)

    report = run(flow)

    assert {(t.partition, t.target_offset, t.status) for t in report.translations} == {
        (0, 0, EXACT), (1, 37, EXACT), (2, 100, EXACT)}
    assert {t.metadata for t in report.translations} == {"meta-0", "meta-1", "meta-2"}
    assert report.synced == {group: 3}
    assert_exact_failover(flow, clusters, topic_name, 3, group, offsets)


def test_transactional_topic_with_an_aborted_transaction(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    # offsets: 0-19 committed, 20 marker, 21-27 aborted, 28 marker, 29-33 committed, 34 marker
    produce_transactions(clusters["source"], topic_name, [(20, True), (7, False), (5, True)],
                         tid=topic_name)
    wait_lso(clusters["source"], topic_name, 0, 35)
    flow = flow_config(tmp_path, clusters, topic_name, SYNC).enabled_flows[0]
    run_cycle(flow)

    for committed, target in ((20, 20), (24, 20), (29, 20), (31, 22), (35, 25)):
        group = f"{topic_name}-at-{committed}"
        commit_source(clusters["source"], group, topic_name, {0: committed})
        (translation,) = translate_groups(flow, group)
        assert translation.target_offset == target, committed
        run(flow)
        assert_exact_failover(flow, clusters, topic_name, 1, group, {0: committed})


def test_compacted_topic(clusters: dict[str, str], topic_name: str, tmp_path: Path) -> None:
    compacted_topic(clusters["source"], topic_name)
    flow = flow_config(tmp_path, clusters, topic_name, COMPACTION_EXCLUDE + SYNC
                       ).enabled_flows[0]
    run_cycle(flow)
    offsets = [r.offset for r in read_all(clusters["source"], topic_name, 0)]
    hole = next(a + 1 for a, b in itertools.pairwise(offsets) if b - a > 1)
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: hole})  # a compacted offset

    run(flow)

    assert_exact_failover(flow, clusters, topic_name, 1, group, {0: hole})


def test_a_group_that_committed_only_some_partitions(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 3)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 3) for i in range(90)])
    flow = flow_config(tmp_path, clusters, topic_name, SYNC).enabled_flows[0]
    run_cycle(flow)
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {1: 12})

    report = run(flow)

    assert [(t.partition, t.target_offset) for t in report.translations] == [(1, 12)]
    assert_exact_failover(flow, clusters, topic_name, 3, group, {1: 12})


def test_a_group_ahead_of_the_mirror_is_bounded_then_exact(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"a{i}".encode(), 0) for i in range(100)])
    flow = flow_config(tmp_path, clusters, topic_name, SYNC).enabled_flows[0]
    run_cycle(flow, "first")
    produce(clusters["source"], topic_name, [(None, f"b{i}".encode(), 0) for i in range(50)])
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 120})

    (early,) = run(flow).translations

    assert (early.target_offset, early.status) == (100, BOUNDED)  # never ahead of the data
    # Failing over now: nothing on the target is read twice (records 100.. are not there).
    assert resume_on_target(clusters["target"], group, flow.remote_topic(topic_name), 1) == \
        {0: []}
    run_cycle(flow, "second")
    (late,) = run(flow).translations
    # (source 100 went to target 101: Ferry's commit marker of the first run is at 100)
    assert (late.target_offset, late.status) == (121, EXACT)
    assert_exact_failover(flow, clusters, topic_name, 1, group, {0: 120})




def test_checkpoints_are_monotonic_and_a_rewind_emits_a_lower_one(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(50)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow)
    group = f"{topic_name}-app"

    commit_source(clusters["source"], group, topic_name, {0: 30})
    assert len(run(flow).emitted) == 1
    assert run(flow).emitted == []  # a repeat is suppressed
    commit_source(clusters["source"], group, topic_name, {0: 40})
    assert len(run(flow).emitted) == 1
    commit_source(clusters["source"], group, topic_name, {0: 10})  # the source group rewound
    assert len(run(flow).emitted) == 1

    assert read_checkpoints(clusters, flow) == [(group, 30, 30), (group, 40, 40),
                                                (group, 10, 10)]
    assert flow.sync_group_offsets.active is False  # MM2's default: target groups untouched
    consumer = Consumer({"bootstrap.servers": clusters["target"], "group.id": group})
    try:
        remote = flow.remote_topic(topic_name)
        assert consumer.committed([TopicPartition(remote, 0)], timeout=30)[0].offset < 0
    finally:
        consumer.close()


def test_group_offset_sync_leaves_an_active_group_alone_and_moves_an_empty_one_forward_only(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(60)])
    flow = flow_config(tmp_path, clusters, topic_name, SYNC).enabled_flows[0]
    run_cycle(flow)
    remote = flow.remote_topic(topic_name)
    active, empty = f"{topic_name}-active", f"{topic_name}-empty"
    for group in (active, empty):
        commit_source(clusters["source"], group, topic_name, {0: 20})
    commit_source(clusters["target"], empty, remote, {0: 50})  # ahead already
    consumer = Consumer({"bootstrap.servers": clusters["target"], "group.id": active,
                         "auto.offset.reset": "latest", "enable.auto.commit": False})
    consumer.subscribe([remote])
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment():  # joined: the group is STABLE on the target
            consumer.poll(0.2)
            assert time.monotonic() < deadline
        report = run(flow)
        assert report.active == [active]
    finally:
        consumer.close()
    assert empty not in report.synced  # 20 would move it backwards from 50
    commit_source(clusters["source"], empty, topic_name, {0: 55})
    assert run(flow).synced == {empty: 1, active: 1}  # now empty too; 55 is forward
    check = Consumer({"bootstrap.servers": clusters["target"], "group.id": empty})
    try:
        assert check.committed([TopicPartition(remote, 0)], timeout=30)[0].offset == 55
    finally:
        check.close()


def test_ferry_checkpoints_shows_what_it_would_do_and_acts_only_with_execute(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given: a mirrored topic, a group that committed on the source, group offset sync on
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(20)])
    config = flow_config(tmp_path, clusters, topic_name, SYNC)
    flow = config.enabled_flows[0]
    run_cycle(flow)
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 4, 1: 10})
    remote = flow.remote_topic(topic_name)

    def on_target() -> dict[int, int]:
        check = Consumer({"bootstrap.servers": clusters["target"], "group.id": group})
        try:
            return {tp.partition: tp.offset for tp in check.committed(
                [TopicPartition(remote, p) for p in (0, 1)], timeout=30)}
        finally:
            check.close()

    def ours() -> list[tuple[str, int, int]]:
        listed = Consumer({"bootstrap.servers": clusters["target"], "group.id": group})
        try:
            if checkpoints_topic(flow) not in listed.list_topics(timeout=30).topics:
                return []  # not even created
        finally:
            listed.close()
        return [c for c in read_checkpoints(clusters, flow) if c[0] == group]

    # when: run without --execute
    assert main(["checkpoints", config.path, "--flow", flow.name, "--json"]) == 0

    # then: it names the translations it would make, and neither emits nor commits any
    shown = json.loads(capsys.readouterr().out)
    assert shown["dry_run"] is True
    assert sorted((t["group"], t["partition"], t["target_offset"])
                  for t in shown["translations"] if t["group"] == group) == [
        (group, 0, 4), (group, 1, 10)]
    assert ours() == []
    assert on_target() == {0: -1001, 1: -1001}

    # and with --execute it does what it showed
    assert main(["checkpoints", config.path, "--flow", flow.name, "--execute", "--json"]) == 0
    capsys.readouterr()
    assert sorted(ours()) == [(group, 4, 4), (group, 10, 10)]
    assert on_target() == {0: 4, 1: 10}


def test_ferry_translate_prints_each_partition(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(20)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    run_cycle(flow)
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 4, 1: 10})

    code = main(["translate", config.path, "--flow", flow.name, "--group", group, "--json"])

    assert code == 0
    rows = json.loads(capsys.readouterr().out)["partitions"]
    assert [(r["partition"], r["source_offset"], r["target_offset"], r["status"])
            for r in rows] == [(0, 4, 4, EXACT), (1, 10, 10, EXACT)]


def test_mm2s_own_client_reads_ferrys_checkpoints_like_ferry_translate(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    import subprocess

    from ferry.jars import kafka_jars, log4j_config

    create_topic(clusters["source"], topic_name, 3)
    produce_transactions(clusters["source"], topic_name, [(30, True), (5, False), (30, True)],
                         tid=topic_name)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 1 + i % 2)
                                             for i in range(40)])
    wait_lso(clusters["source"], topic_name, 0, 67)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow)
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 33, 1: 7, 2: 20})
    run(flow)

    java = subprocess.run(
        ["java", f"-Dlog4j2.configurationFile={log4j_config()}", "-cp", f"{kafka_jars()}/*",
         str(Path(__file__).parent / "java" / "TranslateOffsets.java"), clusters["target"],
         flow.source, group], capture_output=True, text=True, timeout=180, check=False)

    assert java.returncode == 0, java.stderr[-3000:]
    theirs = {(t, int(p), int(o), m) for line in java.stdout.splitlines()
              if line.startswith("OFFSET ") for t, p, o, m in [line.split()[1:5]]}
    ours = {(t.target_topic, t.partition, t.target_offset, t.metadata)
            for t in translate_groups(flow, group)}
    assert theirs == ours and len(ours) == 3


def test_fail_back_moves_the_group_to_the_original_topic_exactly(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(80)])
    forward = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(forward, "first")
    produce(clusters["source"], topic_name, [(None, f"w{i}".encode(), i % 2) for i in range(20)])
    run_cycle(forward, "second")  # a second transaction: a commit marker in the remote topic
    # The way back: the reverse flow (target -> source) with group offset sync.
    remote = forward.remote_topic(topic_name)
    group = f"{topic_name}-app"
    way_back = f"{forward.target}->{forward.source}"
    config = flow_config(tmp_path, clusters, topic_name,
                         f"{way_back}.enabled = true\n{way_back}.topics = {remote}\n"
                         f"{way_back}.groups = {group}\n" + SYNC)  # (shared brokers)
    back = config.flow(way_back)
    # The group failed over earlier and has read part of the remote topic on the target.
    commit_source(clusters["target"], group, remote, {0: 45, 1: 10})

    from ferry.steps.checkpoints import reverse_of

    report = run(back, reverse=reverse_of(config, back))

    assert {(t.topic, t.partition, t.target_topic, t.target_offset) for t in
            report.translations} == {(remote, 0, topic_name, 44), (remote, 1, topic_name, 10)}
    assert report.synced == {group: 2}
    # Back on the source, the group reads exactly what it had not read on the target.
    got = resume_on_target(clusters["source"], group, topic_name, 2)
    for p, read_before in ((0, 45), (1, 10)):
        on_target = read_all(clusters["target"], remote, p)
        seen = {r.content() for r in on_target if r.offset < read_before}
        rest = [r.content() for r in on_target if r.offset >= read_before]
        assert [r.content() for r in got[p]] == rest
        assert not seen & {r.content() for r in got[p]}


def test_a_group_committed_on_an_empty_partition_keeps_its_offset_there_on_the_target(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given (MM2's testReplicationWithEmptyPartition): partition 1 is empty, and the group
    # committed 0 there; partition 0 holds records the group read half of
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(40)])
    flow = flow_config(tmp_path, clusters, topic_name, SYNC).enabled_flows[0]
    run_cycle(flow)
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 20, 1: 0})

    # when
    report = run(flow)

    # then: the empty partition translates to where the remote partition ends, so a consumer
    # failing over with auto.offset.reset=latest does not skip what arrives there first
    assert {(t.partition, t.target_offset, t.status) for t in report.translations} == {
        (0, 20, EXACT), (1, 0, EXACT)}
    remote = flow.remote_topic(topic_name)
    check = Consumer({"bootstrap.servers": clusters["target"], "group.id": group})
    try:
        committed = check.committed([TopicPartition(remote, p) for p in (0, 1)], timeout=30)
        assert [tp.offset for tp in committed] == [20, 0]
    finally:
        check.close()
    produce(clusters["source"], topic_name, [(None, b"first-on-1", 1)])
    run_cycle(flow, "later")
    assert_exact_failover(flow, clusters, topic_name, 2, group, {0: 20, 1: 0})
