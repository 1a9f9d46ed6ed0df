"""MirrorMaker 1 setups as their command lines name them, on the session's clusters."""

from __future__ import annotations

import uuid
from pathlib import Path

from ferry.config import load_config


def command_line(folder: Path, clusters: dict[str, str], topic: str) -> Path:
    (folder / "consumer.properties").write_text(
        f"bootstrap.servers={clusters['source']}\ngroup.id=legacy-mirror\n"
        "auto.offset.reset=earliest\n")
    (folder / "producer.properties").write_text(
        f"bootstrap.servers={clusters['target']}\nacks=all\n")
    script = folder / f"mirror-maker-{uuid.uuid4().hex[:6]}.sh"  # tests share the brokers
    script.write_text("#!/bin/sh\nexec kafka-mirror-maker.sh \\\n"
                      "    --consumer.config consumer.properties \\\n"
                      "    --producer.config producer.properties \\\n"
                      f"    --num.streams 2 --whitelist '{topic}'\n")
    return script


def mm1_flow(setup: Path) -> str:
    """The flow an MM1 setup became (named after the setup)."""
    return load_config(setup).enabled_flows[0].name
