#!/usr/bin/env bash
# Accuracy through the server (Full KV, no policy) with tool-argument schema enforcement on vs off:
# `make serve TOOL_STRICT=2` (SGLang's SGLANG_TOOL_STRICT_LEVEL=2: every call's arguments follow
# the tool's JSON schema) vs `TOOL_STRICT=0` (SGLang's default: only the tool names are
# constrained), each scored with `pask eval --backend openai`, tool_choice=required, greedy, 128
# tokens, on the calib split (where a default would be chosen) and the eval split (reported).
#   bash experiments/strict_schema_eval.sh                 # N=200 per split
# Writes RESULTS/<split>.md (bench/paired_table.py: strict - off, paired 95% bootstrap) and wall.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-30112}
source bench/lib_serve.sh
N=${N:-200}
SPLITS=${SPLITS:-"calib eval"}
WORKERS=${WORKERS:-4}
NAME=$(basename "$MODEL")
OUT=${OUT:-runs/strict-schema-$NAME-n$N}
RESULTS=${RESULTS:-experiments/results/$NAME-strict-schema-n$N}
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
for split in $SPLITS; do
  for level in 2 0; do
    TOOL_STRICT=$level SERVE_ARGS="--sleep-on-idle" ensure_server
    echo "[$SECONDS s] $split, TOOL_STRICT=$level: pask eval --backend openai ($N entries)"
    # run folders are named <label>-<budget> for bench/paired_table.py (Full KV: budget 1)
    .venv/bin/pask eval --backend openai --base-url "http://$HOST:$PORT/v1" --method full \
      --data "synthetic:$split:$N:tiny" --tool-choice required --max-tokens 128 --workers "$WORKERS" \
      --out "$OUT/$split-strict$level-1" | tail -n 1
    stop_started_server
    started_pid=""
  done
  .venv/bin/python bench/paired_table.py --runs "strict, level 2=$OUT/$split-strict2-{b}" \
    --baseline "off, level 0=$OUT/$split-strict0-{b}" --budgets 1 --out "$RESULTS/$split.md"
  echo "$split split:"; cat "$RESULTS/$split.md"
done
echo "wall ${SECONDS}s ($(nproc) cpus; N=$N, splits $SPLITS)" | tee "$RESULTS/wall.txt"
