"""Airflow adapters: the DAG factory and task edges (the only modules importing airflow)."""
