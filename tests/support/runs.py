"""Rows of the runs table as the state holds them, for the metrics' and the page's tests."""

from __future__ import annotations

from datetime import UTC, datetime

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)


def run_row(run_id: str, partition: int, start: int, end: int, finished: datetime,
            outcome: str = "copied", age_ms: int = 1000, seconds: float = 0.5,
            topic: str = "orders") -> dict[str, object]:
    return {"flow": "a->b", "run_id": run_id, "lane": 0, "topic": topic,
            "partition": partition, "range_start": start, "range_end": end,
            "records": end - start, "bytes": 10 * (end - start), "seconds": seconds,
            "max_record_age_ms": age_ms, "outcome": outcome,
            "error": "boom" if outcome == "failed" else None, "delivery": "exactly_once",
            "duplicates": 0, "finished_at": finished}
