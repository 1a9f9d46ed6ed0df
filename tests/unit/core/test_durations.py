"""Durations as operators write them (`ferry mirror --continuous --for 10m`)."""

from __future__ import annotations

import pytest

from ferry.core.durations import parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), ("1d", 86400.0),
    ("1.5m", 90.0), (" 5 m ", 300.0),
])
def test_a_duration_is_a_number_with_an_optional_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "10 minutes", "-5s", "0", "0s", "5w", "1h30m"])
def test_anything_else_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 90s, 10m, 2h"):
        parse_duration(text)
