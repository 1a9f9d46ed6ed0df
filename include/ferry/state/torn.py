"""A state table whose newest commit was torn, set aside (adapter).

A Delta commit is the file `_delta_log/<version>.json`, written whole under its name or
not at all: delta-rs writes it aside and links it in. A disk that fills, or a machine
that dies, mid-write can still leave the newest one cut short, and every read of the
table then fails on it ("Json error: Truncated record"). That commit never took effect
as a whole: the table as of the version before is what was surely recorded, and what the
torn commit held (a batch of `runs` and offset-map rows) is rebuilt from Kafka, as rows
the state is behind on always are (the offset-map topic, G9).

So a local table whose newest commit does not read as JSON lines has it set aside, renamed
`<version>.json.torn-<UTC time>` (kept for inspection; Delta reads only `<version>.json`),
with one warning naming the table and the version; the read or write is then tried again.
A torn commit that is not the newest, or a table in an object store, is not touched: the
error then names the file and the fix. (A commit cut exactly at the end of one of its
lines reads as whole: its form cannot tell; a cut falls mid-line almost always.)
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)


def newest_commit(path: str) -> Path | None:
    """The newest commit file of the local table at `path` (None: none, or not local)."""
    if "://" in path:
        return None
    commits = sorted((Path(path) / "_delta_log").glob("[0-9]*.json"))
    return commits[-1] if commits else None


def torn(commit: Path) -> bool:
    """Whether the commit file does not read as complete JSON lines."""
    try:
        lines = commit.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return True
    try:
        for line in lines:
            if line.strip():
                json.loads(line)
    except ValueError:
        return True
    return not lines


def set_aside(path: str) -> bool:
    """Set the newest commit of the table at `path` aside when it is torn; whether it was
    (then the caller tries again)."""
    commit = newest_commit(path)
    if commit is None or not torn(commit):
        return False
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = commit.with_name(f"{commit.name}.torn-{stamp}")
    try:
        commit.rename(aside)
    except FileNotFoundError:  # another process set it aside first
        return True
    log.warning("state table %s: its newest commit, version %s, was torn (cut short: a disk "
                "that filled, or a machine that died, mid-write) and never took effect; set "
                "aside as %s, the table reads as of the version before, and what that commit "
                "held is recorded again from Kafka's offset-map topic", path,
                int(commit.stem), aside.name)
    return True


def torn_error(path: str, exc: Exception) -> str:
    """The one line for a table that cannot be read for a reason `set_aside` cannot fix."""
    return (f"state table {path} cannot be read ({str(exc).splitlines()[0]}): a commit file "
            f"in {path}/_delta_log is damaged; move the damaged <version>.json aside (only "
            "the newest commit can be set aside safely; restore an older one from a backup), "
            "then run again")
