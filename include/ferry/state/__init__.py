"""Delta state adapters, through delta-rs (no JVM): reading and appending the state
tables, their digest, maintenance, and incidents. The tables' schemas and rows are pure
and live in `core.tables`; Spark appends them in the copy job (`spark.copy_job`)."""
