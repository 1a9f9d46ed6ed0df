"""Java `.properties` files, read the way `java.util.Properties.load` reads them.

MM2 users' `mm2.properties` files use every corner of the format: `:` or whitespace as the
separator, `\\` line continuations (long JAAS strings), `!` comments and `\\uXXXX` escapes.
A later key overrides an earlier one, as in Java.
"""

from __future__ import annotations

import re

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=: \t\f"


def parse_properties(text: str) -> dict[str, str]:
    """Parse properties text into an ordered dict (last occurrence of a key wins)."""
    result: dict[str, str] = {}
    for logical in _logical_lines(text):
        key, value = _split(logical)
        result[_unescape(key)] = _unescape(value)
    return result


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for raw in re.split(r"\r\n|\r|\n", text):  # Java splits only on CR/LF
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        if pending is not None:
            line = pending + line
        if _ends_with_continuation(line):
            pending = line[:-1]
            continue
        pending = None
        lines.append(line)
    if pending is not None:
        lines.append(pending)
    return lines


def _ends_with_continuation(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in _SEPARATORS:
            break
        i += 1
    key = line[:i]
    rest = line[i:]
    # Whitespace, then at most one '=' or ':', then whitespace.
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
