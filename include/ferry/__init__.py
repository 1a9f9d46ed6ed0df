"""Ferry: exact-offset-range Kafka mirroring, compatible with MirrorMaker 2 configs.

The package is a pure core (config, naming, filters, planning) with thin adapters at the
edges; only adapter modules import confluent_kafka, pyspark/delta or airflow.
"""

__version__ = "0.1.0"
