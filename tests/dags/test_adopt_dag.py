"""`ferry_adopt`: `ferry adopt` from a trigger form, run with dag.test() on real clusters:
a dry run by default, then an executed adoption of an MM1-style group's progress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

from ferry.core.internal import offset_map_topic
from ferry.core.offsetmap import decode, lookup
from tests.support.dags import run_dag
from tests.support.groups import commit_group, positions
from tests.support.kafka_data import create_topic, flow_config, produce, read_all


def test_the_form_offers_each_flow_both_mirrors_and_a_dry_run_by_default(
        tmp_path: Path) -> None:
    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:9092\n"
                    "B.bootstrap.servers = b:9092\nA->B.enabled = true\n"
                    "emit.heartbeats.enabled = false\n")
    dag = build_dags(path=str(path))["ferry_adopt"]
    params = dag.params
    assert params.get_param("flow").schema["enum"] == ["A->B"]
    assert params.get_param("from").schema["enum"] == ["mm2", "mm1"]
    assert params["execute"] is False and params["settle_seconds"] == 65
    assert [t.task_id for t in dag.tasks] == ["adopt"] and dag.schedule is None


@pytest.mark.integration
def test_an_adoption_from_the_form_takes_over_an_mm1_groups_progress(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: an old mirror copied 100 records of 120 under the flow's names, and its group
    # committed 100 on the source
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    records = [(f"k{i}".encode(), f"v{i}".encode(), 0) for i in range(120)]
    create_topic(clusters["source"], topic_name, 1)
    create_topic(clusters["target"], remote, 1)
    produce(clusters["source"], topic_name, records)
    copied = read_all(clusters["source"], topic_name, 0)[:100]
    producer = Producer({"bootstrap.servers": clusters["target"]})
    for r in copied:
        producer.produce(remote, r.value, r.key, partition=0, timestamp=r.timestamp,
                         headers=list(r.headers))
    assert producer.flush(30) == 0
    group = f"{topic_name}-mm1"
    commit_group(clusters["source"], group, topic_name, {0: 100})
    form = {"flow": flow.name, "from": "mm1", "group": group, "settle_seconds": 1}

    # when: shown, then executed
    shown = run_dag(config.path, "ferry_adopt", form)
    assert shown["state"] == "success", shown["log"][-4000:]
    report = json.loads(shown["xcoms"]["adopt.return_value"])
    assert report["executed"] is False
    assert positions(clusters, flow, [(remote, 0)]) == [-1001]

    done = run_dag(config.path, "ferry_adopt", form | {"execute": True})

    # then
    assert done["state"] == "success", done["log"][-4000:]
    report = json.loads(done["xcoms"]["adopt.return_value"])
    (part,) = report["partitions"]
    assert (part["status"], part["position"], part["matched"], part["to_copy"]) == (
        "adopted", 100, 100, 20)
    assert "[ferry.adopt]" in done["log"]
    assert positions(clusters, flow, [(remote, 0)]) == [100]
    entries = [decode(r.value) for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    for offset in range(100):  # source offset n went to target offset n
        found = lookup(entries, offset)
        assert found is not None and found[1] == offset
