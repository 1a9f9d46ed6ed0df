"""Which copy runner runs a cycle's copy (`ferry.copy.runner`).

Two runners, for two reasons. Spark (`ferry.spark.submit.SparkRunner`) runs the lanes as
Spark tasks, on as many machines as the cluster has: the engine for flows bigger than one
machine, for backlogs and backfills. The local runner (`ferry.runtime.local.LocalRunner`)
runs them as threads of the cycle's own process, with nothing to start: a continuous loop's
cycle is then only its reads, sends and commits (its clients kept from cycle to cycle), where
a Spark job per cycle costs a job's scheduling at least. Both run the same writers (ids,
fencing, positions, takeover), so a flow can move from one to the other between cycles.
"""

from __future__ import annotations

from typing import Literal

Runner = Literal["local", "spark"]

RUNNER_CHOICES = ("auto", "local", "spark")
"""`ferry.copy.runner`'s values; `auto` picks by how the flow runs (`runner_for`)."""


def runner_for(setting: str, looping: bool, planned: int | None = None,
               local_max: int = 0, starts_spark: bool = True) -> Runner:
    """The runner of a cycle under `ferry.copy.runner` = `setting`: `local` or `spark` as
    set; `auto` (the default) local in a continuous loop (`looping`), where a cycle copies a
    second's records and a Spark job each second would be most of its time. For a run of
    its own, once its plan is known (`planned` offsets): local when that is at most
    `local_max` (`ferry.copy.local.max.records`) and Spark would be started for it
    (`starts_spark`: spark-submit, not a warm Spark Connect server), where the start costs
    more than the copy; else Spark, the engine for backlogs."""
    if setting == "local" or (setting == "auto" and looping):
        return "local"
    if setting == "auto" and planned is not None and starts_spark and planned <= local_max:
        return "local"
    return "spark"
