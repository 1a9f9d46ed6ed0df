"""The copy job of one plan file as an Airflow task, on whichever Spark the flow uses: the
Spark provider's SparkSubmitOperator, except that when the flow's Spark is a Connect server
(a `spark_connect` `spark_default` connection, or `ferry.spark.master=sc://...` without
one) the job runs in the task's own process through that server, as the flow DAG's
`cycle` does: no spark-submit, no JVM. The backfill DAG maps it over its chunks."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ferry.airflow.tasks import job_of, spark_master, task_config, task_edge, warm_master


class CopyJobOperator(SparkSubmitOperator):
    """A copy job (`ferry/jobs/ferry_copy.py` with `--config`, `--flow` and `--plan` in its
    `application_args`). Through Connect, an exit code of 2 (bad config) fails the task
    without retries and 1 (a failed range) lets it retry: the retry resumes from what was
    committed, as a spark-submit job's would."""

    def execute(self, context: Any) -> Any:
        from ferry.errors import TerminalError, TransientError
        from ferry.spark.submit import run_copy

        path, name, plan = job_of(self)
        with task_edge():
            config = task_config(path, name)
            flow = config.flow(name)
            master = warm_master(flow, spark_master())
            if master is None:
                return super().execute(context)
            self.log.info("copy job of %s on the Spark Connect server %s", plan, master)
            code = run_copy(path, name, plan, master, loaded=flow,
                            connections=config.connections).exit_code
            if code == 2:
                raise TerminalError(f"the copy job through {master} refused its config or "
                                    "plan (exit 2): its lines are above")
            if code != 0:
                raise TransientError(f"the copy job through {master} failed (exit {code}): "
                                     "its lines are above; nothing past the last commit was "
                                     "kept, so a retry resumes there")
        return None
