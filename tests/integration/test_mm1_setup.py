"""A MirrorMaker 1 setup mirrors as it is, on real brokers: its command line (with its
consumer and producer properties) or a Strimzi `KafkaMirrorMaker` resource becomes one
flow `<setup name>->target` that keeps topic names, creates them with the target's default
replication factor (as MM1's auto-created ones were), copies every record exactly once,
and then only what is new."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ferry.config import load_config
from tests.support.kafka_data import assert_exact, create_topic, produce
from tests.support.mm1 import command_line, mm1_flow

pytestmark = [pytest.mark.integration, pytest.mark.spark]






def strimzi(folder: Path, clusters: dict[str, str], topic: str) -> Path:
    resource = folder / "mm1.yaml"
    resource.write_text(f"""apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker
metadata:
  name: legacy-{uuid.uuid4().hex[:6]}
spec:
  replicas: 1
  consumer:
    bootstrapServers: {clusters['source']}
    groupId: legacy-mirror
    numStreams: 2
  producer:
    bootstrapServers: {clusters['target']}
  include: "{topic}"
""")
    return resource


@pytest.mark.parametrize("form", [command_line, strimzi], ids=["command-line", "strimzi"])
def test_an_mm1_setup_mirrors_its_topics_under_their_own_names_exactly_once(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, connect_url: str,
    form: object
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 2)
                                             for i in range(300)])
    setup = form(tmp_path, clusters, topic_name)  # type: ignore[operator]
    flow = load_config(setup).flow(mm1_flow(setup))
    assert flow.remote_topic(topic_name) == topic_name and flow.replication_factor == -1

    def mirror() -> dict[str, object]:
        done = subprocess.run([sys.executable, "-m", "ferry.cli.main", "mirror", str(setup),
                               "--flow", flow.dag_id.removeprefix("ferry_"), "--master",
                               connect_url,
                               "--json"], capture_output=True, text=True, timeout=600,
                              check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(json.loads(done.stdout))

    first = mirror()

    assert first["idle"] is False
    assert_exact(flow, clusters, topic_name, 2)
    produce(clusters["source"], topic_name, [(b"late", b"record", 1)] * 5)
    second = mirror()
    assert second["idle"] is False
    assert_exact(flow, clusters, topic_name, 2)
    assert mirror()["idle"] is True
