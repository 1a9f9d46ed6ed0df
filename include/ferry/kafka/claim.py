"""The writer slot of a target without transactions, claimed in Kafka (adapter).

A `ferry.delivery=at_least_once` target has no `init_transactions` to fence a second
writer of a partition. Its writers claim the slot instead: a static member
(`group.instance.id`) of the slot's claim group (`core.internal.claim_group`), a group of
its own per writer slot, whose only instance id is the slot's. Kafka's coordinator keeps
one member per instance id: a newer writer joining with it replaces the older one, whose
next commit to that group Kafka refuses (`FENCED_INSTANCE_ID`); the same rule as the
newest `init_transactions` winning.

The contract for a writer (a lane, a positions write):

- `take()` before reading the slot's positions: it returns once Kafka counts this writer
  as the slot's member (a commit made as that member was accepted).
- `check()` before each batch and before each position commit: a commit to the claim
  group as that member, answered by the coordinator. A writer that was replaced (or whose
  membership lapsed and came back under a new member id) stops with `ClaimLost` and
  commits nothing more. Between a check and the position commit after it there is one
  round trip in which a newer writer may take the slot; what it then reads is the position
  before ours, so the stretch between is copied twice, never lost (at least once).
- The records themselves are not fenced: records a replaced writer sent before its check
  failed stay on the target (counted as duplicates by the next run).

The group is joined through a subscription to the flow's offset-map topic (librdkafka
joins only for a topic that exists); whatever it is assigned is paused, so nothing is
fetched. A closed claim stays in the group until its session times out
(`SESSION_TIMEOUT_MS`): a newer writer replaces it at once meanwhile, without a rebalance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.core.internal import claim_group, offset_map_topic
from ferry.errors import FerryError, TransientError, WriterTaken
from ferry.kafka.errors import kafka_error
from ferry.kafka.retry import retrying

__all__ = ["ClaimLost", "WriterClaim"]

INSTANCE_ID = "writer"
"""The one instance id of a claim group (the group itself names the slot)."""
SESSION_TIMEOUT_MS = 10_000
"""How long a writer that died stays the slot's member (the brokers' minimum is 6 s by
default). A newer writer takes the slot at once regardless; this only bounds how long
the group is listed as active."""
JOIN_TIMEOUT_S = 60.0
"""How long `take()` waits for the coordinator (brokers delay a group's first join by
`group.initial.rebalance.delay.ms`, 3 s by default)."""
_LOST = frozenset({KafkaError.FENCED_INSTANCE_ID, KafkaError.UNKNOWN_MEMBER_ID,
                   KafkaError.ILLEGAL_GENERATION, KafkaError._FATAL})
_JOINING = frozenset({KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID,
                      KafkaError.ILLEGAL_GENERATION, KafkaError._NO_OFFSET})


class ClaimLost(WriterTaken):
    """A newer writer took the slot: this one stops and commits nothing more."""


def _keep_fatal(into: list[KafkaError]) -> Callable[[KafkaError], None]:
    """An error callback keeping the consumer's fatal errors (a replaced static member's
    is one) in `into`."""
    def keep(err: KafkaError) -> None:
        if err.fatal():
            into.append(err)
    return keep


class WriterClaim:
    """The claim of one writer slot (`txn_id`, the id the slot would have with
    transactions) of `flow`; `take()`, then `check()` before each commit, `close()`."""

    def __init__(self, flow: Flow, txn_id: str) -> None:
        self.flow, self.txn_id = flow, txn_id
        self.group = claim_group(flow, txn_id)
        self.member = ""
        self.fatals: list[KafkaError] = []
        conf: dict[str, Any] = flow.target_admin.confluent({
            "group.id": self.group, "group.instance.id": INSTANCE_ID,
            "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
            # The rebalance timeout too; a claim group has one member, so no rebalance
            # waits on it, and a writer busy in one long call keeps its claim.
            "max.poll.interval.ms": 86_400_000,
            "queued.max.messages.kbytes": 1, "auto.offset.reset": "latest",
            "log_level": 3})
        conf["error_cb"] = _keep_fatal(self.fatals)  # not a bound method: no cycle
        self.consumer = Consumer(conf)
        self.token = KTP(offset_map_topic(flow), 0, 0)

    def take(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Join the claim group as the slot's member, replacing any other writer of the
        slot (whose next `check()` fails); raises TransientError when the coordinator does
        not answer within `timeout_s`."""
        self.consumer.subscribe([self.token.topic])
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            self._serve(0.05)
            member = self.consumer.memberid() or ""
            if not member:  # not joined: a commit now would be a plain one
                continue
            try:
                self._commit()
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() not in _JOINING:
                    raise self._error(exc, f"claiming writer slot {self.txn_id}") from None
                last = err.str()
                continue
            self.member = member
            return
        raise TransientError(f"cluster {self.flow.target}: claiming writer slot {self.txn_id} "
                             f"(group {self.group}) took over {timeout_s:.0f} s ({last})")

    def check(self) -> None:
        """Raise ClaimLost unless this writer is still the slot's member, as the
        coordinator answers now (see the module for the one round trip after it)."""
        self._serve(0)
        member = self.consumer.memberid() or ""
        if self.fatals or member != self.member:
            raise ClaimLost(self._lost(self.fatals[0].str() if self.fatals else
                                       "its membership lapsed and was renewed"))
        try:
            retrying(self._commit, cluster=self.flow.target,
                     action=f"checking the claim on writer slot {self.txn_id}",
                     budget_s=self.flow.ferry.kafka_retry_seconds)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in _LOST or err.fatal():
                raise ClaimLost(self._lost(err.str())) from None
            raise self._error(exc, f"checking the claim on writer slot {self.txn_id}") from None

    def _lost(self, why: str) -> str:
        return (f"flow {self.flow.name}: writer slot {self.txn_id} was taken by a newer writer "
                "of the same partitions (another run of the flow, a backfill into its topic, "
                "a positions reset or an adoption), so this run stopped before committing "
                "another position; records it wrote past its last commit stay on the target "
                f"as duplicates (ferry.delivery=at_least_once) and the newer writer resumes "
                f"from that commit: {why}")

    def _error(self, exc: KafkaException, action: str) -> FerryError:
        return kafka_error(exc, self.flow.target, action,
                           principal=self.flow.target_admin.principal,
                           needs=f"READ on GROUP {self.group}")

    def _commit(self) -> None:
        """A commit to the claim group as its member: the coordinator refuses it unless this
        writer holds the slot."""
        self.consumer.commit(offsets=[self.token], asynchronous=False)

    def _serve(self, timeout_s: float) -> None:
        """Serve the group's callbacks; pause whatever the group assigned."""
        with suppress(KafkaException):  # a fatal error is kept by the error callback
            self.consumer.poll(timeout_s)
        with suppress(KafkaException):
            assigned = self.consumer.assignment()
            if assigned:
                self.consumer.pause(assigned)

    def close(self) -> None:
        """Leave; the coordinator keeps the member until its session times out."""
        with suppress(KafkaException, RuntimeError):
            self.consumer.close()
