"""Each `ferry.` key is declared once (`KEYS`: name, default, parser, documentation), and
`FerrySettings` holds exactly one typed field per key."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from ferry.config.ferry_keys import KEYS, FerrySettings, field_of, resolve_ferry_settings
from ferry.config.findings import Findings


def test_every_key_is_one_field_and_every_field_one_key() -> None:
    fields = [f.name for f in dataclasses.fields(FerrySettings)]
    assert sorted(fields) == sorted(field_of(k.name) for k in KEYS)
    assert len(set(fields)) == len(fields) == len(KEYS)


def test_no_field_declares_a_default_of_its_own() -> None:
    # a second default drifts from the key's (ferry.continuous.interval.seconds once said
    # 0.5 in KEYS and 1.0 on the field)
    assert [f.name for f in dataclasses.fields(FerrySettings)
            if f.default is not dataclasses.MISSING
            or f.default_factory is not dataclasses.MISSING] == []


@pytest.mark.parametrize("key", KEYS, ids=[k.name for k in KEYS])
def test_an_unset_key_resolves_to_its_parsed_default_of_the_fields_type(key: typing.Any,
                                                                       tmp_path: Path) -> None:
    findings = Findings()
    settings = resolve_ferry_settings({}, tmp_path, findings)
    value = getattr(settings, field_of(key.name))
    hints = typing.get_type_hints(FerrySettings)
    expected = key.parse(key.default)
    if key.name == "ferry.state.dir":
        expected = str((tmp_path / expected).resolve())
    assert value == expected and findings.problems == []
    kind = typing.get_origin(hints[field_of(key.name)]) or hints[field_of(key.name)]
    assert isinstance(value, kind)
