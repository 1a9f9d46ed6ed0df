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
import time
from collections.abc import Callable, Mapping

SILENT_S = 10.0
"""How long a wait goes without progress before it is said: a healthy target acknowledges
a batch in milliseconds, a broker's restart moves its leaders within seconds."""


class Silence:
    """One wait (`what`, on `cluster`) for `pending` things to be answered."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[logging.Logger],
                 cluster: str, what: str, extra: Mapping[str, object] | None = None,
                 after_s: float = SILENT_S, now: Callable[[], float] = time.monotonic
                 ) -> None:
        self.log, self.cluster, self.what, self.extra = log, cluster, what, dict(extra or {})
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
                "cluster %s: %s unanswered for %.0f s (%d outstanding): its brokers take "
                "the requests but do not answer (a stalled or partitioned network, a "
                "connection held half open, or a broker stuck); waiting on",
                self.cluster, self.what, at - self.since, pending, extra=self.extra)

    def ended(self, answered: bool) -> None:
        """The wait ended, every request `answered` (not timed out or refused): when it
        had been said, that is said too (at info). A wait that ended otherwise is the
        caller's to report, as its own error."""
        if self.said_at is not None and answered:
            self.log.info("cluster %s answers again: %s answered after %.0f s",
                          self.cluster, self.what, self.now() - self.started,
                          extra=self.extra)
        self.said_at = None
