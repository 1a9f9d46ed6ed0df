"""Read a cluster's shape and offsets, in batched admin calls (adapter).

Every call waits out transient broker states (`ferry.kafka.retry`) for the client's
`retry_seconds` (`ferry.kafka.retry.seconds`) before it fails with a Ferry error that names
the cluster, the call and the last error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from confluent_kafka.cimpl import NewPartitions, NewTopic

from ferry.config.clients import ClientConfig
from ferry.core.planner import TopicPartition as TP
from ferry.core.planner import Watermarks
from ferry.core.sync.batches import create_batches, first_step, growth_steps
from ferry.errors import FerryError, TerminalError
from ferry.kafka.errors import Needs, kafka_error
from ferry.kafka.limits import PER_CALL, chunks
from ferry.kafka.retry import Again, retrying, transient

log = logging.getLogger(__name__)
T = TypeVar("T")
K = TypeVar("K")
R = TypeVar("R")
TIMEOUT_S = 30.0
COMMITTED_SLICE_S = 5.0
OFFSETS_SLICE_S = 5.0
"""The longest one offsets request waits: librdkafka keeps a request to a leader that died
queued for that broker until it times out, while the cluster elects a new leader within
seconds (a SIGKILLed source leader held a cycle's plan for the whole 30 s). A request timed
out is asked again, its topic's metadata refreshed first, within the retry budget."""
MARGIN_S = 1.0  # a future's wait beyond its request timeout: librdkafka's own comes first
JUST_CREATED = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT)
"""Transient for a topic this Admin created within its retry budget: new metadata takes a
moment to reach every broker. For any other topic they are an error reported at once."""
STALE_LEADER = frozenset({*JUST_CREATED, KafkaError.NOT_LEADER_FOR_PARTITION,
                          KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_LEADER_EPOCH,
                          KafkaError.FENCED_LEADER_EPOCH})
"""Failures after which the topic's metadata is asked for again before the next attempt."""
_DENIED = (KafkaError.TOPIC_AUTHORIZATION_FAILED,)
_REFRESHED = 20  # topics whose metadata one failed attempt refreshes, at most
_REFRESH_S = 5.0
_ONE_BY_ONE = 8  # new topics whose leaders are asked about by name; more: one listing first
_UNLISTED_S = 2.0
"""How long a new topic may be missing from the cluster's listing before it is asked about
by name: a broker lists a topic only once the metadata of its creation reached it (a moment
on a busy cluster), and a topic the principal may not describe is never listed."""


def _topic(key: object) -> str | None:
    """The topic a request's key names (a `TP` or a topic name), if any."""
    return key.topic if isinstance(key, TP) else key if isinstance(key, str) else None


def _code(failure: BaseException) -> int | None:
    """The Kafka error code a failed request carries, if any."""
    error = failure.args[0] if isinstance(failure, KafkaException) and failure.args else None
    return error.code() if isinstance(error, KafkaError) else None


def _metadata_suspect(failure: BaseException) -> bool:
    """A failure after which the topic's cached metadata may be wrong: a stale leader, or no
    answer in time (its leader may have died, and the cache may still name it)."""
    return isinstance(failure, TimeoutError) or _code(failure) in (
        *STALE_LEADER, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)


class InvalidAnswer(Exception):
    """An answer without an error that is still no answer (e.g. an offset of -1001)."""


def _not_an_offset(info: Any) -> str | None:
    offset = int(info.offset)
    return None if offset >= 0 else (f"no valid offset (answered {offset}): the partition's "
                                     "leader is moving")


class _Refusals:
    """librdkafka's error callback: keeps a failed login or TLS handshake (calls only time
    out on them). Holds no reference to the client, so the client is freed with its Admin
    (a client left to interpreter shutdown can abort the process)."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                          KafkaError._SSL):
            self.error = err


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int


def _text(action: str | Callable[[], str]) -> str:
    return action() if callable(action) else action


class Admin:
    """One cluster's admin client, with errors that name the cluster.

    `timeout` bounds one attempt of a call; `retry_seconds` (default: the client's
    `ferry.kafka.retry.seconds`) bounds how long a call waits out transient states.
    """

    def __init__(self, client: ClientConfig, timeout: float = TIMEOUT_S, *,
                 retry_seconds: float | None = None) -> None:
        self.client = client
        self.cluster = client.cluster
        self.principal = client.principal
        self.timeout = timeout
        self.retry_seconds = client.retry_seconds if retry_seconds is None else retry_seconds
        self._refusals = _Refusals()
        self._admin: AdminClient | None = None
        self._created: dict[str, float] = {}  # topic -> when this Admin created it
        self._admin = self.raw  # now: a setting librdkafka refuses fails here, as it did

    @property
    def raw(self) -> AdminClient:
        """The librdkafka admin client. Issue requests on it inside the functions given to
        `call`, `batch` or `retry`, so that each attempt uses the current one (a failed
        coordinator call replaces it)."""
        if self._admin is None:
            conf: dict[str, Any] = self.client.confluent(log_level=3)
            conf["error_cb"] = self._refusals  # not a bound method: no cycle keeps the client
            self._admin = AdminClient(conf)
        return self._admin

    def _connection_refused(self, action: str, refusals: _Refusals | None = None
                            ) -> FerryError | None:
        err = (refusals or self._refusals).error
        if err is None:
            return None
        fix = ("check the CA (ssl.truststore.location) and the broker's certificate"
               if err.code() == KafkaError._SSL else
               "check the user name and password in sasl.jaas.config and sasl.mechanism")
        return TerminalError(f"cluster {self.cluster}: {action} failed: the brokers refused "
                             f"the connection of {self.principal}: {err.str()}; {fix}")

    def error(self, exc: BaseException, action: str, needs: Needs | None = None) -> FerryError:
        """A Ferry error for a failed call on this cluster, naming this client's principal."""
        return kafka_error(exc, self.cluster, action, principal=self.principal, needs=needs)

    def retry(self, attempt: Callable[[float], T], action: str | Callable[[], str],
              needs: Needs | None = None, *, coordinator: bool = False,
              also: Collection[int] = ()) -> T:
        """`attempt(timeout)`'s result, attempted again while it fails transiently
        (`ferry.kafka.retry.transient`, with the extra codes `also`) until `retry_seconds`
        are spent. `timeout` is what one attempt may take: the Admin's timeout, less near
        the end of the budget (at least 1 s).

        A failed login or TLS handshake ends the wait at once (TerminalError). Any other
        `KafkaException` becomes a Ferry error naming the cluster, `action` and, when
        access was denied, the right `needs`; other exceptions propagate unchanged.

        `coordinator`: the attempt talks to a group coordinator. After a failure the
        librdkafka client is then replaced: librdkafka (2.16) aborts the process when a
        broker answers a coordinator request that already timed out
        (confluentinc/librdkafka#4605), which is what a restarting broker does.
        """
        deadline = time.monotonic() + self.retry_seconds

        def once() -> T:
            timeout = max(1.0, min(self.timeout, deadline - time.monotonic()))
            try:
                answer = attempt(timeout)
            except TimeoutError:
                self._after_failure(action, coordinator)
                raise TimeoutError(f"no answer in {timeout:.0f}s") from None
            except Exception as exc:
                if transient(exc, also):
                    self._after_failure(action, coordinator)
                raise
            if self._admin is not None:
                self._admin.poll(0)  # forwards librdkafka's log lines (`ClientConfig.confluent`)
            return answer

        try:
            return retrying(once, cluster=self.cluster, action=action,
                            budget_s=self.retry_seconds, also=also)
        except KafkaException as exc:
            raise self.error(exc, _text(action), needs) from None

    def _after_failure(self, action: str | Callable[[], str], coordinator: bool) -> None:
        if self._admin is not None:
            self._admin.poll(0)  # serves error_cb
        refused = self._connection_refused(_text(action))
        if refused is not None:
            raise refused
        if coordinator:
            self._admin = None  # freed here, before the broker can answer the stale request

    def call(self, issue: Callable[[float], Future[T]], action: str,
             needs: Needs | None = None, *, coordinator: bool = False) -> T:
        """The result of the request `issue(timeout)` makes (on `raw`), made again while
        it fails transiently; see `retry`."""
        return self.retry(lambda timeout: issue(timeout).result(timeout=timeout + MARGIN_S),
                          action, needs, coordinator=coordinator)

    def wait(self, future: Future[T], action: str, needs: Needs | None = None) -> T:
        """The result of a request already made, without retries (a failed request cannot
        be made again from its future: prefer `call`). A failure becomes a Ferry error
        naming cluster and action."""
        try:
            return future.result(timeout=self.timeout)
        except KafkaException as exc:
            raise self.error(exc, action, needs) from None
        except TimeoutError:
            raise self.error(TimeoutError(f"no answer in {self.timeout:.0f}s"), action) \
                from None

    def batch(self, requests: Mapping[K, R],
              issue: Callable[[list[R], float], Mapping[Any, Future[Any]]],
              describe: Callable[[K], tuple[str, Needs | None]], *,
              key: Callable[[Any], K] = lambda k: k,
              handle: Callable[[K, KafkaException], Any] | None = None,
              invalid: Callable[[Any], str | None] | None = None,
              coordinator: bool = False) -> dict[K, Any]:
        """Each request's result, from one batched call: `issue(requests, timeout)` returns
        a future per request, whose key `key` maps back to the request's key. Requests
        that failed transiently are issued again (only those) until the budget is spent.

        `handle(key, exc)` may turn a failure into a result (returns it, not None) or into
        an exception of its own (raises it); otherwise a failure that is not transient
        becomes a Ferry error with `describe(key)`'s action and needed right.
        UNKNOWN_TOPIC_OR_PART is transient for a topic this Admin has just created, when
        `key` gives a `TP` or a topic name.

        `invalid(result)` may name why an answer without an error is still no answer (an
        offset that is not one): that request is issued again, its topic's metadata
        refreshed first, like a request that failed on a stale leader.
        """
        results: dict[K, Any] = {}
        pending = dict(requests)
        failing: list[tuple[K, BaseException]] = []

        def once(timeout: float) -> dict[K, Any]:
            failing.clear()
            todo = list(pending.values())
            issued: dict[Any, Future[Any]] = {}
            for chunk in chunks(todo, PER_CALL):
                issued.update(issue(chunk, timeout))
            for raw_key, future in issued.items():
                k = key(raw_key)
                try:
                    results[k] = future.result(timeout=timeout + MARGIN_S)
                except TimeoutError:
                    failing.append((k, TimeoutError(f"no answer in {timeout:.0f}s")))
                    continue
                except KafkaException as exc:
                    handled = handle(k, exc) if handle is not None else None
                    if handled is not None:
                        results[k] = handled
                    elif transient(exc, self._also(k)):
                        failing.append((k, exc))
                        continue
                    else:
                        action, needs = describe(k)
                        raise self.error(exc, action, needs) from None
                why = invalid(results[k]) if invalid is not None else None
                if why is not None:
                    del results[k]
                    failing.append((k, InvalidAnswer(why)))
                    continue
                pending.pop(k, None)
            if failing:
                self._refresh({t for k, exc in failing if (t := _topic(k)) is not None
                               and (_metadata_suspect(exc)
                                    or isinstance(exc, InvalidAnswer))})
                raise Again(failing[0][1])
            return results

        def action() -> str:
            return describe(failing[0][0])[0] if failing else describe(next(iter(requests)))[0]

        if not requests:
            return {}
        return self.retry(once, action, coordinator=coordinator)

    def just_created(self, topic: str) -> bool:
        """Whether this Admin created `topic` within its retry budget (metadata of a new
        topic takes a moment to reach every broker)."""
        created = self._created.get(topic)
        return created is not None and time.monotonic() - created < self.retry_seconds

    def _also(self, key: object) -> Collection[int]:
        topic = _topic(key)
        created = self._created.get(topic) if topic is not None else None
        fresh = created is not None and time.monotonic() - created < self.retry_seconds
        return JUST_CREATED if fresh else ()

    def settle(self, requests: Mapping[K, R],
               issue: Callable[[list[R], float], Mapping[Any, Future[Any]]],
               describe: Callable[[K], tuple[str, Needs | None]],
               special: Callable[[KafkaException], Exception | None] | None = None, *,
               key: Callable[[Any], K] = lambda k: k) -> None:
        """Make a batched change and wait for every part of it (see `batch`); a failure
        becomes `special`'s exception when it gives one, else a Ferry error with
        `describe(key)`'s action and needed right. Only idempotent changes belong here:
        a part that timed out may have been applied before it is made again."""

        def handle(_key: K, exc: KafkaException) -> None:
            replaced = special(exc) if special else None
            if replaced is not None:
                raise replaced from None

        self.batch(requests, issue, describe, key=key, handle=handle)

    def create_topics(self, topics: list[NewTopic], action: Callable[[str], str]) -> list[str]:
        """Create the topics that are missing; one that exists already is no error (another
        run may have made it, or an attempt of this call whose answer was lost).
        `action(name)` says what a failure was creating. Returns the names this call
        created, once each of their partitions has a leader. Requests stay within what one
        KRaft operation may apply (`ferry.core.sync.batches`): a topic too big for one is
        created with what fits, then grown to its count."""
        by_name = {t.topic: t for t in topics}
        created: list[str] = []
        later: dict[str, tuple[int, int]] = {}
        for names in create_batches([(t.topic, t.num_partitions, len(t.config or {}))
                                     for t in topics]):
            request = []
            for name in names:
                topic = by_name[name]
                first = first_step(topic.num_partitions, len(topic.config or {}))
                if first < topic.num_partitions:
                    later[name] = (first, topic.num_partitions)
                    topic = NewTopic(name, first, topic.replication_factor,
                                     config=dict(topic.config or {}))
                request.append(topic)
            created += self._create(request, action)
        grow = {name: counts for name, counts in later.items() if name in created}
        if grow:
            self.grow_topics(grow, lambda name: f"{action(name)} (adding its partitions)")
            self._await_leaders(list(grow))
        return created

    def _create(self, topics: list[NewTopic], action: Callable[[str], str]) -> list[str]:
        done = self.batch(
            {t.topic: t for t in topics},
            lambda todo, timeout: self.raw.create_topics(todo, request_timeout=timeout),
            lambda name: (action(name), f"CREATE on TOPIC {name}"),
            handle=lambda _name, exc: "exists" if exc.args and exc.args[0].code()
            == KafkaError.TOPIC_ALREADY_EXISTS else None)
        created = [t.topic for t in topics if done[t.topic] is None]
        now = time.monotonic()
        self._created.update((name, now) for name in done)
        self._await_leaders(created)
        return created

    def grow_topics(self, topics: Mapping[str, tuple[int, int]],
                    action: Callable[[str], str]) -> dict[str, bool]:
        """Grow each topic from its partition count to the wanted one, (from, to), at most
        what one KRaft operation may add at a time. Returns, per topic, whether it had its
        partitions already (an earlier attempt whose answer was lost, or another run)."""
        already = dict.fromkeys(topics, False)
        steps = {name: growth_steps(now, wanted) for name, (now, wanted) in topics.items()}
        current = {name: now for name, (now, _) in topics.items()}
        while any(steps.values()):
            due = {name: todo.pop(0) for name, todo in steps.items() if todo}
            for names in create_batches([(n, due[n] - current[n], 0) for n in due]):
                done = self.batch(
                    {n: NewPartitions(n, due[n]) for n in names},
                    lambda todo, timeout: self.raw.create_partitions(
                        todo, request_timeout=timeout),
                    lambda name: (action(name), f"ALTER on TOPIC {name}"),
                    handle=lambda _name, exc: "grown" if _grown(exc) else None)
                for name in names:
                    already[name] = already[name] or done[name] == "grown"
            current.update(due)
        return already

    def _await_leaders(self, topics: Collection[str]) -> None:
        """Wait until every partition of `topics` has a leader in this client's metadata:
        a topic's creation returns before its leaders are elected, and librdkafka's
        ListOffsets that first finds none kept failing (`_NOENT`) until the budget ran out.
        A topic whose metadata the principal may not read is not waited for. A topic found
        led is not asked about again; more than a few are asked about in one listing of the
        cluster's topics, not one request each; one missing from the listings is asked
        about by name only after `_UNLISTED_S` (not listed yet, or not describable)."""
        pending = set(topics)
        unlisted: dict[str, float] = {}  # since when a topic is missing from the listings

        def led(name: str, topic: Any) -> bool:
            if topic is None:
                return False
            if topic.error is not None:
                return bool(topic.error.code() in _DENIED)
            return bool(topic.partitions) and all(
                p.leader >= 0 for p in topic.partitions.values())

        def attempt(timeout: float) -> None:
            found: dict[str, Any] = {}
            ask = sorted(pending)
            if len(pending) > _ONE_BY_ONE:
                found = dict(self.metadata(min(_REFRESH_S, timeout)).topics)
                now = time.monotonic()
                # a listing leaves out what the broker does not know yet and what the
                # principal may not describe: the latter are asked about by name, later
                ask = [n for n in ask if n not in found
                       and now - unlisted.setdefault(n, now) >= _UNLISTED_S]
            for name in ask:
                found[name] = self.metadata(min(1.0, timeout), name).topics.get(name)
            pending.difference_update([n for n in pending if led(n, found.get(n))])
            if pending:
                raise Again(LookupError(f"{min(pending)}, created moments ago, has no leader "
                                        f"yet ({len(pending)} new topics wait for one)"))

        if pending:
            self.retry(attempt, "waiting for the leaders of new topics", "DESCRIBE on TOPIC *")

    def metadata(self, timeout: float, topic: str | None = None) -> Any:
        """The cluster's metadata (of `topic` only, if given) from `raw`, for use inside an
        attempt given to `retry`.

        The Metadata API is served by every Kafka broker, so librdkafka's local verdict
        `_UNSUPPORTED_FEATURE` on it means this connection's ApiVersions answer was
        incomplete, as a broker still starting gave one in the first cycle on a cluster just
        started. librdkafka keeps that answer for the connection's life: the client is
        replaced, so the next attempt connects and asks for the versions again, and the
        attempt is made again (`Again`) until the budget is spent."""
        try:
            if topic is None:
                return self.raw.list_topics(timeout=timeout)
            return self.raw.list_topics(topic=topic, timeout=timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError._UNSUPPORTED_FEATURE:
                self._admin = None
                raise Again(exc) from None
            raise

    def _refresh(self, topics: Collection[str]) -> None:
        """Ask for the metadata of `topics` again: after a request failed on a partition
        whose leader the client's cached metadata lacks or has wrong, librdkafka does not
        always refresh it by itself (a ListOffsets failing with `_NOENT` stayed so)."""
        for name in sorted(topics)[:_REFRESHED]:
            try:
                self.metadata(_REFRESH_S, name)
            except (KafkaException, Again):
                return  # the next attempt reports what is wrong

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic with its partition count (internal ones included). A topic whose
        metadata carries a transient error (no leader yet), or that this Admin has just
        created but the broker does not list yet, is waited for; one with another error is
        left out."""

        def attempt(timeout: float) -> dict[str, TopicInfo]:
            # in short slices: a refused login ends the wait at once
            meta = self.metadata(min(1.0, timeout))
            for t in meta.topics.values():
                if t.error is not None and transient(t.error):
                    raise Again(KafkaException(t.error))
            for name in self._created:
                if name not in meta.topics and self._also(name):
                    raise Again(LookupError(f"{name}, created moments ago, is not listed yet"))
            return {name: TopicInfo(name, len(t.partitions))
                    for name, t in meta.topics.items() if t.error is None}

        return self.retry(attempt, "listing topics", "DESCRIBE on TOPIC *")

    def watermarks(self, tps: Iterable[TP]) -> dict[TP, Watermarks]:
        """Log start and last stable offsets (read_committed end) of each partition."""
        tps = list(tps)
        if not tps:
            return {}
        low = self.log_starts(tps)
        high = self.last_stable(tps)
        return {tp: Watermarks(low[tp], high[tp]) for tp in tps}

    def log_starts(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Log start offsets."""
        tps = list(tps)
        return self._offsets(tps, OffsetSpec.earliest(), "reading log start offsets") \
            if tps else {}

    def last_stable(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Last stable offsets (read_committed ends)."""
        tps = list(tps)
        return self._offsets(tps, OffsetSpec.latest(), "reading last stable offsets") \
            if tps else {}

    def ends(self, tps: Iterable[TP]) -> dict[TP, int]:
        """High watermarks (read_uncommitted ends: open transactions' records included)."""
        tps = list(tps)
        return self._offsets(tps, OffsetSpec.latest(), "reading high watermarks",
                             IsolationLevel.READ_UNCOMMITTED) if tps else {}

    def offsets_at(self, tps: Iterable[TP], time_ms: int) -> dict[TP, int]:
        """The first offset of each partition whose record time is at or after `time_ms`,
        or its last stable offset when no record is that recent."""
        tps = list(tps)
        if not tps:
            return {}
        found = self._offsets(tps, OffsetSpec.for_timestamp(time_ms), "reading offsets by time",
                              by_time=True)
        missing = [tp for tp, offset in found.items() if offset < 0]
        ends = self._offsets(missing, OffsetSpec.latest(), "reading last stable offsets") \
            if missing else {}
        return {tp: ends.get(tp, offset) for tp, offset in found.items()}

    def _offsets(self, tps: list[TP], spec: Any, action: str,
                 isolation: Any = IsolationLevel.READ_COMMITTED, *,
                 by_time: bool = False) -> dict[TP, int]:
        """Offsets of `tps` by `spec`. A start or end is trusted only when it is a real
        offset: while a partition's leader moves, librdkafka may answer one with no error
        and -1001 (its invalid offset), which read as an end looks like a recreated topic.
        Such an answer is asked again from the current leader within the budget. (A time
        look-up's -1, no record that recent, is an answer.)"""
        found = self.batch(
            {tp: TopicPartition(tp.topic, tp.partition) for tp in tps},
            lambda todo, timeout: self.raw.list_offsets(
                dict.fromkeys(todo, spec), isolation_level=isolation,
                request_timeout=min(timeout, OFFSETS_SLICE_S)),
            lambda tp: (f"{action} of {tp.topic}", f"DESCRIBE on TOPIC {tp.topic}"),
            key=lambda k: TP(k.topic, k.partition),
            invalid=None if by_time else _not_an_offset)
        return {tp: int(info.offset) for tp, info in found.items()}

    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None,
                  stable: bool = True) -> dict[tuple[str, int], tuple[int, str]]:
        """(offset, commit metadata) of `group` on (topic, partition)s; those without a
        committed offset are left out. Default: every partition of every topic the cluster
        lists (offsets on topics deleted since are not returned; topics this principal may
        not see are skipped, as Kafka skips them). `stable`: waits out pending
        transactional commits of the group's offsets (a transaction a killed writer left
        open holds them until the transaction times out); else the offsets last committed.

        A partition the broker answers with an error is never taken for "no offset":
        a transient error is retried with the rest, any other raises naming the group, the
        topic and the partition.

        Read with a consumer of the group that never joins it: librdkafka's admin
        ListConsumerGroupOffsets crashes the process on a NOT_COORDINATOR answer
        (confluentinc/librdkafka#5040), which a restarting broker gives.
        """
        everything = tps is None
        pairs = ([(name, p) for name, info in sorted(self.topics().items())
                  for p in range(info.partitions)] if tps is None else list(tps))
        if not pairs:
            return {}
        needs = {"GROUP": f"DESCRIBE on GROUP {group}",
                 "TOPIC": "DESCRIBE on TOPIC (the group's topics)"}

        action = f"reading offsets of group {group}"
        refusals = _Refusals()
        conf: dict[str, Any] = self.client.confluent({
            "group.id": group, "enable.auto.commit": False,
            # librdkafka asks for stable offsets (OffsetFetch RequireStable) when reading
            # committed records only
            "isolation.level": "read_committed" if stable else "read_uncommitted",
            "log_level": 3})
        conf["error_cb"] = refusals
        consumer = Consumer(conf)

        def attempt(timeout: float) -> dict[tuple[str, int], tuple[int, str]]:
            answer: list[TopicPartition] = []
            try:  # in slices of 5 s at most: a refused login or a denial ends the wait soon
                for chunk in chunks(pairs, PER_CALL):
                    answer += consumer.committed([TopicPartition(t, p) for t, p in chunk],
                                                 timeout=min(timeout, COMMITTED_SLICE_S))
            except KafkaException:
                # The call only times out on a denied group; the consumer reports the denial
                # as an event (and a refused login to error_cb).
                event = consumer.poll(0)
                denied = event.error() if event is not None else None
                if denied is not None and not transient(denied):
                    raise self.error(KafkaException(denied), action, needs) from None
                refused = self._connection_refused(action, refusals)
                if refused is not None:
                    raise refused from None
                raise
            return self._offsets_of(group, answer, everything)

        try:
            return self.retry(attempt, action, needs)
        finally:
            consumer.close()

    def _offsets_of(self, group: str, answer: list[TopicPartition], everything: bool
                    ) -> dict[tuple[str, int], tuple[int, str]]:
        found: dict[tuple[str, int], tuple[int, str]] = {}
        for tp in answer:
            err = tp.error
            if err is None:
                if tp.offset >= 0:
                    found[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
                continue
            if transient(err):
                raise KafkaException(err)
            if everything and err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                              *JUST_CREATED):
                continue  # not visible to this principal, or deleted since it was listed
            raise self.error(KafkaException(err), f"reading the offset of group {group} on "
                             f"{tp.topic}-{tp.partition}",
                             {"GROUP": f"DESCRIBE on GROUP {group}",
                              "TOPIC": f"DESCRIBE on TOPIC {tp.topic}"})
        return found

    def group_offsets(self, group: str, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int],
                                                                              int]:
        """Committed offsets of `group` on (topic, partition)s; absent ones are left out."""
        return {k: offset for k, (offset, _) in self.committed(group, tps).items()}


def _grown(exc: KafkaException) -> bool:
    """The topic has the partitions asked for already: a retried request whose first
    attempt was applied (its answer lost), or another run. Kafka (KRaft) says
    INVALID_PARTITIONS: "Topic already has N partition(s)."."""
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_PARTITIONS \
        and "already has" in err.str()
