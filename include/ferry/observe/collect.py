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

from ferry.config import Config, Flow
from ferry.errors import FerryError
from ferry.observe.snapshot import FlowSnapshot

if TYPE_CHECKING:
    from ferry.observe.metrics import Family
    from ferry.steps.heartbeats import Topology

log = logging.getLogger("ferry.metrics")

LAG_WINDOW = timedelta(hours=24)
"""How much lag history the page's chart shows."""


Resolve = Callable[[Collection[str]], Config]
"""The config with these clusters' connections looked up (`load_config(connections=...)`);
raises a FerryError when one of them is missing or broken."""


def collect(config: Config, lag_window: timedelta | None = LAG_WINDOW,
            resolve: Resolve | None = None,
            probe: Probe | None = None) -> list[FlowSnapshot]:
    """A snapshot of every enabled flow; `lag_window` None skips the lag history (metrics
    do not need it). With `resolve`, `config` need not have its connections looked up:
    the clusters of all flows into a target are looked up together, once; when that
    fails, each of those flows' on their own, so a missing one fails only the flows of its
    cluster.

    Every cluster is first asked once, all at once, whether it answers (`probe`, default
    `ferry.kafka.reach.unanswered`, bounded by its `PROBE_S`): a flow with a cluster that
    does not is snapshot with that error and its state rows at once, not after its reads
    have waited out `ferry.kafka.retry.seconds`, so a collection ends within seconds
    whatever the clusters do."""
    from ferry.kafka.reach import PROBE_S
    from ferry.steps.heartbeats import topology

    into: dict[str, list[Flow]] = {}
    for named in config.enabled_flows:
        into.setdefault(named.target, []).append(named)
    resolved: list[tuple[Flow, Config | FerryError, Flow | None]] = []
    groups: dict[str, Config | FerryError] = {}
    for target, flows in into.items():
        together = groups[target] = _resolved(config, flows, resolve)
        for named in flows:
            looked_up = together if isinstance(together, Config) \
                else _resolved(config, [named], resolve)
            try:
                if isinstance(looked_up, FerryError):
                    raise looked_up
                resolved.append((named, looked_up, looked_up.flow(named.name)))
            except (FerryError, KeyError) as exc:  # KeyError: the file changed meanwhile
                error = exc if isinstance(exc, FerryError) else FerryError(str(exc))
                resolved.append((named, error, None))  # a flow of None: `error` says why
    silent = _probed([flow for _, _, flow in resolved if flow is not None], probe)
    found: dict[str, FlowSnapshot] = {}
    seen: dict[str, Topology | FerryError] = {}
    for named, looked_up, flow in resolved:
        if isinstance(looked_up, FerryError) or flow is None:  # not looked up: why
            assert isinstance(looked_up, FerryError)
            log.warning("flow %s: %s", named.name, looked_up, extra={"flow": named.name})
            found[named.name] = snapshot(config, named, looked_up, lag_window)
            continue
        down = tuple(c for c in dict.fromkeys((flow.source, flow.target)) if c in silent)
        if down:
            why = "; ".join(f"cluster {c} did not answer within {PROBE_S:.0f}s ({silent[c]}): "
                            "is it reachable at its bootstrap.servers?" for c in down)
            found[named.name] = replace(snapshot(looked_up, flow, FerryError(why), lag_window),
                                        down=down)
            continue
        if flow.target not in seen:  # the target's heartbeats read once
            # Their arrival times are looked up in each upstream flow's offset map, which
            # needs that flow's connections: when the flows into the target could not be
            # looked up together, the others' heartbeats show without them.
            heartbeats = looked_up if looked_up is groups[flow.target] \
                else replace(looked_up, flows=(flow,))
            try:
                seen[flow.target] = topology(heartbeats, flow.target)
            except FerryError as exc:
                seen[flow.target] = exc
        found[named.name] = snapshot(looked_up, flow, seen[flow.target], lag_window)
    return [found[named.name] for named in config.enabled_flows]


Probe = Callable[[Flow, str], "str | None"]
"""Whether the cluster `alias` of a flow answers: None, or why not (`_probed`)."""


def _probed(flows: list[Flow], probe: Probe | None) -> dict[str, str]:
    """The clusters of `flows` that do not answer, each with why, all asked at once (a
    cluster once, through the first flow that names it)."""
    from concurrent.futures import ThreadPoolExecutor

    ask = probe or _unanswered
    clusters: dict[str, Flow] = {}
    for flow in flows:
        for alias in (flow.source, flow.target):
            clusters.setdefault(alias, flow)
    if not clusters:
        return {}
    with ThreadPoolExecutor(len(clusters), thread_name_prefix="ferry-probe") as pool:
        answers = dict(zip(clusters, pool.map(lambda a: ask(clusters[a], a), clusters),
                           strict=True))
    return {alias: why for alias, why in answers.items() if why is not None}


def silent_clusters(config: Config, probe: Probe | None = None) -> set[str]:
    """The clusters of `config`'s enabled flows that do not answer now, all asked at once,
    each bounded (`ferry.kafka.reach.PROBE_S`): what a collection that hangs on a cluster
    is watched with (`ferry.observe.collector`)."""
    return set(_probed(list(config.enabled_flows), probe))


def _unanswered(flow: Flow, alias: str) -> str | None:
    from ferry.kafka.reach import unanswered

    return unanswered(flow.source_admin if alias == flow.source else flow.target_admin)


def _resolved(config: Config, flows: list[Flow], resolve: Resolve | None
              ) -> Config | FerryError:
    """The config with the clusters of `flows` looked up (`config` itself without
    `resolve`), or why one of them cannot be."""
    if resolve is None:
        return config
    try:
        return resolve({a for f in flows for a in (f.source, f.target)})
    except FerryError as exc:
        return exc
    except KeyError as exc:  # the file changed meanwhile
        return FerryError(str(exc))


def snapshot(config: Config, flow: Flow, seen: Topology | FerryError | None = None,
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


def metric_families(config: Config, resolve: Resolve | None = None) -> list[Family]:
    """Every metric of the config's enabled flows, read now (`resolve`: see `collect`)."""
    from ferry.observe.metrics import families

    return families(collect(config, lag_window=None, resolve=resolve), time.time())
