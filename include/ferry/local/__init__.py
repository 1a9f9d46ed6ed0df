"""Real local Kafka clusters (KRaft, from Maven Central jars) for development, tests,
the demo and the benchmarks: one launcher for all of them."""
