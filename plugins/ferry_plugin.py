"""Ferry's Airflow plugin (the Ferry page and its metrics) for a deployment that mounts
Airflow's plugins folder.

The `ferry-mirror` package registers the same plugin through its `airflow.plugins` entry
point, which is how an installed Ferry is found. This file registers it only where that entry
point is not installed (the library put on the path some other way, e.g. an `include/` folder
mounted beside `dags/`): Airflow reads this folder before the entry points and would report the
second registration of one plugin name as an import error.
"""

from __future__ import annotations

from importlib.metadata import entry_points


def _entry_point_installed() -> bool:
    """Whether an installed distribution registers Ferry's plugin as an entry point."""
    return any(ep.value.startswith("ferry.airflow.plugin:")
               for ep in entry_points(group="airflow.plugins"))


if not _entry_point_installed():
    from ferry.airflow.plugin import FerryPlugin

    __all__ = ["FerryPlugin"]
