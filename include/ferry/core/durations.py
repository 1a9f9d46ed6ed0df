"""Durations as operators write them: `90s`, `10m`, `2h`, `1d`, or plain seconds."""

from __future__ import annotations

import re

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_FORM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in `text` (a number with an optional unit s, m, h or d; seconds without).
    Raises ValueError naming the accepted forms for anything else, zero included."""
    match = _FORM.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration: write a positive number with s, m, h "
                         "or d, e.g. 90s, 10m, 2h")
    return float(match.group(1)) * UNITS[match.group(2) or "s"]
