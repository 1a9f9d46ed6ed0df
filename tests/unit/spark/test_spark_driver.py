"""Where the copy job's Spark driver listens: loopback, unless executors elsewhere must
reach it (FERRY_SPARK_DRIVER_HOST)."""

from __future__ import annotations

import pytest

from ferry.spark.session import DRIVER_HOST_ENV, spark_conf
from ferry.spark.submit import submit_env


@pytest.mark.parametrize(("value", "host"), [
    (None, "127.0.0.1"), ("", "127.0.0.1"), ("airflow-worker-3", "airflow-worker-3"),
    (" 10.0.4.17 ", "10.0.4.17")])
def test_the_driver_host_is_loopback_unless_set(monkeypatch: pytest.MonkeyPatch,
                                                value: str | None, host: str) -> None:
    if value is None:
        monkeypatch.delenv(DRIVER_HOST_ENV, raising=False)
    else:
        monkeypatch.setenv(DRIVER_HOST_ENV, value)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    conf = spark_conf("spark://spark-master:7077", jars=False)
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == (host, host)
    assert submit_env()["SPARK_LOCAL_IP"] == host
