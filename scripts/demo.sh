#!/usr/bin/env bash
# The demo command: sets everything up, starts two local Kafka clusters (source, target)
# in .ferry/demo, and shows what Ferry resolves from the embedded default config.
# The clusters keep running; stop them with: .venv/bin/ferry local down --dir .ferry/demo
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$(pwd)/.venv/bin:$PATH"
dir=.ferry/demo

echo "== starting local clusters in $dir"
clusters=$(ferry local up --dir "$dir" --json)
export FERRY_SOURCE_BOOTSTRAP FERRY_TARGET_BOOTSTRAP
FERRY_SOURCE_BOOTSTRAP=$(python -c 'import json,sys; print({c["alias"]: c["bootstrap"] for c in json.load(sys.stdin)}["source"])' <<<"$clusters")
FERRY_TARGET_BOOTSTRAP=$(python -c 'import json,sys; print({c["alias"]: c["bootstrap"] for c in json.load(sys.stdin)}["target"])' <<<"$clusters")
ferry local status --dir "$dir"

echo "== ferry validate examples/demo.properties"
ferry validate examples/demo.properties

echo
echo "The clusters are still running. Stop them with: .venv/bin/ferry local down --dir $dir"
