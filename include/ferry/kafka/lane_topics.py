"""What a writer's clients know of its topics (adapter).

A new librdkafka client knows no topic: the first fetch of a partition it was assigned, or
the first record it sends to a topic, waits for its periodic refresh of unknown topics
(about half a second a lane), and a producer's first search for its transaction
coordinator finds no broker up yet. A writer therefore has its clients ask for the topics'
metadata first:

- `learn_topics`: a consumer, the source topics it is about to be assigned (and a new one,
  every topic its client source names: `LaneClients.topics_to_learn`);
- `learn_targets`: a producer, the topics it writes (`targets`: the remote topics, the
  offset-map topic, and the remote topics of what the client source names), before its
  first transactional call; the topics it found go to the lane's `learned`. An offset-map
  topic that is not on the target fails the writer at once (`require_map_topic`);
- `learn_partition`: a client whose metadata does not list a remote partition yet (the
  topic grew since it learnt it) asks again, within `ferry.kafka.retry.seconds`.

Asking is never required for correctness: on an error nothing is lost but that time.
Log lines go to the lane's logger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from ferry.config import Flow
from ferry.core.silence import SILENT_S, Watch
from ferry.errors import TerminalError
from ferry.kafka import metadata
from ferry.kafka.delivery import CALL_TIMEOUT_S
from ferry.kafka.lane_clients import LaneClients
from ferry.kafka.lane_state import Part

MAP_TOPIC_WAIT_S = 3.0
"""How long a writer asks again about an offset-map topic a broker does not know."""


class Lane(Protocol):
    """What this module uses of its lane (`ferry.kafka.lane.Lane`): declared here, so this
    module does not import the lane that imports it."""

    flow: Flow
    lane: int
    log: logging.Logger
    parts: dict[tuple[str, int], Part]
    map_topic: str
    clients: LaneClients
    learned: set[str]
    """Topics whose metadata the writer's producer asked for."""
    watch: Watch


def learn_partition(lane: Lane, client: Consumer | Producer, part: Part) -> bool:
    """Have `client` learn the remote partition its metadata does not list yet
    (`ferry.kafka.metadata`): False when it is not listed within the retry budget."""
    flow = lane.flow
    extra = {"flow": flow.name, "lane": lane.lane, "topic": part.remote,
             "partition": part.partition}
    lane.log.info("writer %s: %s-%s is new to its %s (the topic grew since it learnt it); "
                  "asking for the topic's metadata again", lane.lane, part.remote,
                  part.partition, type(client).__name__.lower(), extra=extra)
    if metadata.learn_partition(client, part.remote, part.partition,
                                flow.ferry.kafka_retry_seconds):
        return True
    lane.log.warning("writer %s: cluster %s lists no partition %s of %s after %gs "
                     "(ferry.kafka.retry.seconds)", lane.lane, flow.target, part.partition,
                     part.remote, flow.ferry.kafka_retry_seconds, extra=extra)
    return False


def learn_topics(lane: Lane, consumer: Consumer, topics: Collection[str]) -> None:
    """Ask for the topics' metadata before assigning them. A new client that is assigned a
    topic it has no metadata for fetches nothing until its periodic refresh of unknown
    topics (once a second in librdkafka): about half a second lost in every lane. On an
    error the refresh still comes; nothing is lost but that time. A source that does not
    answer makes the call wait its whole timeout: said once after `SILENT_S` (`Lane.watch`)."""
    extra = {"flow": lane.flow.name, "lane": lane.lane}
    for topic in sorted(topics):
        asked = time.monotonic()
        try:
            with lane.watch.call(lane.log, lane.flow.source,
                            f"writer {lane.lane} reading the metadata of {topic}", extra):
                consumer.list_topics(topic, timeout=CALL_TIMEOUT_S)
        except KafkaException as exc:
            # after a wait that was said (SILENT_S), how it ended is said too
            waited = time.monotonic() - asked
            lane.log.log(logging.INFO if waited >= SILENT_S else logging.DEBUG,
                         "cluster %s: writer %s: no metadata of %s after %.0f s (%s); it "
                         "reads on", lane.flow.source, lane.lane, topic, waited, exc,
                         extra=extra)


def learn_targets(lane: Lane, producer: Producer, skip: Collection[str] = ()) -> None:
    """Ask for the metadata of the topics `producer` writes (`targets`) before its first
    transactional call. A new producer has no broker connection yet: librdkafka's first
    search for the transaction coordinator then finds no broker up and tries again half a
    second later, and its first records to a topic it has no metadata for wait for that.
    Asked first, `init_transactions` takes tens of milliseconds, not about half a second
    in every other lane. On an error nothing is lost but that time. An offset-map topic
    that is not there fails the writer at once (`require_map_topic`). Topics in `skip` (a
    kept producer knows them) are not asked for; those found go to `lane.learned`."""
    for topic in sorted(targets(lane)):
        if topic in skip:
            continue
        try:
            found = producer.list_topics(topic, timeout=CALL_TIMEOUT_S).topics.get(topic)
        except KafkaException as exc:
            lane.log.debug("metadata of %s not read ahead: %s", topic, exc,
                           extra={"flow": lane.flow.name, "lane": lane.lane})
            continue
        if topic == lane.map_topic and _unknown(found):
            require_map_topic(lane, producer)
        elif not _unknown(found):
            lane.learned.add(topic)


def targets(lane: Lane) -> set[str]:
    """The topics the writer's producer writes: its remote topics and the offset-map topic,
    and the remote topics of every topic its client source has new clients learn."""
    return ({p.remote for p in lane.parts.values()} | {lane.map_topic}
            | {lane.flow.remote_topic(t) for t in lane.clients.topics_to_learn()})


def require_map_topic(lane: Lane, producer: Producer) -> None:
    """Fail at once, copying nothing, when the offset-map topic is not on the target: its
    entries would have nowhere to go, and each batch would wait for the topic until its
    delivery timed out (30 s, then again on retry). A topic the plan created moments ago
    may be unknown to this broker for a moment: asked again for `MAP_TOPIC_WAIT_S`."""
    deadline = time.monotonic() + MAP_TOPIC_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            found = producer.list_topics(lane.map_topic, timeout=CALL_TIMEOUT_S)
        except KafkaException:
            return  # no answer: the writes report what is wrong
        if not _unknown(found.topics.get(lane.map_topic)):
            return
    flow = lane.flow
    raise TerminalError(
        f"flow {flow.name} writer {lane.lane}: the offset-map topic {lane.map_topic} is not "
        f"on cluster {flow.target} (deleted since the cycle planned?); nothing was copied, "
        "as the offset map would have nowhere to go. The next cycle of the flow creates it "
        "again, kept forever (retention.ms=-1)")


def _unknown(topic: Any) -> bool:
    """Whether topic metadata says the topic does not exist."""
    return topic is None or (topic.error is not None
                             and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)
