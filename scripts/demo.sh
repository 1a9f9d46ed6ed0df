#!/usr/bin/env bash
# The demo command: sets everything up, starts two fresh local Kafka clusters (source,
# target) in .ferry/demo, creates sample topics, runs the flow's Airflow DAG once
# in-process (dag.test: heartbeat, topology sync, plan, Spark copy job, record,
# checkpoints) and prints a report.
# The clusters keep running afterwards; stop them with:
#   .venv/bin/ferry local down --dir .ferry/demo
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$(pwd)/.venv/bin:$PATH"
unset SPARK_HOME SPARK_REMOTE SPARK_CONNECT_MODE_ENABLED
dir=.ferry/demo
started=$(date +%s)

echo "== fresh local clusters in $dir"
ferry local down --dir "$dir" --wipe >/dev/null
rm -rf "$dir/state" "$dir/airflow"
clusters=$(ferry local up --dir "$dir" --json)
bootstrap() { python -c 'import json,sys; print({c["alias"]: c["bootstrap"] for c in json.load(sys.stdin)}[sys.argv[1]])' "$1" <<<"$clusters"; }
export FERRY_SOURCE_BOOTSTRAP FERRY_TARGET_BOOTSTRAP
FERRY_SOURCE_BOOTSTRAP=$(bootstrap source)
FERRY_TARGET_BOOTSTRAP=$(bootstrap target)
ferry local status --dir "$dir"

echo "== the config: examples/demo.properties"
ferry validate examples/demo.properties | sed -n '1,8p'

echo "== sample topics on the source"
python -m ferry.local.demo seed examples/demo.properties

echo "== the flow's DAG, once, in-process (dag.test)"
mkdir -p "$dir/airflow"
env_json=$(python - <<'PY'
import json, os
from ferry.airflow.testing import airflow_env
env = airflow_env(os.path.abspath(".ferry/demo/airflow"), os.path.abspath("examples/demo.properties"))
print(json.dumps({k: v for k, v in env.items() if k.startswith(("AIRFLOW", "FERRY"))}))
PY
)
eval "$(python -c 'import json,shlex,sys; print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in json.loads(sys.argv[1]).items()))' "$env_json")"
python -m ferry.airflow.testing "$(pwd)/examples/demo.properties" ferry_source_to_target \
  > "$dir/dag-run.log" 2>&1 || { tail -40 "$dir/dag-run.log"; echo "demo: the DAG run failed (full log: $dir/dag-run.log)"; exit 1; }
grep -E "ferry copy job|lane [0-9]+:" "$dir/dag-run.log" | sed -E 's/.*(ferry copy job|lane [0-9]+:)/\1/' || true
grep -E "^FERRY_DAG_RUN " "$dir/dag-run.log" | python -c 'import json,sys; r=json.loads(sys.stdin.read().split(" ",1)[1]); print("dag run:", r["state"], "tasks:", ", ".join(f"{t} {s}" for t, s in sorted(r["tasks"].items())))' || true

echo "== report"
python -m ferry.local.demo report examples/demo.properties
echo
echo "demo finished in $(( $(date +%s) - started ))s. DAG log: $dir/dag-run.log"
echo "The clusters are still running. Stop them with: .venv/bin/ferry local down --dir $dir"
