"""Gather what the Ferry page and the metrics endpoint show (adapter: Kafka through
`ferry.observe.status`, the Delta state tables through delta-rs).

One flow's clusters being down, or their Airflow connections missing, does not hide the
others: its snapshot carries the error (and the metric `ferry_flow_up` 0), its Delta rows
are still shown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ferry.config import Flow, MirrorConfig
from ferry.errors import FerryError
from ferry.observe.snapshot import FlowSnapshot

if TYPE_CHECKING:
    from ferry.observe.metrics import Family
    from ferry.steps.heartbeats import Topology

log = logging.getLogger("ferry.metrics")

LAG_WINDOW = timedelta(hours=24)
"""How much lag history the page's chart shows."""


Resolve = Callable[[Collection[str]], MirrorConfig]
"""The config with these clusters' connections looked up (`load_config(connections=...)`);
raises a FerryError when one of them is missing or broken."""


def collect(config: MirrorConfig, lag_window: timedelta | None = LAG_WINDOW,
            resolve: Resolve | None = None) -> list[FlowSnapshot]:
    """A snapshot of every enabled flow; `lag_window` None skips the lag history (metrics
    do not need it). With `resolve`, `config` need not have its connections looked up:
    each flow's are, on their own, so a missing one fails only the flows of its cluster."""
    from ferry.steps.heartbeats import topology

    seen: dict[str, Topology | FerryError] = {}
    found = []
    for named in config.enabled_flows:
        flow_config, flow = config, named
        if resolve is not None:
            try:
                flow_config = resolve((named.source, named.target))
                flow = flow_config.flow(named.name)
            except (FerryError, KeyError) as exc:  # KeyError: the file changed meanwhile
                error = exc if isinstance(exc, FerryError) else FerryError(str(exc))
                log.warning("flow %s: %s", named.name, error, extra={"flow": named.name})
                found.append(snapshot(config, named, error, lag_window))
                continue
        if flow.target not in seen:  # each target's heartbeats read once
            try:
                seen[flow.target] = topology(
                    _into(config, flow_config, flow, resolve), flow.target)
            except FerryError as exc:
                seen[flow.target] = exc
        found.append(snapshot(flow_config, flow, seen[flow.target], lag_window))
    return found


def _into(config: MirrorConfig, flow_config: MirrorConfig, flow: Flow,
          resolve: Resolve | None) -> MirrorConfig:
    """The config to read `flow`'s target's heartbeats with: the arrival of each
    upstream cluster's heartbeats is looked up in its own flow's offset map, which needs
    that flow's connections. When one of them cannot be looked up, the flows into the
    target are left out but `flow`, so their heartbeats show without arrival times
    (instead of waiting on a cluster without a bootstrap address, at every refresh)."""
    if resolve is None:
        return flow_config
    into = {a for f in config.enabled_flows if f.target == flow.target
            for a in (f.source, f.target)}
    try:
        return resolve(into)
    except (FerryError, KeyError):
        return replace(flow_config, flows=(flow,))


def snapshot(config: MirrorConfig, flow: Flow, seen: Topology | FerryError | None = None,
             lag_window: timedelta | None = LAG_WINDOW) -> FlowSnapshot:
    """One flow: its status from the clusters (or the error that prevented it) and its
    rows of the state tables."""
    from ferry.core.tables import StatePaths
    from ferry.observe.status import flow_status
    from ferry.state import digest
    from ferry.state.reader import rows

    snap = FlowSnapshot(flow.name, flow.source, flow.target)
    try:
        if isinstance(seen, FerryError):
            raise seen
        snap.status = flow_status(config, flow, seen)
    except FerryError as exc:
        log.warning("flow %s: status unavailable: %s", flow.name, exc, extra={"flow": flow.name})
        snap.error = str(exc)
    paths = StatePaths(flow.ferry.state_dir)
    snap.runs = digest.recent_runs(paths.runs, flow.name)
    snap.copied = digest.copied_totals(paths.runs, flow.name)
    snap.checkpoints = digest.latest_checkpoints(paths.checkpoints, flow.name)
    snap.gaps = rows(paths.gaps, flow.name)
    snap.verify = rows(paths.verify, flow.name)
    if lag_window is not None:
        snap.lag = digest.lag_points(paths.lag, flow.name, datetime.now(UTC) - lag_window)
    topics = {p.topic for p in snap.status.partitions} if snap.status else set()
    topics |= {r["topic"] for r in snap.runs + snap.gaps + snap.verify}
    topics |= {topic for topic, _ in snap.copied}
    topics |= {r["source_topic"] for r in snap.checkpoints}
    snap.remote_topics = {t: flow.remote_topic(t) for t in sorted(topics)}
    return snap


def metric_families(config: MirrorConfig, resolve: Resolve | None = None) -> list[Family]:
    """Every metric of the config's enabled flows, read now (`resolve`: see `collect`)."""
    from ferry.observe.metrics import families

    return families(collect(config, lag_window=None, resolve=resolve), time.time())
