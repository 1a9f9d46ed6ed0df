"""Helpers the tests share, across tiers: data on real clusters, secured clusters' rights,
consumer groups, failover, DAG runs, the CLI, the built wheel, the shipped monitoring. A
test module imports its helpers from here (or its tier's conftest), never from another
test module."""
