"""Kafka's transient states are waited out, in-process and within a budget: which errors
pass by themselves, how long Ferry waits between attempts, and what it says when the
budget runs out. Pure: real KafkaError objects, a fake clock."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from ferry.config.clients import RETRY_SECONDS, ClientConfig
from ferry.config.ferry_keys import BY_NAME
from ferry.errors import TransientError
from ferry.kafka.retry import (
    MAX_DELAY_S,
    Again,
    RetriesExhausted,
    backoff,
    retrying,
    transient,
)
from tests.unit.conftest import BASE, Loader

WRAPPED_LOADING = ("LISTCONSUMERGROUPOFFSETS worker failed to parse response: "
                   "ListConsumerGroupOffsetsResponse response failure: Broker: Coordinator load "
                   "in progress")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), True),
        (KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE), True),
        (KafkaError(KafkaError.NOT_COORDINATOR), True),
        (KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION), True),
        (KafkaError(KafkaError.LEADER_NOT_AVAILABLE), True),
        (KafkaError(KafkaError.UNKNOWN_LEADER_EPOCH), True),
        (KafkaError(KafkaError.FENCED_LEADER_EPOCH), True),
        (KafkaError(KafkaError.NETWORK_EXCEPTION), True),
        (KafkaError(KafkaError.REQUEST_TIMED_OUT), True),
        (KafkaError(KafkaError._TRANSPORT), True),
        (KafkaError(KafkaError._ALL_BROKERS_DOWN), True),
        (KafkaError(KafkaError._TIMED_OUT), True),
        (KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT), True),
        (KafkaError(KafkaError._DESTROY_BROKER), True),
        (KafkaError(KafkaError._NODE_UPDATE), True),
        (KafkaError(KafkaError._DESTROY), False),
        (KafkaError(KafkaError.OFFSET_NOT_AVAILABLE), True),
        (KafkaError(KafkaError.KAFKA_STORAGE_ERROR), True),
        (KafkaError(KafkaError.THROTTLING_QUOTA_EXCEEDED), True),
        (KafkaError(KafkaError._FAIL, WRAPPED_LOADING), True),
        (KafkaError(KafkaError.UNKNOWN, "reading offsets of group __ferry-positions.source "
                                        "failed: ... (COORDINATOR_LOAD_IN_PROGRESS)"), True),
        (KafkaError(KafkaError._FAIL, "partition 3: NOT_LEADER_OR_FOLLOWER"), True),
        (KafkaError(KafkaError._FAIL, "something odd", retriable=True), True),
        (KafkaError(KafkaError._FAIL, "delivery failed: _MSG_TIMED_OUT"), False),
        (KafkaError(KafkaError._FAIL, "something odd"), False),
        (KafkaError(KafkaError._MSG_TIMED_OUT), False),
        (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), False),
        (KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Not coordinator"), False),
        (KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, retriable=True), False),
        (KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), False),
        (KafkaError(KafkaError._AUTHENTICATION), False),
        (KafkaError(KafkaError._SSL), False),
        (KafkaError(KafkaError.PRODUCER_FENCED), False),
        (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, fatal=True), False),
        (KafkaError(KafkaError.NOT_COORDINATOR, txn_requires_abort=True), False),
        (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), False),
        (KafkaError(KafkaError.INVALID_CONFIG), False),
    ],
    ids=["coordinator-loading", "coordinator-not-available", "not-coordinator",
         "not-leader", "leader-not-available", "leader-epoch-not-yet-known",
         "leader-epoch-newer-than-the-clients", "network", "request-timed-out", "transport",
         "all-brokers-down", "local-timeout", "unstable-offsets",
         "broker-left-the-metadata-mid-request", "broker-address-changed-mid-request",
         "client-closing",
         "new-leader-high-watermark-not-caught-up", "replica-log-dir-failed", "throttled",
         "wrapped-loading-text",
         "wrapped-loading-name", "wrapped-not-leader-or-follower", "flagged-retriable",
         "other-name-not-a-substring", "generic", "message-timed-out", "topic-denied",
         "denied-whatever-its-text", "denied-whatever-its-flag", "login-failed",
         "authentication", "tls", "fenced", "fatal", "abortable", "unknown-topic",
         "invalid-config"],
)
def test_transient_states_are_told_by_code_text_and_flags(error: KafkaError,
                                                          expected: bool) -> None:
    assert transient(error) is expected
    assert transient(KafkaException(error)) is expected


@pytest.mark.parametrize(
    ("failure", "expected"),
    [(TimeoutError("no answer in 30s"), True), (Again(ValueError("partition 2 pending")), True),
     (ValueError("a bug"), False), (TransientError("already a Ferry error"), False)],
    ids=["no-answer-in-time", "again", "other-exception", "ferry-error"],
)
def test_only_kafka_failures_timeouts_and_again_are_transient(failure: Exception,
                                                              expected: bool) -> None:
    assert transient(failure) is expected


def test_a_missing_topic_is_transient_only_when_the_caller_just_created_it() -> None:
    missing = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))

    assert not transient(missing)
    assert transient(missing, also=(KafkaError.UNKNOWN_TOPIC_OR_PART,))


@pytest.mark.parametrize(
    ("attempt", "shortest", "longest"),
    [(1, 0.1, 0.2), (2, 0.2, 0.4), (3, 0.4, 0.8), (5, 1.6, 3.2), (6, 2.5, 5.0),
     (30, 2.5, 5.0), (10_000, 2.5, 5.0)],
    ids=["first", "second", "third", "fifth", "capped", "long-outage", "huge-attempt"],
)
def test_backoff_doubles_from_a_fifth_of_a_second_to_five_seconds_with_jitter(
    attempt: int, shortest: float, longest: float
) -> None:
    assert backoff(attempt, 0.0) == pytest.approx(shortest)
    assert backoff(attempt, 0.999999) == pytest.approx(longest, rel=1e-5)


class FakeTime:
    """A clock that moves only when the code under test sleeps or makes a call."""

    def __init__(self, call_seconds: float = 0.0) -> None:
        self.now = 1000.0
        self.call_seconds = call_seconds
        self.sleeps: list[float] = []
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds

    def failing(self, *failures: BaseException | None, result: str = "done"
                ) -> Callable[[], str]:
        """A call that raises `failures` in turn (the last one forever), or returns `result`
        once they are used up when the last is None."""
        left = list(failures)

        def call() -> str:
            self.calls += 1
            self.now += self.call_seconds
            failure = left.pop(0) if len(left) > 1 else left[0]
            if failure is None:
                return result
            raise failure

        return call


LOADING = KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))


def test_a_transient_state_is_waited_out_and_the_call_returns_its_result() -> None:
    # given a coordinator that answers "loading" three times, then the offsets
    fake = FakeTime()
    call = fake.failing(LOADING, LOADING, LOADING, None, result="offsets")

    # when
    result = retrying(call, cluster="dr-site", action="reading offsets of group g",
                      budget_s=120, clock=fake.clock, sleep=fake.sleep, jitter=lambda: 0.5)

    # then
    assert result == "offsets"
    assert fake.calls == 4
    assert fake.sleeps == pytest.approx([0.15, 0.3, 0.6])


def test_the_budget_bounds_the_wait_and_the_error_names_cluster_action_and_last_error() -> None:
    # given a cluster that never answers; each attempt takes a second
    fake = FakeTime(call_seconds=1.0)
    call = fake.failing(KafkaException(KafkaError(KafkaError._TRANSPORT)))

    # when
    with pytest.raises(RetriesExhausted) as err:
        retrying(call, cluster="dr-site", action="listing topics", budget_s=20,
                 clock=fake.clock, sleep=fake.sleep, jitter=lambda: 0.999)

    # then: it gave up once the budget was spent, never sleeping past it
    elapsed = fake.now - 1000.0
    assert 20 <= elapsed <= 20 + fake.call_seconds
    assert sum(fake.sleeps) <= 20
    assert max(fake.sleeps) <= MAX_DELAY_S
    message = str(err.value)
    assert message.startswith("cluster dr-site: listing topics failed: Local: Broker transport "
                              "failure (_TRANSPORT); is the cluster reachable at its "
                              "bootstrap.servers?")
    assert f"still failing after {fake.calls} attempts in {elapsed:.1f}s" in message
    assert "ferry.kafka.retry.seconds=20" in message
    assert isinstance(err.value, TransientError)
    assert (err.value.cluster, err.value.action, err.value.attempts) == (
        "dr-site", "listing topics", fake.calls)
    assert err.value.last.args[0].code() == KafkaError._TRANSPORT


def test_a_lasting_error_is_raised_at_once_and_unchanged() -> None:
    fake = FakeTime()
    denied = KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    call = fake.failing(denied)

    with pytest.raises(KafkaException) as err:
        retrying(call, cluster="dr-site", action="reading offsets of group g", budget_s=120,
                 clock=fake.clock, sleep=fake.sleep)

    assert err.value is denied
    assert fake.calls == 1
    assert fake.sleeps == []


def test_a_lasting_error_after_transient_ones_ends_the_wait() -> None:
    fake = FakeTime()
    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    call = fake.failing(LOADING, LOADING, denied)

    with pytest.raises(KafkaException) as err:
        retrying(call, cluster="dr-site", action="a", budget_s=120, clock=fake.clock,
                 sleep=fake.sleep)

    assert err.value is denied
    assert fake.calls == 3


def test_again_retries_and_the_final_error_names_its_failure_and_the_last_action() -> None:
    fake = FakeTime(call_seconds=1.0)
    pending = KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    call = fake.failing(Again(pending))

    with pytest.raises(RetriesExhausted) as err:
        retrying(call, cluster="dr-site", action=lambda: f"reading batch {fake.calls}",
                 budget_s=5, clock=fake.clock, sleep=fake.sleep, jitter=lambda: 0.0)

    assert fake.calls > 1
    assert err.value.last is pending
    assert str(err.value).startswith(f"cluster dr-site: reading batch {fake.calls} failed: "
                                     "Broker: Not leader for partition")


def test_retries_are_logged_on_attempts_one_two_four_eight_not_each(
    caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeTime(call_seconds=0.1)
    call = fake.failing(*[LOADING] * 12, None)

    with caplog.at_level(logging.WARNING, logger="ferry.kafka.retry"):
        retrying(call, cluster="dr-site", action="reading offsets of group g", budget_s=120,
                 clock=fake.clock, sleep=fake.sleep)

    assert fake.calls == 13
    warnings = [r.getMessage() for r in caplog.records]
    assert [int(w.split("(attempt ")[1].split(",")[0]) for w in warnings] == [1, 2, 4, 8]
    assert all(w.startswith("cluster dr-site: reading offsets of group g: Broker: Coordinator "
                            "load in progress (COORDINATOR_LOAD_IN_PROGRESS); a transient "
                            "state, retrying") for w in warnings)


def test_the_budget_key_is_documented_with_the_clients_default() -> None:
    key = BY_NAME["ferry.kafka.retry.seconds"]

    assert float(key.default) == RETRY_SECONDS == ClientConfig("A", "admin").retry_seconds
    assert key.parse("2.5") == 2.5
    with pytest.raises(ValueError, match="above 0"):
        key.parse("0")


def test_the_budget_is_set_per_flow(load: Loader) -> None:
    config = load(BASE + "ferry.kafka.retry.seconds = 300\nA->B.ferry.kafka.retry.seconds = 30\n")

    assert config.flow("A->B").ferry.kafka_retry_seconds == 30
    assert load(BASE).flow("A->B").ferry.kafka_retry_seconds == RETRY_SECONDS


def test_the_flows_clients_carry_its_budget(load: Loader) -> None:
    flow = load(BASE + "A->B.ferry.kafka.retry.seconds = 30\n").flow("A->B")

    assert {c.retry_seconds for c in (flow.consumer, flow.producer, flow.source_admin,
                                      flow.target_admin)} == {30}
