"""Spark adapters (the only modules that import pyspark/delta)."""
