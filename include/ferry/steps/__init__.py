"""The steps of a cycle, and the operator's verbs, doing I/O through the adapters below
(`kafka`, `state`, `spark`): heartbeat, sync, plan (mirror), copy, record, checkpoints;
plus verify, backfill, positions, look-ups and recovery. The CLI and the Airflow DAGs call
these, never the adapters' details."""
