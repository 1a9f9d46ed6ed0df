"""Metrics collected in the background: a scrape answers at once with the latest collection
and its age, whatever the clusters do (a cluster that is down makes a collection wait its
`ferry.kafka.retry.seconds`; Prometheus gives a scrape 10 s by default).

One collection runs at a time, `interval_s` after the previous one ended. A collection that
fails keeps the previous result (its age grows) and is logged; one that fails on the config
itself is served as that error, since no metric of a broken config can be trusted.

A collection can hang on a cluster that stopped answering after the collection asked it
whether it answers (a link that partitions mid-collection): it then waits out
`ferry.kafka.retry.seconds`, and the metrics served would say the flow is up all the while.
So, given `silent` (which clusters do not answer, asked at once and bounded), a collection
still running `interval_s` after it started has the clusters asked again, every
`interval_s`, and the served metrics say the silent ones down (`ferry_cluster_up` 0,
`ferry_flow_up` 0 for their flows) until the collection ends.

A collector nobody asked for `idle_s` pauses: an api-server process whose metrics were
scraped once (a person opening the endpoint, a scrape job since removed) does not read the
clusters every 15 s for the rest of its life. The next scrape gets the last collection at
once, its age saying how old it is, and the collection starts again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ferry.errors import ConfigError
from ferry.observe.metrics import DEFINITIONS, Family, Sample, mark_down

log = logging.getLogger("ferry.metrics")

REFRESH_SECONDS = 15.0
"""The default pause between two collections."""
IDLE_SECONDS = 600.0
"""How long a collector goes on without being asked before it pauses: well above any
scrape interval in use (Prometheus's default is 1 minute)."""


@dataclass(frozen=True)
class Collected:
    families: tuple[Family, ...]
    at: float
    """When the collection ended (`time.time()`)."""
    took_s: float
    served: tuple[Family, ...] | None = None
    """`families` with the clusters silent since said down (None: as collected)."""


class Collector:
    """Runs `collect` in a daemon thread, again `interval_s` after each run ends."""

    def __init__(self, collect: Callable[[], list[Family]],
                 interval_s: float = REFRESH_SECONDS,
                 clock: Callable[[], float] = time.time,
                 idle_s: float = IDLE_SECONDS,
                 silent: Callable[[], Collection[str]] | None = None) -> None:
        """`silent`: the aliases of the clusters that do not answer now (see the module)."""
        self._collect, self.interval_s, self._clock = collect, interval_s, clock
        self._silent = silent
        self.idle_s = idle_s
        self._asked = time.monotonic()
        self._paused = False
        self._latest: Collected | None = None
        self._config_error: ConfigError | None = None
        self._changed = threading.Condition()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def paused(self) -> bool:
        """Whether it paused for want of scrapes (`idle_s`)."""
        with self._changed:
            return self._paused

    def start(self) -> Collector:
        """Start collecting (once; later calls do nothing while it runs)."""
        with self._changed:
            self._paused = False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ferry-metrics",
                                                daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        """Whether it was stopped (for good: `start` does not collect again)."""
        return self._stopped.is_set()

    def latest(self, wait_s: float = 0.0) -> list[Family] | None:
        """The latest collection's metrics with its age and duration, waiting up to
        `wait_s` for a first one (None when there is none yet). Raises the ConfigError of a
        collection that found the config broken. Starts a collector that paused again."""
        self._asked = time.monotonic()
        if self.paused:
            self.start()
        with self._changed:
            self._changed.wait_for(lambda: self._latest is not None
                                   or self._config_error is not None, timeout=wait_s)
            if self._config_error is not None:
                raise self._config_error
            found = self._latest
        if found is None:
            return None
        age = max(0.0, self._clock() - found.at)
        families = found.families if found.served is None else found.served
        return [*families, _gauge("ferry_metrics_collected", 1),
                _gauge("ferry_metrics_age_seconds", round(age, 3)),
                _gauge("ferry_metrics_collect_seconds", round(found.took_s, 3))]

    def served(self, wait_s: float = 0.0) -> list[Family]:
        """What a scrape gets: `latest(wait_s)`, or, before the first collection ended,
        only `ferry_metrics_collected 0` (a scrape is answered, not failed, while the
        clusters are asked: a failed scrape drops every Ferry series at once)."""
        return self.latest(wait_s) or [_gauge("ferry_metrics_collected", 0)]

    def collect_once(self) -> None:
        """One collection, its outcome kept (the thread's step; also for a first result
        before serving)."""
        started = time.monotonic()
        try:
            families = self._collect()
        except ConfigError as exc:
            log.error("metrics not collected: %s", exc)
            with self._changed:
                self._config_error = exc
                self._changed.notify_all()
            return
        except Exception:  # the last good metrics stay served; their age tells
            log.exception("collecting metrics failed; serving the previous collection")
            return
        done = Collected(tuple(families), self._clock(), time.monotonic() - started)
        with self._changed:
            self._latest, self._config_error = done, None
            self._changed.notify_all()

    def _collect_watched(self) -> None:
        """`collect_once`; while it runs past `interval_s`, the silent clusters are said
        down in what is served, asked again every `interval_s`."""
        if self._silent is None:
            self.collect_once()
            return
        ended = threading.Event()

        def collect() -> None:
            try:
                self.collect_once()
            finally:
                ended.set()

        threading.Thread(target=collect, name="ferry-metrics-collect", daemon=True).start()
        while not ended.wait(self.interval_s) and not self._stopped.is_set():
            try:
                silent = set(self._silent())
            except Exception:  # asking is best effort; the collection's age still tells
                log.exception("asking the clusters whether they answer failed")
                continue
            with self._changed:
                found = self._latest
                if found is not None and not ended.is_set():
                    self._latest = Collected(found.families, found.at, found.took_s,
                                             tuple(mark_down(found.families, silent)))

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._collect_watched()
            if self._stopped.wait(self.interval_s):
                return
            with self._changed:
                idle = time.monotonic() - self._asked
                if idle > self.idle_s:
                    self._thread, self._paused = None, True
                    log.info("metrics not asked for in %.0f s: collection paused until the "
                             "next scrape", idle)
                    return


def _gauge(name: str, value: float) -> Family:
    kind, text = DEFINITIONS[name]
    return Family(name, kind, text, (Sample((), float(value)),))
