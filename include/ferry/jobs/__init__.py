"""Scripts spark-submit runs (`ferry_copy.py`), shipped inside the package so an installed
Ferry finds them without a checkout (`ferry.spark.submit.jobs_dir`). spark-submit runs a
script with its folder first on `sys.path`: nothing else may live here."""
