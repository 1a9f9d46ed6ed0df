"""The connection type Ferry adds to Airflow's connection form: a Kafka cluster
(`ferry_kafka`) whose host is the bootstrap list, login and password the SASL username and
password, and extra any librdkafka client setting. A cluster of Ferry's config names such a
connection with `<alias>.ferry.connection` (`ferry.config.connections` reads it; the Kafka
provider's own `kafka` type works the same)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


class KafkaClusterHook(BaseHook):
    """Reads a `ferry_kafka` connection; Ferry's clients are built from it elsewhere."""

    conn_name_attr = "ferry_conn_id"
    default_conn_name = "ferry_kafka_default"
    conn_type = "ferry_kafka"
    hook_name = "Kafka cluster (Ferry)"

    def __init__(self, ferry_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.ferry_conn_id = ferry_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema"],
            "relabeling": {"host": "Bootstrap servers", "login": "SASL username",
                           "password": "SASL password"},
            "placeholders": {
                "host": "broker-1:9093,broker-2:9093",
                "port": "the port of hosts given without one",
                "extra": '{"security.protocol": "SASL_SSL", "sasl.mechanism": '
                         '"SCRAM-SHA-512", "ssl.ca.location": "/etc/kafka/ca.pem"}'},
        }

    def client_settings(self) -> dict[str, str]:
        """The client settings Ferry takes from this connection (secrets included: for a
        client, never for a log)."""
        from ferry.airflow.connections import lookup
        from ferry.config.connections import client_settings

        found = lookup(self.ferry_conn_id)
        if found is None:
            raise ValueError(f"no Airflow connection {self.ferry_conn_id!r}")
        return client_settings(found)[0]
