"""Metrics collected in the background: a scrape answers at once with the latest collection
and its age, whatever the clusters do (a cluster that is down makes a collection wait its
`ferry.kafka.retry.seconds`; Prometheus gives a scrape 10 s by default).

One collection runs at a time, `interval_s` after the previous one ended. A collection that
fails keeps the previous result (its age grows) and is logged; one that fails on the config
itself is served as that error, since no metric of a broken config can be trusted.

A collector nobody asked for `idle_s` pauses: an api-server process whose metrics were
scraped once (a person opening the endpoint, a scrape job since removed) does not read the
clusters every 15 s for the rest of its life. The next scrape gets the last collection at
once, its age saying how old it is, and the collection starts again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ferry.errors import ConfigError
from ferry.observe.metrics import DEFINITIONS, Family, Sample

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


class Collector:
    """Runs `collect` in a daemon thread, again `interval_s` after each run ends."""

    def __init__(self, collect: Callable[[], list[Family]],
                 interval_s: float = REFRESH_SECONDS,
                 clock: Callable[[], float] = time.time,
                 idle_s: float = IDLE_SECONDS) -> None:
        self._collect, self.interval_s, self._clock = collect, interval_s, clock
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
        return [*found.families, _gauge("ferry_metrics_collected", 1),
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

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.collect_once()
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
