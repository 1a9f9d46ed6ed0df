"""The plugin's metrics collectors belong to the app that serves them: one per config path
in an app, none shared between two apps, and stopped at the app's end."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ferry.airflow.plugin import Collectors, create_app
from ferry.observe.metrics import TOKEN_ENV, Family
from tests.support.monitoring import value_of

SCRAPE = {"Authorization": "Bearer scrape-token"}


class Counted:
    """A collection that records which config it collected."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str) -> list[Family]:
        self.paths.append(path)
        return []


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    path = str(tmp_path / "mm2.properties")
    monkeypatch.setenv(TOKEN_ENV, "scrape-token")
    monkeypatch.setenv("FERRY_CONFIG", path)
    return path


def test_two_apps_share_no_collector(config: str) -> None:
    # given: two apps, each with its own collectors
    first, second = Counted(), Counted()
    with TestClient(create_app(Collectors(first))) as one, \
            TestClient(create_app(Collectors(second))) as other:
        # when: only the first is scraped, twice
        assert one.get("/metrics", headers=SCRAPE).status_code == 200
        assert one.get("/metrics", headers=SCRAPE).status_code == 200

        # then: the first app collected once (its collector serves both scrapes); the
        # second started none
        assert first.paths == [config]
        assert second.paths == []

        assert other.get("/metrics", headers=SCRAPE).status_code == 200
        assert second.paths == [config]


def test_collectors_are_one_per_config_path_and_stop_at_the_apps_end(config: str) -> None:
    collectors = Collectors(Counted())
    with TestClient(create_app(collectors)) as client:
        assert client.get("/metrics", headers=SCRAPE).status_code == 200
        started = collectors.of(config)
        assert collectors.of(config) is started
        assert collectors.of(config + ".other") is not started
        assert not started.stopped

    assert started.stopped  # the app's lifespan ended: its collectors with it
    fresh = collectors.of(config)
    try:
        assert fresh is not started  # served again, an app starts a new one
    finally:
        collectors.close()


def test_a_cluster_silent_while_a_collection_hangs_is_scraped_down(config: str) -> None:
    # given: an app whose first collection says the flow up, and whose next one hangs on
    # its source, which stopped answering meanwhile
    import threading
    import time

    from ferry.observe.metrics import Sample

    release, collected = threading.Event(), [0]

    def collect(_path: str) -> list[Family]:
        collected[0] += 1
        if collected[0] > 1:
            release.wait(30)
        return [Family("ferry_flow_up", "gauge", "up",
                       (Sample((("source", "A"), ("target", "B")), 1.0),))]

    collectors = Collectors(collect, silent=lambda path: {"A"} if path == config else set(),
                            interval_s=0.05)
    try:
        with TestClient(create_app(collectors)) as client:
            # when: scraped while the collection hangs; then: the flow is served down
            deadline = time.monotonic() + 10
            while value_of(client.get("/metrics", headers=SCRAPE).text, "ferry_flow_up",
                           source="A", target="B") != 0:
                assert time.monotonic() < deadline, "the silent source was never served down"
                time.sleep(0.05)
    finally:
        release.set()
        collectors.close()


def test_the_clusters_that_refuse_connections_are_the_silent_ones(config: str) -> None:
    from ferry.airflow.plugin import _silent

    Path(config).write_text("clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\n"
                            "B.bootstrap.servers = 127.0.0.1:1\nA->B.enabled = true\n"
                            "A->B.topics = t\n")

    assert set(_silent(config)) == {"A", "B"}
