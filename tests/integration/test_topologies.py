"""Multi-cluster topologies on real brokers: active/active, fan-in, a chain with a cycle
cut through a third cluster, heartbeats and the topology they reveal (checked against
MM2's own Java client)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ferry.cli.main import main
from ferry.steps.heartbeats import emit, topology
from tests.support.kafka_data import assert_exact, create_topic, produce, read_all, run_cycle
from tests.support.topologies import QUIET, aliases, fan_in, multi_config

pytestmark = pytest.mark.integration
# No heartbeats written or mirrored: the brokers (and their `heartbeats` topics) are shared.






def topics_on(bootstrap: str, pattern: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    names = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return {t for t in names if re.fullmatch(pattern, t)}


def count(bootstrap: str, topic: str) -> int:
    return len(read_all(bootstrap, topic, 0))


def test_active_active_mirrors_both_ways_and_never_back(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    a, b = aliases("a", "b")
    local_a, local_b = f"{topic_name}-x", f"{topic_name}-y"
    create_topic(clusters["source"], local_a, 1)
    create_topic(clusters["target"], local_b, 1)
    # The filters accept the remote names too: only cycle prevention keeps them home.
    config = multi_config(tmp_path, {a: clusters["source"], b: clusters["target"]},
                          {f"{a}->{b}": f"{topic_name}-.*, {b}\\.{topic_name}-.*",
                           f"{b}->{a}": f"{topic_name}-.*, {a}\\.{topic_name}-.*"},
                          QUIET)
    forward, back = config.flow(f"{a}->{b}"), config.flow(f"{b}->{a}")

    for round_ in range(3):  # several cycles, new data on both sides each time
        produce(clusters["source"], local_a, [(None, f"a{round_}-{i}".encode(), 0)
                                              for i in range(20)])
        produce(clusters["target"], local_b, [(None, f"b{round_}-{i}".encode(), 0)
                                              for i in range(30)])
        run_cycle(forward, f"r{round_}")
        run_cycle(back, f"r{round_}")

    assert topics_on(clusters["source"], f".*{topic_name}.*") == {local_a, f"{b}.{local_b}"}
    assert topics_on(clusters["target"], f".*{topic_name}.*") == {local_b, f"{a}.{local_a}"}
    # Consumers on each side read local + remote topics: every record of both clusters.
    assert count(clusters["source"], local_a) + count(clusters["source"], f"{b}.{local_b}") \
        == 60 + 90
    assert count(clusters["target"], local_b) + count(clusters["target"], f"{a}.{local_a}") \
        == 90 + 60
    assert_exact(forward, clusters, local_a, 1)
    assert_exact(back, {"source": clusters["target"], "target": clusters["source"]},
                 local_b, 1)




def test_fan_in_aggregates_edges_into_one_central_cluster(
    clusters: dict[str, str], third_cluster: str, topic_name: str, tmp_path: Path
) -> None:
    config, edges, central = fan_in(clusters, third_cluster, topic_name, tmp_path, 40)
    e1, e2 = edges

    for edge in (e1, e2):
        run_cycle(config.flow(f"{edge}->{central}"))

    assert topics_on(clusters["target"], f".*{topic_name}") == {f"{e1}.{topic_name}",
                                                                f"{e2}.{topic_name}"}
    for edge, bootstrap in edges.items():
        assert_exact(config.flow(f"{edge}->{central}"),
                     {"source": bootstrap, "target": clusters["target"]}, topic_name, 2)


def test_a_chain_renames_hop_by_hop_cuts_the_cycle_and_shows_the_topology(
    clusters: dict[str, str], third_cluster: str, topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ferry.jars import kafka_jars, log4j_config

    a, b, c = aliases("a", "b", "c")
    servers = {a: clusters["source"], b: clusters["target"], c: third_cluster}
    create_topic(servers[a], topic_name, 1)
    produce(servers[a], topic_name, [(None, f"v{i}".encode(), 0) for i in range(25)])
    name = re.escape(topic_name)
    config = multi_config(tmp_path, servers, {
        f"{a}->{b}": name, f"{b}->{c}": f"{a}\\.{name}",
        f"{c}->{a}": f"{b}\\.{a}\\.{name}, {a}\\.{name}"})  # accepts it: the cycle cuts it

    for round_ in range(2):
        emit(list(config.flows))  # every pair's heartbeat, as the DAGs do
        for flow in ("{a}->{b}", "{b}->{c}", "{c}->{a}"):
            run_cycle(config.flow(flow.format(a=a, b=b, c=c)), f"r{round_}")

    assert count(servers[c], f"{b}.{a}.{topic_name}") == 25
    assert topics_on(servers[a], f".*{name}") == {topic_name}  # nothing came back
    seen = topology(config, c)
    seen.upstream = {k: v for k, v in seen.upstream.items() if k in (a, b, c)}  # (shared)
    assert seen.upstream == {b: 1, a: 2}
    assert main(["topology", config.path, "--cluster", c, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [u for u in shown["upstream"] if u["cluster"] in (a, b, c)] == [
        {"cluster": a, "hops": 2}, {"cluster": b, "hops": 1}]
    mine = [h for h in seen.heartbeats if h.source in (a, b, c)]
    assert {h.topic for h in mine} == {"heartbeats", f"{b}.heartbeats", f"{b}.{a}.heartbeats"}
    for beat in mine:
        assert 0 <= beat.age_s < 600
        if beat.topic == "heartbeats":  # written on C itself: no link to measure
            assert beat.latency_s is None
        else:  # end to end, from its writing on A (or B) to its commit on C
            assert beat.latency_s is not None and 0 <= beat.latency_s < 120
    # MM2's own client agrees.
    java = subprocess.run(
        ["java", f"-Dlog4j2.configurationFile={log4j_config()}", "-cp", f"{kafka_jars()}/*",
         str(Path(__file__).parent / "java" / "MirrorTopology.java"), servers[c]],
        capture_output=True, text=True, timeout=180, check=False)
    assert java.returncode == 0, java.stderr[-3000:]
    theirs = {line.split()[1]: int(line.split()[2]) for line in java.stdout.splitlines()
              if line.startswith("UPSTREAM ")}
    assert {k: v for k, v in theirs.items() if k in (a, b, c)} == seen.upstream
