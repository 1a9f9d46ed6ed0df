"""`ferry verify` compares source and target record by record through the offset map and
names what differs; results land in the Delta `verify` table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ferry.cli.main import main
from ferry.core.tables import StatePaths
from ferry.core.verify import ALTERED, MISSING
from ferry.state.reader import rows
from ferry.steps.verify import verify
from tests.support.kafka_data import create_topic, flow_config, produce, read_all, run_cycle

pytestmark = pytest.mark.integration


def test_a_faithful_mirror_verifies_clean(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None if i % 7 == 0 else f"k{i}".encode(),
                                             None if i % 9 == 0 else f"v{i}".encode(), i % 2)
                                            for i in range(120)])
    config = flow_config(tmp_path, clusters, topic_name)
    run_cycle(config.enabled_flows[0])

    code = main(["verify", config.path, "--flow", config.enabled_flows[0].name, "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] is True
    assert sum(p["checked"] for p in report["partitions"]) == 120


def test_an_altered_and_a_missing_target_record_are_named(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), 0)
                                             for i in range(30)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    run_cycle(flow)
    remote = flow.remote_topic(topic_name)
    # Rewrite the remote topic by hand: the same records, except offset 12's value...
    originals = read_all(clusters["target"], remote, 0)
    admin = AdminClient({"bootstrap.servers": clusters["target"]})
    admin.delete_topics([remote])[remote].result(timeout=30)
    while remote in admin.list_topics(timeout=10).topics:
        pass
    create_topic(clusters["target"], remote, 1)
    producer = Producer({"bootstrap.servers": clusters["target"], "enable.idempotence": True})
    for r in originals:
        producer.produce(remote, b"tampered" if r.offset == 12 else r.value, r.key,
                         partition=0, timestamp=r.timestamp, headers=list(r.headers))
    assert producer.flush(30) == 0
    # ...and the first 3 records deleted.
    admin.delete_records([TopicPartition(remote, 0, 3)])[TopicPartition(remote, 0, 3)] \
        .result(timeout=30)

    (check,) = verify(flow)

    assert not check.ok and check.checked == 30
    assert [(m.kind, m.source_offset, m.target_offset, m.records)
            for m in check.mismatches] == [(MISSING, 0, 0, 3), (ALTERED, 12, 12, 1)]
    assert f"missing {topic_name}-0@0..2 -> {remote}-0@0..2" in check.text(flow)
    assert f"altered {topic_name}-0@12 -> {remote}-0@12" in check.text(flow)
    (row,) = rows(StatePaths(flow.ferry.state_dir).verify, flow.name)
    assert (row["outcome"], row["altered"], row["missing"]) == ("mismatch", 1, 3)
    # and the command says so with its own exit code (1 is a check that failed)
    assert main(["verify", config.path, "--flow", flow.name]) == 3


def test_a_folded_offset_map_verifies_clean_answers_as_before_and_records_on(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ferry.core.retention import CompactionPolicy
    from ferry.runtime.recording import record_offset_map, settle_entries
    from ferry.state import writer
    from ferry.state.maintain import maintain_table
    from ferry.steps.lookup import find

    def cycle(run: str) -> None:  # a cycle, then its Delta rows as a recorder writes them
        run_cycle(flow, run)
        settle_entries(flow, 10)
        record_offset_map(writer.append, flow, StatePaths(flow.ferry.state_dir))

    # given: two cycles of small transactions (an entry per 10 records, Ferry's commit
    # marker after each on the target)
    create_topic(clusters["source"], topic_name, 2)
    config = flow_config(tmp_path, clusters, topic_name, "ferry.transaction.max.records = 10\n")
    flow = config.enabled_flows[0]
    for batch in range(2):
        produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{batch}-{i}".encode(),
                                                 i % 2) for i in range(100)])
        cycle(f"run-{batch}")
    path = StatePaths(flow.ferry.state_dir).offset_map
    asked = [(p, o) for p in (0, 1) for o in range(0, 102, 3)]  # records, the end, past it
    before = {(p, o): find(flow, topic_name, p, o).to_json() for p, o in asked}
    assert len(rows(path, flow.name)) == 20

    # when: maintenance folds every entry (settled at once here)
    report = maintain_table(path, "offset_map", 168, policy=CompactionPolicy(fold_after_s=0))

    # then: a row per run and partition; every look-up answers as before; verify is clean
    assert [(f.rows_before, f.rows_after) for f in report.folded] == [(20, 4)]
    assert len(rows(path, flow.name)) == 4
    assert {(p, o): find(flow, topic_name, p, o).to_json() for p, o in asked} == before
    assert main(["verify", config.path, "--flow", flow.name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    # and the next cycle records its entries beside the folded rows
    produce(clusters["source"], topic_name, [(b"k", b"after", p) for p in (0, 1)])
    cycle("run-after")
    assert len(rows(path, flow.name)) == 6
    assert main(["verify", config.path, "--flow", flow.name, "--json"]) == 0
    assert sum(p["checked"] for p in json.loads(capsys.readouterr().out)["partitions"]) == 202
