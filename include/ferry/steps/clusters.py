"""A cluster as the steps use it: `ferry.kafka.cluster.KafkaCluster` (Kafka's calls) and the
offset map's cursor, where the Delta offset map stands in the flow's offset-map topic: the
one call that reads Kafka and Delta together, so it is composed here, above both adapters
(which do not import each other)."""

from __future__ import annotations

from ferry.config import Flow
from ferry.core.offsetmap import MapCursor
from ferry.kafka.cluster import KafkaCluster


class Cluster(KafkaCluster):
    """Every port of `ferry.steps.ports`, on one cluster."""

    def map_cursor(self, flow: Flow) -> MapCursor:
        from ferry.state.mapcursor import map_cursor

        return map_cursor(flow, *self.map_topic_facts(flow))
