"""Airflow Assets for mirrored topics: a downstream DAG can run on "orders mirrored".

Each remote topic is an Asset `kafka://HOST:PORT/REMOTE_TOPIC` (the URI form of Airflow's
Kafka provider), HOST:PORT being the first server of the target's `bootstrap.servers`.
Which topics a flow mirrors is known only at run time (its filter is a regex), so the tasks
that finish a copy declare an AssetAlias per flow, `ferry_A_to_B.mirrored`, and add one
event per remote topic that received records, after the run is recorded in the offset
map. An idle run adds none. The event's extra: the flow, the run id, the source topic, the
records and, per partition, the source range `[start, end)` copied.

Downstream DAGs schedule on `remote_topic_asset('A->B', 'orders')` (one topic), on the
Asset's URI directly, or on `flow_alias('A->B')` (any topic of the flow).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferry.config import Config, Flow

GROUP = "kafka"


def alias_name(flow: Flow) -> str:
    """The AssetAlias every copy of `flow` adds its topics' events to."""
    return f"{flow.dag_id}.mirrored"


def topic_uri(bootstrap_servers: str, topic: str) -> str:
    """`kafka://HOST:PORT/TOPIC` for the first server of a `bootstrap.servers` list (a
    `PROTOCOL://` prefix dropped)."""
    first = bootstrap_servers.split(",")[0].strip()
    return f"kafka://{first.rpartition('://')[2]}/{topic}"


def remote_topic_uri(config: Config, flow: Flow, source_topic: str) -> str:
    """The Asset URI of `source_topic`'s remote topic on the flow's target."""
    return topic_uri(config.clusters[flow.target].bootstrap_servers,
                     flow.remote_topic(source_topic))


def outlets(flow: Flow) -> list[Any]:
    """A copy task's outlets: the flow's AssetAlias."""
    from airflow.sdk import AssetAlias

    return [AssetAlias(alias_name(flow))]


def emit(config: Config, flow: Flow, run_id: str,
         topics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Add an event per remote topic that received records (`topics`: source topic ->
    records and partition ranges, as `Cycle.record` reports them) to the running task's
    alias; the URIs, in order."""
    from airflow.sdk import Asset, AssetAlias, get_current_context

    events = get_current_context()["outlet_events"][AssetAlias(alias_name(flow))]
    uris = []
    for topic, copied in topics.items():
        uri = remote_topic_uri(config, flow, topic)
        events.add(Asset(uri=uri, group=GROUP),
                   extra={"flow": flow.name, "run_id": run_id, "source_topic": topic,
                          "records": copied["records"],
                          "partitions": dict(copied["partitions"])})
        uris.append(uri)
    return uris


def remote_topic_asset(flow_name: str, source_topic: str, path: str | None = None) -> Any:
    """The Asset of `source_topic`'s remote topic on flow `flow_name` of the config at
    `path` (default: $FERRY_CONFIG), for a downstream DAG's `schedule`. Only the target's
    Airflow connection is looked up, and only when the config does not write the target's
    bootstrap list itself (the config's wins over a connection's anyway): a downstream DAG
    file is parsed often, and must not fail on another cluster's connection, nor call a
    secrets backend for it."""
    from airflow.sdk import Asset

    from ferry.airflow.connections import load
    from ferry.airflow.tasks import config_path

    path = path or config_path()
    config = load(path, connections=False, flow=flow_name)
    target = config.flow(flow_name).target
    if not config.clusters[target].bootstrap_servers:
        config = load(path, connections=(target,), flow=flow_name)
    return Asset(uri=remote_topic_uri(config, config.flow(flow_name), source_topic),
                 group=GROUP)


def flow_alias(flow_name: str, path: str | None = None) -> Any:
    """The AssetAlias of flow `flow_name` (any of its topics mirrored); it names the flow
    only, so no Airflow connection is looked up."""
    from airflow.sdk import AssetAlias

    from ferry.airflow.connections import load
    from ferry.airflow.tasks import config_path

    return AssetAlias(alias_name(load(path or config_path(), connections=False, flow=flow_name)
                                 .flow(flow_name)))
