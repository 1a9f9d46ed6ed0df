"""A wait on a cluster that goes unanswered, said once (pure).

A link that stalls or drops packets, or a firewall that holds a connection half open,
refuses nothing: the clients' requests go out and no answer comes, and librdkafka waits
out its own timeouts in silence. A lane waiting for the target's acknowledgements (its
delivery reports) would so say nothing for a minute. `Silence` notes how long such a wait
has gone without progress and says so once, in one warning naming the cluster, after
`SILENT_S`; once every answer came, it says that once too (info). Nothing in between
repeats it, and a wait that ends without its answers (timed out) is its caller's error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

SILENT_S = 10.0
"""How long a wait goes without progress before it is said: a healthy target acknowledges
a batch in milliseconds, a broker's restart moves its leaders within seconds."""


class Silence:
    """One wait (`what`, on `cluster`) for `pending` things to be answered."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[logging.Logger],
                 cluster: str, what: str, extra: Mapping[str, object] | None = None,
                 after_s: float = SILENT_S, now: Callable[[], float] = time.monotonic,
                 counted: bool = True) -> None:
        """`counted`: `pending` counts things (records) worth saying; else one call."""
        self.log, self.cluster, self.what, self.extra = log, cluster, what, dict(extra or {})
        self.counted = counted
        self.after_s, self.now = after_s, now
        self.since = now()
        self.pending: int | None = None
        self.said_at: float | None = None
        self.started = self.since

    def saw(self, pending: int) -> None:
        """`pending` things still unanswered now: fewer than before is progress."""
        at = self.now()
        if self.pending is None or pending < self.pending:
            self.since = at
        self.pending = pending
        if pending and self.said_at is None and at - self.since >= self.after_s:
            self.said_at = at
            self.log.warning(
                "cluster %s: %s: no answer for %.0f s%s: its brokers take the requests "
                "but do not answer (a stalled or partitioned network, a connection held "
                "half open, or a broker stuck); waiting on", self.cluster, self.what,
                at - self.since, f" ({pending} outstanding)" if self.counted else "",
                extra=self.extra)

    def ended(self, answered: bool) -> None:
        """The wait ended, every request `answered` (not timed out or refused): when it
        had been said, that is said too (at info). A wait that ended otherwise is the
        caller's to report, as its own error."""
        if self.said_at is not None and answered:
            self.log.info("cluster %s answers again: %s: answered after %.0f s",
                          self.cluster, self.what, self.now() - self.started,
                          extra=self.extra)
        self.said_at = None


class _Watched:
    """One blocking call under watch."""

    def __init__(self, silence: Silence) -> None:
        self.silence = silence
        self.answered = False


class Watch:
    """Blocking calls (a transaction's commit, a producer's initialisation) that may wait
    on an unanswering cluster for their whole timeout: each is said once when it has run
    `SILENT_S`, by one daemon thread for all of them (a call costs no thread of its own),
    and its answer once when it returns after that. The thread runs only while calls are
    watched: a watch of a writer that is done leaves none behind. Thread-safe."""

    def __init__(self, every_s: float = 1.0,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.now = every_s, now
        self._calls: set[_Watched] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextmanager
    def call(self, log: logging.Logger | logging.LoggerAdapter[logging.Logger], cluster: str,
             what: str, extra: Mapping[str, object] | None = None) -> Iterator[None]:
        """Watch the block, a call on `cluster` doing `what`."""
        watched = _Watched(Silence(log, cluster, what, extra, now=self.now, counted=False))
        with self._lock:
            self._calls.add(watched)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name="ferry silence watch")
                self._thread.start()
        try:
            yield
            watched.answered = True
        finally:
            with self._lock:
                self._calls.discard(watched)
                said = watched.silence.said_at is not None
            if said:
                watched.silence.ended(watched.answered)

    def _watch(self) -> None:
        while True:
            time.sleep(self.every_s)
            with self._lock:
                if not self._calls:  # the next call starts a thread again
                    self._thread = None
                    return
                for watched in self._calls:
                    watched.silence.saw(1)

    @property
    def watching(self) -> bool:
        """Whether its thread runs."""
        with self._lock:
            return self._thread is not None
