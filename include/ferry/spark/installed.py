"""What of Spark this environment has, checked before a copy starts.

Ferry's package leaves Spark to extras, so that Airflow's scheduler, DAG processor and
api-server do not carry 450 MB of Spark they never run:

- `ferry-mirror[spark]`: pyspark itself (spark-submit, `local[*]` masters, and the Python
  of a Spark Connect server or of a cluster's executors, which run the copy job);
- `ferry-mirror[connect]`: only the Spark Connect client (`pyspark-client`), for machines
  whose copies run on a Connect server (`sc://...`).

pyspark and pyspark-client install into the same `pyspark/` folder, so when both are
there they must be one release: a different minor release is refused, a different patch
release is warned about (their shared files are then a mix of the two).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib import metadata

from ferry.errors import TerminalError

log = logging.getLogger(__name__)

SPARK = "pyspark"
CLIENT = "pyspark-client"
SPARK_EXTRA = "pip install 'ferry-mirror[spark]'"
CONNECT_EXTRA = "pip install 'ferry-mirror[connect]'"


def versions() -> dict[str, str]:
    """The installed versions of pyspark and pyspark-client (absent ones left out)."""
    found = {}
    for name in (SPARK, CLIENT):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def judge(found: Mapping[str, str], connect: bool, master: str) -> tuple[str | None, str | None]:
    """(the refusal, the warning) for starting a copy on `master` (`connect`: a Spark
    Connect server's URL) with `found` installed (see `versions`); None where there is
    none. Pure."""
    spark, client = found.get(SPARK), found.get(CLIENT)
    if spark is not None and client is not None and spark != client:
        fix = (f"install one release of both, e.g. pip install --force-reinstall "
               f"'{SPARK}=={client}' '{CLIENT}=={client}'")
        shared = (f"{SPARK} {spark} and {CLIENT} {client} are installed into the same "
                  f"pyspark/ folder")
        if _minor(spark) != _minor(client):
            return f"{shared}, as two different Spark releases: {fix}", None
        return None, f"{shared}, so its files are a mix of the two: {fix}"
    if connect and spark is None and client is None:
        return (f"master {master} is a Spark Connect server, and no Spark Connect client "
                f"is installed here: {CONNECT_EXTRA}"), None
    if not connect and spark is None:
        return (f"master {master} runs the copy job through spark-submit, which comes with "
                f"pyspark, not installed here: {SPARK_EXTRA} (or copy on a Spark Connect "
                "server: a master sc://HOST:15002)"), None
    return None, None


class SparkCheck:
    """The check of this environment's Spark before each copy its holder starts (a
    continuous run starts one every few seconds): a copy the environment cannot start is
    refused every time; a pair of pyspark distributions that merely differ in patch level
    is warned about once per holder, since the installed pair does not change meanwhile.
    Hold one for as long as the copies it checks (a loop, a task)."""

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def require(self, master: str, connect: bool) -> None:
        """Refuse, in one line naming what to install, a copy this environment cannot
        start on `master` (`connect`: a Spark Connect server's URL); log a warning the
        first time this holder meets it."""
        refusal, warning = judge(versions(), connect, master)
        if refusal is not None:
            raise TerminalError(refusal)
        if warning is not None and warning not in self._warned:
            self._warned.add(warning)
            log.warning(warning)


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])
