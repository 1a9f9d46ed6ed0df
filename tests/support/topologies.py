"""Topologies of several clusters mirrored into one, on the session's clusters."""

from __future__ import annotations

import uuid
from pathlib import Path

from ferry.config import Config, load_config
from tests.support.kafka_data import create_topic, produce


def fan_in(clusters: dict[str, str], third: str, topic: str, tmp: Path, records: int
           ) -> tuple[Config, dict[str, str], str]:
    """Two edges (the source and the third cluster) with `topic` (2 partitions, `records`
    and 1.5 x `records` records), flows edge->central into the target cluster:
    (config, edge alias -> servers, central alias)."""
    e1, e2, central = aliases("edge1x", "edge2x", "central")
    edges = {e1: clusters["source"], e2: third}
    for i, bootstrap in enumerate(edges.values()):
        create_topic(bootstrap, topic, 2)
        produce(bootstrap, topic, [(f"k{n}".encode(), f"e{i}-{n}".encode(), n % 2)
                                   for n in range(records + records // 2 * i)])
    config = multi_config(tmp, {**edges, central: clusters["target"]},
                          {f"{e1}->{central}": topic, f"{e2}->{central}": topic},
                          QUIET)
    return config, edges, central


QUIET = "emit.heartbeats.enabled = false\nheartbeats.replication.enabled = false\n"


def multi_config(tmp: Path, bootstraps: dict[str, str], flows: dict[str, str],
                 extra: str = "") -> Config:
    """A config over `bootstraps` (alias -> servers) running `flows` (A->B -> topics)."""
    path = tmp / "mm2.properties"
    path.write_text(
        f"clusters = {', '.join(bootstraps)}\n"
        + "".join(f"{a}.bootstrap.servers = {b}\n" for a, b in bootstraps.items())
        + "".join(f"{f}.enabled = true\n{f}.topics = {t}\n" for f, t in flows.items())
        + "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
          "heartbeats.topic.replication.factor = 1\n"
          f"ferry.state.dir = {tmp / 'state'}\n" + extra)
    return load_config(path)


def aliases(*names: str) -> list[str]:
    """Aliases unique to the test (the brokers are shared)."""
    tag = uuid.uuid4().hex[:5]
    return [f"{n}{tag}" for n in names]
