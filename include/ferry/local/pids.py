"""Whose a recorded pid is: `down` signals only processes Ferry started, never by name."""

from __future__ import annotations

from pathlib import Path


def runs_with(pid: int | None, *arguments: str) -> bool:
    """True when `pid` is alive and its command line holds every one of `arguments` (whole
    arguments, not substrings)."""
    if pid is None:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return all(argument.encode() in cmdline for argument in arguments)
