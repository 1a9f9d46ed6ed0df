"""A copy that this environment cannot start (Spark left to the package's extras) is one
line naming the extra to install, and a pyspark/pyspark-client pair of two releases, which
share one folder, is refused or warned about."""

from __future__ import annotations

import logging

import pytest

from ferry.errors import TerminalError
from ferry.spark import installed
from ferry.spark.installed import judge

SPARK_SUBMIT, CONNECT = "local[2]", "sc://spark.example.com:15002"


@pytest.mark.parametrize(
    ("found", "master", "refused", "warned"),
    [
        ({"pyspark": "4.2.0"}, SPARK_SUBMIT, None, None),
        ({"pyspark": "4.2.0"}, CONNECT, None, None),
        ({"pyspark-client": "4.2.0"}, CONNECT, None, None),
        ({"pyspark": "4.2.0", "pyspark-client": "4.2.0"}, SPARK_SUBMIT, None, None),
        ({}, SPARK_SUBMIT,
         "master local[2] runs the copy job through spark-submit, which comes with pyspark, "
         "not installed here: pip install 'ferry-mirror[spark]'", None),
        ({"pyspark-client": "4.2.0"}, SPARK_SUBMIT, "pip install 'ferry-mirror[spark]'", None),
        ({}, CONNECT, f"master {CONNECT} is a Spark Connect server, and no Spark Connect "
                      "client is installed here: pip install 'ferry-mirror[connect]'", None),
        ({"pyspark": "4.2.1", "pyspark-client": "4.2.0"}, SPARK_SUBMIT, None,
         "pyspark 4.2.1 and pyspark-client 4.2.0 are installed into the same pyspark/ folder, "
         "so its files are a mix of the two: install one release of both, e.g. pip install "
         "--force-reinstall 'pyspark==4.2.0' 'pyspark-client==4.2.0'"),
        ({"pyspark": "4.3.0", "pyspark-client": "4.2.0"}, CONNECT,
         "pyspark 4.3.0 and pyspark-client 4.2.0 are installed into the same pyspark/ folder, "
         "as two different Spark releases", None),
    ],
    ids=["spark-submit-with-pyspark", "connect-with-pyspark", "connect-with-the-client-only",
         "both-one-release", "spark-submit-without-spark", "spark-submit-with-the-client-only",
         "connect-without-a-client", "two-patch-releases-warned", "two-minor-releases-refused"],
)
def test_a_copy_needs_the_spark_its_master_runs_on(found: dict[str, str], master: str,
                                                   refused: str | None,
                                                   warned: str | None) -> None:
    refusal, warning = judge(found, master.startswith("sc://"), master)
    if refused is None:
        assert refusal is None
    else:
        assert refusal is not None and refused in refusal
    assert warning == warned


@pytest.fixture
def patch_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(installed, "versions",
                        lambda: {"pyspark": "4.2.1", "pyspark-client": "4.2.0"})


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage()[:40] for r in caplog.records if r.name == "ferry.spark.installed"]


@pytest.mark.usefixtures("patch_releases")
def test_a_pair_of_patch_releases_is_warned_about_once_per_holder_not_at_every_copy(
    caplog: pytest.LogCaptureFixture
) -> None:
    loop, task = installed.SparkCheck(), installed.SparkCheck()
    with caplog.at_level(logging.WARNING, logger="ferry.spark.installed"):
        for _ in range(3):  # three copies of a continuous run
            loop.require(SPARK_SUBMIT, connect=False)
        assert warned(caplog) == ["pyspark 4.2.1 and pyspark-client 4.2.0 a"]
        task.require(SPARK_SUBMIT, connect=False)  # another holder: its own warning
    assert warned(caplog) == ["pyspark 4.2.1 and pyspark-client 4.2.0 a"] * 2


def test_a_refusal_is_every_time_whoever_holds_the_check(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(installed, "versions", lambda: {})
    check = installed.SparkCheck()
    for _ in range(2):
        with pytest.raises(TerminalError, match=r"pip install 'ferry-mirror\[connect\]'"):
            check.require(CONNECT, connect=True)
