"""Ferry as an Airflow provider (`apache_airflow_provider` entry point): Airflow's
providers list shows it, its connection form offers a Kafka cluster type, and the Ferry
page's plugin is registered (also through the `airflow.plugins` entry point)."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    from ferry import __version__

    return {
        "package-name": "ferry-mirror",
        "name": "Ferry",
        "description": "Exact-offset-range Kafka mirroring, MirrorMaker 2 compatible: one DAG "
                       "per flow, the Ferry page, and Kafka cluster connections.",
        "versions": [__version__],
        "connection-types": [{"hook-class-name": "ferry.airflow.hooks.KafkaClusterHook",
                              "connection-type": "ferry_kafka"}],
        "plugins": [{"name": "ferry", "plugin-class": "ferry.airflow.plugin.FerryPlugin"}],
    }
