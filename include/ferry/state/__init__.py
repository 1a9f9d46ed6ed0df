"""Ferry's Delta state tables: offset_map, runs, gaps (and later checkpoints, verify).

Spark writes them (in the copy job); look-ups read them with delta-rs, without a JVM.
Every table is partitioned by `flow`, so concurrent flows never touch the same files.
"""
