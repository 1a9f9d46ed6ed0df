#!/usr/bin/env bash
# The test command: sets everything up, then lint, type checks and the whole suite
# (unit tests, and integration tests against real local Kafka clusters, Spark and Delta).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -k policy
# (FERRY_TEST_WORKERS=0 runs it in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/test-tools.sh
export PATH="$(pwd)/.venv/bin:$PATH"
unset SPARK_HOME SPARK_REMOTE SPARK_CONNECT_MODE_ENABLED
echo "== ruff"
ruff check include tests dags jobs bench plugins
echo "== mypy"
mypy
echo "== import layers"
lint-imports
if [ $# -eq 0 ]; then
  # Installs, timed apart from the suite: clean virtualenvs of the package (both ends of
  # its dependency ranges; the provider in a clean Airflow) for the tests that install it,
  # kept in .cache/ while what they come from stays the same (tests/support/installs.py).
  echo "== installs for the suite"
  python -m tests.support.installs
fi
echo "== pytest"
mkdir -p test-artifacts
# Parallel workers (pytest-xdist), each module whole on one worker so its module-scoped
# services start once; the session's services (brokers, the warm Spark Connect server) run
# once for all workers (tests/support/services.py). Five workers on two cores: much of a
# test's time is waiting on brokers, JVMs and Airflow's scheduler, not CPU, and most tests
# copy on the local runner, not Spark (tests/support/runner.py). Measured on 2 cores: four
# workers 22 min, five 19, six 19 (the cores full). The modules that run for minutes
# go out first, then the rest, most tests first (tests/conftest.py). Each test's time:
# test-artifacts/junit*.xml, and when each ran on which worker: test-artifacts/timeline.tsv.
# A worker that dies (a native crash, an os._exit) fails the test it ran and is not
# replaced: a replacement runs the same test again, and once left the whole session
# waiting for ever on a worker that had nothing left to run.
workers="${FERRY_TEST_WORKERS:-5}"
exec pytest -n "$workers" --dist loadscope --max-worker-restart=0 \
  --junitxml=test-artifacts/junit.xml "$@"
