"""Read a cluster's shape and offsets, in batched admin calls (adapter)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from confluent_kafka.cimpl import NewTopic

from ferry.config.clients import ClientConfig
from ferry.errors import FerryError, TerminalError
from ferry.kafka.errors import Needs, kafka_error
from ferry.planner import TopicPartition as TP
from ferry.planner import Watermarks

log = logging.getLogger(__name__)
T = TypeVar("T")
K = TypeVar("K")
TIMEOUT_S = 30.0


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


class Admin:
    """One cluster's admin client, with errors that name the cluster."""

    def __init__(self, client: ClientConfig, timeout: float = TIMEOUT_S) -> None:
        self.cluster = client.cluster
        self.principal = client.principal
        self.timeout = timeout
        self._refusals = _Refusals()
        conf: dict[str, Any] = client.confluent(log_level=3)
        conf["error_cb"] = self._refusals  # not a bound method: no cycle keeps the client
        self._admin = AdminClient(conf)

    def _connection_refused(self, action: str) -> FerryError | None:
        err = self._refusals.error
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

    def wait(self, future: Future[T], action: str, needs: Needs | None = None) -> T:
        """The future's result; a failure becomes a Ferry error naming cluster and action."""
        try:
            return future.result(timeout=self.timeout)
        except KafkaException as exc:
            raise self.error(exc, action, needs) from None
        except TimeoutError:
            raise self.error(TimeoutError(f"no answer in {self.timeout:.0f}s"), action) \
                from None

    def settle(self, futures: Mapping[K, Future[Any]],
               describe: Callable[[K], tuple[str, Needs | None]],
               special: Callable[[KafkaException], Exception | None] | None = None) -> None:
        """Wait for every future of a batched call; the first failure becomes `special`'s
        exception when it gives one, else a Ferry error with `describe(key)`'s action and
        needed right."""
        for key, future in futures.items():
            try:
                future.result(timeout=self.timeout)
            except KafkaException as exc:
                replaced = special(exc) if special else None
                if replaced is not None:
                    raise replaced from None
                action, needs = describe(key)
                raise self.error(exc, action, needs) from None

    def create_topics(self, topics: list[NewTopic], action: Callable[[str], str]) -> list[str]:
        """Create the topics that are missing; one that exists already is no error (another
        run may have made it). `action(name)` says what a failure was creating. Returns the
        names this call created."""
        if not topics:
            return []
        created: list[str] = []
        futures = self._admin.create_topics(topics, request_timeout=self.timeout)
        for name, future in futures.items():
            try:
                future.result(timeout=self.timeout)
                created.append(name)
            except KafkaException as exc:
                if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                raise self.error(exc, action(name), f"CREATE on TOPIC {name}") from None
        return created

    @property
    def raw(self) -> AdminClient:
        return self._admin

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic with its partition count (internal ones included)."""
        deadline = time.monotonic() + self.timeout
        while True:  # in short slices: a refused login ends the wait at once
            try:
                meta = self._admin.list_topics(timeout=min(1.0, self.timeout))
                break
            except KafkaException as exc:
                self._admin.poll(0)  # serves error_cb
                refused = self._connection_refused("listing topics")
                if refused is not None:
                    raise refused from None
                if time.monotonic() >= deadline:
                    raise self.error(exc, "listing topics", "DESCRIBE on TOPIC *") from None
        return {name: TopicInfo(name, len(t.partitions)) for name, t in meta.topics.items()
                if t.error is None}

    def watermarks(self, tps: Iterable[TP]) -> dict[TP, Watermarks]:
        """Log start and last stable offsets (read_committed end) of each partition."""
        tps = list(tps)
        if not tps:
            return {}
        low = self._offsets(tps, OffsetSpec.earliest(), "reading log start offsets")
        high = self._offsets(tps, OffsetSpec.latest(), "reading last stable offsets")
        return {tp: Watermarks(low[tp], high[tp]) for tp in tps}

    def offsets_at(self, tps: Iterable[TP], time_ms: int) -> dict[TP, int]:
        """The first offset of each partition whose record time is at or after `time_ms`,
        or its last stable offset when no record is that recent."""
        tps = list(tps)
        if not tps:
            return {}
        found = self._offsets(tps, OffsetSpec.for_timestamp(time_ms), "reading offsets by time")
        missing = [tp for tp, offset in found.items() if offset < 0]
        ends = self._offsets(missing, OffsetSpec.latest(), "reading last stable offsets") \
            if missing else {}
        return {tp: ends.get(tp, offset) for tp, offset in found.items()}

    def _offsets(self, tps: list[TP], spec: Any, action: str) -> dict[TP, int]:
        request = {TopicPartition(tp.topic, tp.partition): spec for tp in tps}
        futures = self._admin.list_offsets(request,
                                           isolation_level=IsolationLevel.READ_COMMITTED,
                                           request_timeout=self.timeout)
        return {TP(k.topic, k.partition): int(self.wait(
            f, f"{action} of {k.topic}", f"DESCRIBE on TOPIC {k.topic}").offset)
                for k, f in futures.items()}

    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None
                  ) -> dict[tuple[str, int], tuple[int, str]]:
        """(offset, commit metadata) of `group` on (topic, partition)s (default: all it
        committed); absent ones are left out. Stable offsets only (waits out pending
        transactional commits)."""
        parts = None if tps is None else [TopicPartition(t, p) for t, p in tps]
        if parts is not None and not parts:  # the client refuses an empty list
            return {}
        request = [ConsumerGroupTopicPartitions(group, parts)]
        futures = self._admin.list_consumer_group_offsets(request, require_stable=True,
                                                          request_timeout=self.timeout)
        result = self.wait(futures[group], f"reading offsets of group {group}",
                           {"GROUP": f"DESCRIBE on GROUP {group}",
                            "TOPIC": "DESCRIBE on TOPIC (the group's topics)"})
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
                for tp in result.topic_partitions if tp.offset >= 0}

    def group_offsets(self, group: str, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int],
                                                                              int]:
        """Committed offsets of `group` on (topic, partition)s; absent ones are left out."""
        return {k: offset for k, (offset, _) in self.committed(group, tps).items()}
