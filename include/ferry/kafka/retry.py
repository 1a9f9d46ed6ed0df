"""Wait out Kafka's transient states in-process, as MirrorMaker 2 does.

A broker that restarts answers for a while with "coordinator loading", "not coordinator",
"not leader", or not at all; a leader election or a coordinator move does the same for
seconds. Such a state passes by itself, so a call that meets one is made again, with a
jittered exponential backoff (0.2 s doubling to 5 s), until a budget
(`ferry.kafka.retry.seconds`) is spent; only then does it fail, naming the cluster, the
call and the last error. Denied access, failed logins, fatal and abortable transaction
errors, and every error not known to pass are never retried.

`transient` is the classification (by error code, and by the text of the generic errors in
which librdkafka wraps a broker's answer); `retrying` is the loop. Both work on any
confluent-kafka call that raises `KafkaException` (admin futures, `Consumer.committed`,
`Producer.commit_transaction`, ...).
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Collection
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from ferry.errors import TransientError
from ferry.kafka.codes import NEVER_CODES, TRANSIENT_CODES
from ferry.kafka.errors import kafka_error

log = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_DELAY_S = 0.2
MAX_DELAY_S = 5.0


def _pattern(codes: Collection[int], *aliases: str) -> re.Pattern[str]:
    """The codes' names (`COORDINATOR_LOAD_IN_PROGRESS`, as a whole word, and `aliases`)
    and librdkafka's descriptions of them (`Broker: Coordinator load in progress`)."""
    names = sorted({re.escape(KafkaError(c).name()) for c in codes} | set(aliases))
    texts = sorted({re.escape(KafkaError(c).str()) for c in codes})
    return re.compile(r"(?<![A-Z_])(?:" + "|".join(names) + r")(?![A-Z_])|" + "|".join(texts))


_WRAPPED = _pattern(TRANSIENT_CODES, "NOT_LEADER_OR_FOLLOWER")  # code 6's name since Kafka 2.6


class Again(Exception):
    """Raise from a retried call to have it made again, as for a transient error: a state
    the caller knows passes (a partition of a batch still failing). `failure` is what the
    final error names if the budget runs out."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.failure = failure


class RetriesExhausted(TransientError):
    """A transient state outlasted the retry budget. The run may succeed later."""

    def __init__(self, message: str, *, cluster: str, action: str, attempts: int,
                 seconds: float, last: BaseException) -> None:
        super().__init__(message)
        self.cluster, self.action, self.attempts = cluster, action, attempts
        self.seconds, self.last = seconds, last


def _kafka_error(failure: BaseException | KafkaError) -> KafkaError | None:
    if isinstance(failure, KafkaError):
        return failure
    if isinstance(failure, KafkaException) and failure.args \
            and isinstance(failure.args[0], KafkaError):
        return failure.args[0]
    return None


def transient(failure: BaseException | KafkaError, also: Collection[int] = ()) -> bool:
    """True when `failure` is a state that passes by itself, so the same call may succeed
    if made again.

    A `KafkaError` (or a `KafkaException` carrying one) is transient when its code is in
    `TRANSIENT_CODES` or `also`, when its text names such a code (librdkafka wraps a
    broker's error in generic ones: "... worker failed to parse response: ... Broker:
    Coordinator load in progress"), or when librdkafka flags it retriable; never when its
    code is in `NEVER_CODES` or it is fatal or requires a transaction abort. A call that
    got no answer in time (`TimeoutError`) and `Again` are transient; any other exception
    is not.
    """
    if isinstance(failure, Again):
        return True
    err = _kafka_error(failure)
    if err is None:
        return isinstance(failure, TimeoutError)
    code = err.code()
    if code in NEVER_CODES or err.fatal() or err.txn_requires_abort():
        return False
    if code in TRANSIENT_CODES or code in also:
        return True
    if _WRAPPED.search(err.str() or "") is not None:
        return True
    return bool(err.retriable())


def backoff(attempt: int, jitter: float) -> float:
    """Seconds to wait after failed attempt number `attempt` (1, 2, ...): 0.2 s doubling
    up to 5 s, scaled by a factor between 0.5 and 1 from `jitter` in [0, 1) so that many
    clients retrying together spread out."""
    delay = min(MAX_DELAY_S, FIRST_DELAY_S * 2.0 ** min(attempt - 1, 16))
    return delay * (0.5 + jitter / 2)


def retrying(call: Callable[[], T], *, cluster: str, action: str | Callable[[], str],
             budget_s: float, also: Collection[int] = (),
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             jitter: Callable[[], float] = random.random) -> T:
    """`call()`'s result, making the call again while it fails with a transient error
    (`transient(exc, also)`), with `backoff` between attempts, until `budget_s` seconds
    have passed since the first attempt began.

    Any other exception propagates unchanged at once (so the caller still names the
    right a denied call lacked, or aborts a transaction). When the budget is spent,
    raises `RetriesExhausted` naming `cluster`, `action` (a text, or a function giving it
    for the last failure), the attempts, the seconds and the last error. The last attempt
    starts before the deadline, so the whole may overrun the budget by one call's own
    timeout. Retries are logged at WARNING on attempts 1, 2, 4, 8, ...
    """
    started = clock()
    deadline = started + budget_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as exc:  # classified below; anything else propagates unchanged
            if not transient(exc, also):
                raise
            failure = exc.failure if isinstance(exc, Again) else exc
            now = clock()
            what = action() if callable(action) else action
            if now >= deadline:
                raise _exhausted(failure, cluster, what, attempt, now - started,
                                 budget_s) from None
            delay = min(backoff(attempt, jitter()), deadline - now)
            if attempt & (attempt - 1) == 0:
                log.warning("cluster %s: %s: %s; a transient state, retrying (attempt %d, "
                            "%.0fs of ferry.kafka.retry.seconds=%g left)", cluster, what,
                            _describe(failure), attempt, deadline - now, budget_s)
            sleep(delay)


def _describe(failure: BaseException) -> str:
    err = _kafka_error(failure)
    return f"{err.str()} ({err.name()})" if err is not None else str(failure) or \
        type(failure).__name__


def _exhausted(failure: BaseException, cluster: str, action: str, attempts: int,
               seconds: float, budget_s: float) -> RetriesExhausted:
    text = str(kafka_error(failure, cluster, action))
    return RetriesExhausted(
        f"{text}; still failing after {attempts} attempt{'s' if attempts > 1 else ''} in "
        f"{seconds:.1f}s (ferry.kafka.retry.seconds={budget_s:g})",
        cluster=cluster, action=action, attempts=attempts, seconds=seconds, last=failure)
