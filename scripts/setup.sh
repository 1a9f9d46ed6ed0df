#!/usr/bin/env bash
# Sets up everything Ferry needs on a fresh machine, idempotently:
#   1. a virtualenv in .venv with the pinned lock (requirements.txt) and ferry itself;
#   2. the Kafka broker jars (Maven Central) for the local clusters;
#   3. the Delta Lake jars (Maven Central) for Spark.
# Needs: python3 >= 3.11, java >= 17, mvn; no root, no system package. Re-running skips what
# is already in place. What only the tests need (a browser, promtool) is
# scripts/test-tools.sh's, which the test command runs after this.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

die() { echo "setup: $*" >&2; exit 2; }

py=${FERRY_PYTHON:-python3}
command -v "$py" >/dev/null || die "python3 not found: install Python >= 3.11 or set FERRY_PYTHON"
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "Python >= 3.11 is required ($("$py" --version 2>&1)); set FERRY_PYTHON to one"
command -v java >/dev/null || die "java not found: install a JDK >= 17 (Kafka 4 and Spark 4 need it)"
command -v mvn >/dev/null || die "mvn not found: install Maven (it fetches the Kafka and Delta jars)"

venv="$root/.venv"
stamp="$venv/.ferry-lock.sha256"
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  "$py" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing pinned Python dependencies (first run builds pyspark: a few minutes)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip==26.3"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
  "$venv/bin/python" -m pip check
  echo "$want" > "$stamp"
fi

echo "setup: fetching jars (Kafka brokers, Delta Lake) from Maven Central"
"$venv/bin/ferry" local jars
echo "setup: done"
