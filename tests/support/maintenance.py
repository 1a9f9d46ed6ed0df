"""Delta state tables with a history to maintain: rows of several flows, and how their
files are counted."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ferry.config import Config, load_config
from ferry.state.maintain import data_files

FLOWS = ("A->B", "C->B")


def sample_rows(ddl: str, run_ids: list[str], flows: tuple[str, ...] = FLOWS
                ) -> list[dict[str, Any]]:
    """One row per flow and run id for a flat state table DDL (values other than flow and
    run_id are fillers)."""
    columns = [column.split(" ") for column in ddl.split(", ")]
    return [{name: flow if name == "flow" else run_id if name == "run_id" else
             _SAMPLE.get(kind, f"{name}-{run_id}") for name, kind in columns}
            for run_id in run_ids for flow in flows]


def identities(path: str, version: int | None = None) -> Counter[tuple[str, str]]:
    """(flow, run_id) of every row, counted: a lost or doubled row shows."""
    from deltalake import DeltaTable

    table = DeltaTable(path, version=version).to_pyarrow_table(columns=["flow", "run_id"])
    return Counter(zip(table.column("flow").to_pylist(), table.column("run_id").to_pylist(),
                       strict=True))


def files_per_flow(path: str) -> Counter[str | None]:
    from deltalake import DeltaTable

    return Counter(f.partition for f in data_files(DeltaTable(path)))


_SAMPLE: dict[str, Any] = {"int": 1, "bigint": 2, "double": 0.5, "boolean": True,
                           "timestamp": datetime(2026, 1, 1, tzinfo=UTC)}


def state_config(tmp_path: Path) -> Config:
    """Two flows sharing `tmp_path/state` (maintenance never talks to the brokers)."""
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = A, B, C\nA.bootstrap.servers = 127.0.0.1:9\nB.bootstrap.servers = "
        "127.0.0.1:9\nC.bootstrap.servers = 127.0.0.1:9\nA->B.enabled = true\n"
        "C->B.enabled = true\nferry.state.dir = state\n")
    return load_config(path)
