"""Airflow adapters: the DAG factories, task edges, the dag.test() driver and the plugin
(the only modules importing airflow)."""
