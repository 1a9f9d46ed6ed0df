"""Airflow loads this file from its plugins folder; the plugin itself lives in the library
(`ferry.airflow.plugin`), so workers, tests and the api-server import the same code."""

from ferry.airflow.plugin import FerryPlugin

__all__ = ["FerryPlugin"]
