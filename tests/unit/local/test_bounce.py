"""One step of a rolling restart of local clusters (`bounce_node`): the next node may stop
only once the cluster says every partition is fully replicated again. Its waits, with the
node's processes and the cluster's answers stood in for (the restarts themselves run on
real brokers in tests/integration/test_rolling_bounce.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.local import probe, process
from ferry.local.layout import ClusterState, NodeState


def three_nodes() -> ClusterState:
    peers = tuple(NodeState(k, 9000 + 10 * k, 9001 + 10 * k) for k in (2, 3))
    return ClusterState("target", "/clusters/target", 9010, 9011, peers=peers)


@pytest.mark.parametrize("answers", [
    [None, 0],  # the metadata request timed out: nothing is known yet
    [None, None, 2, 0],
    [4, 0],
])
def test_a_restarted_node_counts_as_back_only_once_the_cluster_answers_none_under_replicated(
    monkeypatch: pytest.MonkeyPatch, answers: list[int | None]
) -> None:
    state = three_nodes()
    asked: list[int | None] = []
    stopped = {"node": False}

    def under_replicated(bootstrap: str, settings: object = None) -> int | None:
        asked.append(answers[len(asked)])
        return asked[-1]

    def stop_node(s: ClusterState, node_id: int, hard: bool = False) -> ClusterState:
        stopped["node"] = True
        return s

    def start_node(s: ClusterState, node_id: int) -> ClusterState:
        stopped["node"] = False
        return s

    monkeypatch.setattr(process, "states_in", lambda root: [state])
    monkeypatch.setattr(process, "stop_node", stop_node)
    monkeypatch.setattr(process, "start_node", start_node)
    monkeypatch.setattr(process, "is_our_broker", lambda s, node_id=1: True)
    monkeypatch.setattr(probe, "registered", lambda bootstrap: 2 if stopped["node"] else 3)
    monkeypatch.setattr(probe, "under_replicated", under_replicated)
    monkeypatch.setattr(process.time, "sleep", lambda seconds: None)

    process.bounce_node(Path("/clusters"), "target", 2, hard=True, timeout=60)

    assert asked == answers  # returned at the first 0, and only then
