"""The top-level `plugins/` folder, as Airflow's own plugin loader reads it: Ferry's plugin
once, whether it comes from the installed entry point or from the folder."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
from airflow._shared.plugins_manager.plugins_manager import (
    _load_entrypoint_plugins,
    _load_plugins_from_plugin_directory,
)

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def test_the_plugins_folder_adds_nothing_beside_the_installed_entry_point() -> None:
    # given: ferry-mirror installed (this checkout's editable install): its entry point
    from_folder, folder_errors = _load_plugins_from_plugin_directory(str(PLUGINS))
    from_entry_points, _ = _load_entrypoint_plugins()

    # then: one Ferry plugin, and no "already registered" import error in the UI
    assert folder_errors == {}
    assert [p.name for p in from_folder] == []
    assert "ferry" in {p.name for p in from_entry_points}


def test_the_plugins_folder_registers_ferry_where_the_entry_point_is_not_installed(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the library on the path without its distribution's entry points (an include/
    # folder mounted beside dags/)
    every = importlib.metadata.entry_points

    def without_ferry(**select: Any) -> Any:
        found = every(**select)
        if select.get("group") != "airflow.plugins":
            return found
        return [ep for ep in found if not ep.value.startswith("ferry.")]

    monkeypatch.setattr(importlib.metadata, "entry_points", without_ferry)

    plugins, errors = _load_plugins_from_plugin_directory(str(PLUGINS))

    assert errors == {}
    assert [(p.name, type(p).__name__) for p in plugins] == [("ferry", "FerryPlugin")]
