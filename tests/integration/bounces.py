"""Rolling restarts of the three-node test clusters (`replicated_clusters`): one node at a
time, stopped hard (SIGKILL, a crash) or clean (SIGTERM, a controlled shutdown), started
again on its data, and waited for until every partition is fully replicated again, as an
operator's rolling upgrade waits before the next node."""

from __future__ import annotations

import time
from pathlib import Path

from ferry.local import cluster
from ferry.local.probe import registered

FAST_FAILURE_DETECTION = {"broker.heartbeat.interval.ms": "500",
                          "broker.session.timeout.ms": "3000"}
"""Broker settings that let the controller fence a silent node after 3 s instead of 9 s,
so a rolling restart's steps take seconds, not tens of seconds."""


def bounce(root: str, alias: str, node_id: int, hard: bool, timeout: float = 120.0) -> float:
    """Stop node `node_id` of cluster `alias`, wait until the cluster has noticed (the node
    is gone from its metadata), start it again and wait until all three nodes are back and
    no partition is under-replicated; returns the seconds the node was away."""
    (state,) = [s for s in cluster.states_in(Path(root)) if s.alias == alias]
    started = time.monotonic()
    deadline = started + timeout
    state = cluster.stop_node(state, node_id, hard=hard)
    while registered(state.bootstrap) >= state.brokers:
        assert time.monotonic() < deadline, f"{alias} never noticed node {node_id} stopped"
        time.sleep(0.2)
    state = cluster.start_node(state, node_id)
    while (registered(state.bootstrap) < state.brokers
           or cluster.under_replicated(state.bootstrap) != 0):
        assert cluster.is_our_broker(state, node_id), f"{alias} node {node_id} exited"
        assert time.monotonic() < deadline, f"{alias} never fully replicated again"
        time.sleep(0.5)
    return time.monotonic() - started
