"""Build a SparkSession with Delta Lake, tuned for Ferry's small state tables.

Delta's jars come from the cache `ferry local jars` fills; those Spark already ships (newer
Hadoop, Parquet, Jackson, log4j) are left out, so a session starts without network access
and with one version of each library. Without
`snapshotPartitions`/`shuffle.partitions` set low, reading a one-row Delta table runs a
50-task stage; speculation is off because a speculative copy task would be a zombie writer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ferry.jars import delta_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _artifact(jar: Path) -> str:
    """`hadoop-client-api-3.4.2.jar` -> `hadoop-client-api`."""
    return re.sub(r"-\d[\w.\-]*$", "", jar.stem)


def delta_classpath() -> list[str]:
    """Delta's jars minus the libraries Spark's own jars directory already provides."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    provided = {_artifact(j) for j in spark_jars.glob("*.jar")}
    return sorted(str(j) for j in delta_jars().glob("*.jar") if _artifact(j) not in provided)


DRIVER_HOST_ENV = "FERRY_SPARK_DRIVER_HOST"


def driver_host() -> str:
    """The address the copy job's driver listens on and gives its executors:
    `$FERRY_SPARK_DRIVER_HOST` (an address executors on other hosts can reach, e.g. the
    Airflow worker's), else loopback (local masters, and one-machine clusters)."""
    return os.environ.get(DRIVER_HOST_ENV, "").strip() or "127.0.0.1"


def spark_conf(master: str, jars: bool = True) -> dict[str, str]:
    """The Spark settings every Ferry session uses (also passed to spark-submit).
    `jars=False` leaves out `spark.jars` (a job already got it from spark-submit)."""
    conf = {
        "spark.master": master,
        "spark.task.maxFailures": "4",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.shuffle.partitions": "2",
        "spark.speculation": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": driver_host(),
        "spark.driver.bindAddress": driver_host(),
    }
    if jars:
        conf["spark.jars"] = ",".join(delta_classpath())
    return conf


def build_session(master: str | None = "local[*]", app_name: str = "ferry") -> SparkSession:
    """A session with Ferry's settings. `master=None` means inside spark-submit: the
    master and the jars are what spark-submit was given."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", driver_host())
    for var in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        os.environ.pop(var, None)  # these would switch the builder to Spark Connect
    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(master or "", jars=master is not None).items():
        if key != "spark.master" or master:
            builder = builder.config(key, value)
    return builder.getOrCreate()
