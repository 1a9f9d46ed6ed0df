"""Ferry's decisions, pure (no I/O): the plan of exact ranges and its file, lanes, the
offset map's entries and look-ups, checkpoint translation, heartbeats, verification,
backfill windows, retention, the state tables' schemas and rows, and what the sync steps
change (`core.sync`). Everything here is tested without brokers, Spark or Delta."""
