"""Whether a cluster answers at all, asked once and bounded (adapter).

Every other call waits out a cluster's transient states for `ferry.kafka.retry.seconds`
(two minutes by default): right for a copy, which should ride through a broker's restart,
wrong for something that must answer in seconds whatever the clusters do, such as the
metrics a scrape reads during an outage. `unanswered` asks for the cluster's metadata once,
waits at most `timeout_s`, and says why not in one line.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ferry.config.clients import ClientConfig

PROBE_S = 5.0
"""How long a cluster has to answer the probe: librdkafka's first connection attempts to a
reachable cluster take milliseconds; a cluster that refuses connections or is black-holed
does not answer in any time."""


def unanswered(client: ClientConfig, timeout_s: float = PROBE_S) -> str | None:
    """None when the cluster `client` connects to lists its topics within `timeout_s`; else
    why not, in one line. Makes one admin client, which is dropped at once."""
    admin = AdminClient(client.confluent())
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        return str(error.str() if hasattr(error, "str") else error).splitlines()[0]
    return None
