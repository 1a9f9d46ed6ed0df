"""A writer's client sources (`ferry.kafka.lane_clients`): `FreshClients` makes new clients
and closes them at the end; `KeptClients` (`ferry.kafka.kept`) hands a slot's next writer
the clients a healthy run left, and drops them all after any other. Fakes stand in for the
clients: no client here ever connects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTP

from ferry.kafka.kept import KeptClients, LaneReaders
from ferry.kafka.lane_clients import FatalError, FreshClients, HeldProducer, LaneClients

TXN = "ferry-A->B-0"


class Client:
    """A consumer's calls a client source makes: assignment, resume, unassign, close."""

    def __init__(self, name: str, unassign_fails: bool = False) -> None:
        self.name, self.unassign_fails = name, unassign_fails
        self.assigned = [KTP("orders", 0), KTP("orders", 1)]
        self.resumed: list[KTP] = []
        self.closed = False

    def assignment(self) -> list[KTP]:
        return list(self.assigned)

    def resume(self, partitions: list[KTP]) -> None:
        self.resumed.extend(partitions)

    def unassign(self) -> None:
        if self.unassign_fails:
            raise KafkaException(KafkaError(KafkaError._STATE, "consumer closed"))
        self.assigned = []

    def close(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return self.name


def maker(made: list[Client], unassign_fails: bool = False) -> Callable[[], Any]:
    def make() -> Client:
        made.append(Client(f"client-{len(made)}", unassign_fails))
        return made[-1]

    return make


def held() -> HeldProducer:
    return HeldProducer(object(), FatalError(), {"A.orders"})  # type: ignore[arg-type]


def fresh() -> FreshClients:
    return FreshClients()


def kept() -> KeptClients:
    return KeptClients(TXN, flow="A->B", slot=0, flow_topics=frozenset({"orders", "idle"}))


def one_writer(source: LaneClients, healthy: bool, with_producer: bool = True,
               unassign_fails: bool = False) -> tuple[list[Client], HeldProducer | None]:
    """One writer's run: its clients asked for, used, released: the clients made (consumer
    then reader) and the producer it ended with."""
    made: list[Client] = []
    consumer = source.consumer(maker(made, unassign_fails))
    reader = source.reader(maker(made))
    producer = held() if with_producer else None
    source.release(consumer, reader, producer, healthy)
    return made, producer


@pytest.mark.parametrize(
    ("source", "healthy", "with_producer", "unassign_fails", "kept_for_next"), [
        (fresh, True, True, False, False),
        (fresh, False, True, False, False),
        (kept, True, True, False, True),
        (kept, False, True, False, False),
        (kept, True, False, False, False),
        (kept, True, True, True, False),
    ], ids=["fresh-healthy", "fresh-failed", "kept-healthy", "kept-failed",
            "kept-without-producer", "kept-consumer-not-unassignable"])
def test_the_next_writer_gets_the_clients_only_of_a_healthy_kept_run(
    source: Callable[[], LaneClients], healthy: bool, with_producer: bool,
    unassign_fails: bool, kept_for_next: bool
) -> None:
    # given: a client source, and a writer that ran with new clients
    clients = source()
    assert clients.producer() is None
    made, producer = one_writer(clients, healthy, with_producer, unassign_fails)
    assert len(made) == 2

    # when: the slot's next writer asks for its clients
    again: list[Client] = []
    consumer, reader = clients.consumer(maker(again)), clients.reader(maker(again))

    # then: it gets the same ones, left with nothing assigned, only after a healthy kept
    # run; otherwise new ones, and the old ones are closed
    if kept_for_next:
        assert (consumer, reader, again) == (made[0], made[1], [])
        assert clients.producer() is producer
        assert made[0].assigned == [] and made[0].resumed == [KTP("orders", 0),
                                                              KTP("orders", 1)]
        assert not made[0].closed and not made[1].closed
    else:
        assert again == [consumer, reader]
        assert clients.producer() is None
        assert made[0].closed and made[1].closed


def test_a_consumer_that_cannot_be_unassigned_is_not_kept_and_says_so(
    caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="ferry.kafka.kept"):
        one_writer(kept(), healthy=True, unassign_fails=True)

    (line,) = [r for r in caplog.records if "not kept" in r.getMessage()]
    assert line.getMessage() == "writer 0: its consumer is not kept (KafkaError{code=_STATE," \
        "val=-172,str=\"consumer closed\"})"
    assert (line.flow, line.lane) == ("A->B", 0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("source", "topics"), [
    (fresh, frozenset()),
    (kept, frozenset({"orders", "idle"})),
], ids=["fresh", "kept"])
def test_new_clients_learn_the_topics_the_source_names(
    source: Callable[[], LaneClients], topics: frozenset[str]
) -> None:
    assert source().topics_to_learn() == topics


@pytest.mark.parametrize(("txn_id", "delivery", "refused"), [
    (TXN, "exactly_once", False),
    ("ferry-A->B-1", "exactly_once", True),
    (TXN, "at_least_once", True),
], ids=["its-slot", "another-slot", "at-least-once"])
def test_kept_clients_serve_only_their_slots_transactional_writer(
    txn_id: str, delivery: str, refused: bool
) -> None:
    fresh().check(txn_id, delivery)  # new clients suit any writer
    if refused:
        with pytest.raises(ValueError, match=f"clients kept for {TXN} given to the writer "
                                             f"of {txn_id} \\({delivery}\\)"):
            kept().check(txn_id, delivery)
    else:
        kept().check(txn_id, delivery)


def test_a_lanes_slots_share_its_consumer_and_reader() -> None:
    # given: two slots of one lane, one after another, sharing the lane's readers
    readers = LaneReaders()
    first, second = (KeptClients(f"ferry-A->B-{slot}", readers=readers) for slot in (0, 1))
    made, _ = one_writer(first, healthy=True)

    # when: the other slot's writer asks for its clients
    again: list[Client] = []
    consumer, reader = second.consumer(maker(again)), second.reader(maker(again))

    # then: the lane's consumer and reader, not the first slot's producer
    assert (consumer, reader, again) == (made[0], made[1], [])
    assert second.producer() is None

    # and a failed run of the second slot drops the lane's readers with its own clients
    second.release(consumer, reader, held(), healthy=False)
    assert made[0].closed and made[1].closed
    assert (readers.consumer, readers.reader) == (None, None)
