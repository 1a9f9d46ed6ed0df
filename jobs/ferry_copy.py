"""The copy job's spark-submit entry point, for a checkout or an image that carries this
folder:

    spark-submit [options] jobs/ferry_copy.py --config mm2.properties --flow A->B --plan p.json

Thin on purpose: the job is `ferry.jobs.ferry_copy` in the installed package (the one the
DAGs' SparkSubmitOperator and `ferry mirror` run), so both behave alike.
"""

from __future__ import annotations

from ferry.jobs.ferry_copy import main

if __name__ == "__main__":
    from ferry import crash

    crash.exit_now(main())  # not sys.exit: see there
