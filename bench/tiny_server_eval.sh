#!/usr/bin/env bash
# Full-KV accuracy of a model through the SGLang server (`make serve`, the same flags), greedy, on
# the synthetic eval split, scored by BFCL's checker via `pask eval --backend openai`.
# Uses a server already at $HOST:$PORT or starts `make serve` and stops it by PID afterwards.
#   bash bench/tiny_server_eval.sh                         # 200 entries, tool_choice=required
#   N=400 TOOL_CHOICE=auto bash bench/tiny_server_eval.sh
# Writes the `pask report` of the run (md, json with 95% CIs, png) into RESULTS (bench/results/...).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib_serve.sh
N=${N:-200}
PROFILE=${PROFILE:-tiny}
TOOL_CHOICE=${TOOL_CHOICE:-required}
MAX_TOKENS=${MAX_TOKENS:-128}
WORKERS=${WORKERS:-4}
OUT=${OUT:-runs/server-$(basename "$MODEL")-$TOOL_CHOICE-n$N}
RESULTS=${RESULTS:-bench/results/$(basename "$MODEL")-server-$TOOL_CHOICE-n$N}
ensure_server

start=$(date +%s)
.venv/bin/pask eval --data "synthetic:eval:$N:$PROFILE" --backend openai --base-url "http://$HOST:$PORT/v1" \
  --method full --tool-choice "$TOOL_CHOICE" --max-tokens "$MAX_TOKENS" --workers "$WORKERS" \
  --out "$OUT"
echo "tiny_server_eval: $MODEL, tool_choice=$TOOL_CHOICE, $N entries, $(( $(date +%s) - start )) s; results in $OUT"
.venv/bin/pask report "$OUT" --out "$RESULTS" | tail -n 1
