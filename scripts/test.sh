#!/usr/bin/env bash
# The test command: sets everything up, then lint, type checks and the whole suite
# (unit tests, and integration tests against real local Kafka clusters, Spark and Delta).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -k policy
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$(pwd)/.venv/bin:$PATH"
unset SPARK_HOME SPARK_REMOTE SPARK_CONNECT_MODE_ENABLED
echo "== ruff"
ruff check include tests dags jobs bench
echo "== mypy"
mypy
echo "== import layers"
lint-imports
echo "== pytest"
mkdir -p test-artifacts
exec pytest "$@"
