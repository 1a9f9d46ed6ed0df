"""The warm server's command line: a fixed heap, 1 GiB unless `--heap` says otherwise, and
a heap that is not a JVM size, or too small for a Spark driver, refused before anything
starts."""

from __future__ import annotations

import pytest

from ferry.cli.main import main
from ferry.spark.connect import server_command


def _conf(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize(("heap", "expected"), [(None, "1g"), ("512m", "512m"), ("4g", "4g")])
def test_the_server_starts_with_its_heap_committed_and_touched_at_start(
        heap: str | None, expected: str) -> None:
    command = server_command(15002, spark_submit="spark-submit",
                             **({"heap": heap} if heap else {}))

    conf = _conf(command)
    assert conf["spark.driver.memory"] == expected
    options = conf["spark.driver.extraJavaOptions"].split()
    assert f"-Xms{expected}" in options and "-XX:+AlwaysPreTouch" in options
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"


@pytest.mark.parametrize("heap", ["1gb", "0g", "g", "-1g", "1.5g", ""])
def test_a_heap_that_is_not_a_jvm_size_is_refused(heap: str) -> None:
    with pytest.raises(ValueError, match="is not a size such as 512m or 2g"):
        server_command(15002, spark_submit="spark-submit", heap=heap)


@pytest.mark.parametrize("heap", ["1k", "1m", "256m", "450m", "511m", "524287k"])
def test_a_heap_below_what_a_spark_driver_needs_is_refused_naming_the_least(heap: str) -> None:
    # Spark's driver refuses to start below 450 MiB of heap ("System memory ... must be at
    # least 471859200"), and the JVM's usable maximum is a little under -Xmx.
    with pytest.raises(ValueError, match=f"heap {heap} is too small for a Spark driver: "
                                         "give at least 512m"):
        server_command(15002, spark_submit="spark-submit", heap=heap)


@pytest.mark.parametrize("heap", ["512m", "524288k", "1g", "16g", "1t"])
def test_a_heap_of_at_least_512m_is_taken(heap: str) -> None:
    conf = _conf(server_command(15002, spark_submit="spark-submit", heap=heap))
    assert conf["spark.driver.memory"] == heap


def test_the_cli_refuses_a_heap_too_small_for_spark_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spark", "up", "--heap", "1M"])

    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == [
        "ferry: argument --heap: heap 1m is too small for a Spark driver: give at least 512m "
        "(see 'ferry spark up --help')"]


@pytest.mark.parametrize("verb", ["up", "serve"])
def test_the_cli_refuses_a_heap_that_is_not_a_size_in_one_line_before_starting_anything(
        verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spark", verb, "--heap", "2GB"])

    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == [
        f"ferry: argument --heap: '2GB' is not a heap size: give one such as 512m, 1g or 4g "
        f"(see 'ferry spark {verb} --help')"]


@pytest.mark.parametrize(("cores", "expected"), [(None, None), (1, "1"), (4, "4")])
def test_the_server_takes_at_most_the_cores_it_is_given_of_its_master(
        cores: int | None, expected: str | None) -> None:
    conf = _conf(server_command(15002, master="spark://m:7077", spark_submit="spark-submit",
                                max_cores=cores))
    assert conf.get("spark.cores.max") == expected


def test_a_server_of_no_cores_is_refused() -> None:
    with pytest.raises(ValueError, match="max cores 0: give at least 1"):
        server_command(15002, spark_submit="spark-submit", max_cores=0)
