"""confluent-kafka adapters: the only modules that talk to Kafka. They take Ferry's
config types and return Ferry's dataclasses, never client objects."""
