"""The Ferry page in the session's real Airflow (`tests.support.airflow_stack`: its
api-server with the Ferry plugin from the package's entry point, SimpleAuthManager), for
the browser and auth tests.

`airflow_server` readies the stack's two flows for these tests before any of them asks the
page or the metrics endpoint (whose background collection starts on the first scrape): the
`webui` flow mirrors a topic that then gets 7 records not mirrored yet, with two points of
lag history; the `unconnected` flow, into the same target from a cluster known only by a
connection Airflow does not have, has its heartbeats and an offset-map entry on the target,
as an earlier setup of it would have left them.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.config import Config, Flow
from ferry.core.heartbeats import Heartbeat, encode
from ferry.core.internal import offset_map_topic
from ferry.core.offsetmap import MapEntry, Segment
from ferry.core.offsetmap import encode as map_record
from ferry.steps.lag import record_lag
from tests.support.airflow_stack import SCRAPE_TOKEN, VIEWER, VIEWER_PASSWORD, Stack
from tests.support.kafka_data import create_topic, produce, run_cycle

USER, PASSWORD = VIEWER, VIEWER_PASSWORD


@dataclass(frozen=True)
class AirflowServer:
    url: str
    """http://127.0.0.1:<port>, no trailing slash."""
    config: Config
    """FERRY_CONFIG as the DAG file reads it: every flow the page shows."""
    flow: Flow
    """The flow whose lag the tests check."""
    topic: str
    """Its source topic: partition 0 has 7 records not mirrored yet, partition 1 none."""
    scrape_token: str
    log: Path
    """The api-server's log."""
    unconnected: str
    """The flow whose clusters' connections Airflow does not have (`A->B`)."""
    missing: str
    """The id of its source's connection."""

    def token(self) -> str:
        """A JWT for USER from the api-server's token endpoint (as a CLI or script would)."""
        request = urllib.request.Request(
            f"{self.url}/auth/token", method="POST",
            data=json.dumps({"username": USER, "password": PASSWORD}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            token: str = json.load(answer)["access_token"]
        return token


@pytest.fixture(scope="module")
def airflow_server(airflow_stack: Stack, clusters: dict[str, str]) -> AirflowServer:
    page = airflow_stack.flows["webui"]
    flow, topic = page.flow, page.topic
    create_topic(clusters["source"], topic, 2)
    produce(clusters["source"], topic, [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    record_lag(flow, "before-mirroring")  # the lag chart's first point: 20 + 20
    run_cycle(flow)
    produce(clusters["source"], topic, [(None, b"late", 0)] * 7)  # lag: 7 on partition 0
    record_lag(flow, "after-mirroring")
    # the unconnected flow's heartbeats reached the target, as an earlier setup of it
    # mirrored them
    far_flow = airflow_stack.config.flow(airflow_stack.unconnected)
    beats, now_ms = f"{far_flow.source}.heartbeats", int(time.time() * 1000)
    create_topic(clusters["target"], beats, 1)
    produce(clusters["target"], beats,
            [(*encode(Heartbeat(far_flow.source, flow.target, now_ms)), 0)])
    create_topic(clusters["target"], offset_map_topic(far_flow), 1)
    produce(clusters["target"], offset_map_topic(far_flow), [(*map_record(MapEntry(
        far_flow.name, "earlier", 0, "heartbeats", 0, beats, 0, 0, 1, (Segment(0, 0, 1),),
        now_ms)), 0)])
    return AirflowServer(airflow_stack.url, airflow_stack.config, flow, topic, SCRAPE_TOKEN,
                         airflow_stack.home / "api-server.log", airflow_stack.unconnected,
                         airflow_stack.missing_connection)
