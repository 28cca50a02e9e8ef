#!/usr/bin/env bash
# BFCL for real on the real model: Qwen2.5-Coder-0.5B-Instruct (`make real-model`), Full KV, served
# by `make serve MODEL=...` (stock SGLang KV, no policy), scored by BFCL's own ast_checker.
# Data: bfcl:all:eval=$K -- a fixed, seeded (seed 0), stratified subset of the 8 AST categories of
# the installed bfcl-eval: per category the K entries first in sha256("0:<id>") order (all of the
# two small live categories at K=25: 16 and 24 entries). bfcl:all:calib=$K (the rest, disjoint by
# id) is what calibration may use; nothing here is chosen from this subset.
# Settings: tool_choice=required (this model never emits <tool_call> on auto), greedy, 256 tokens,
# WORKERS concurrent requests through the server's batching. Resumable: rerun the same command and
# finished entries are skipped (OUT is kept).
#   bash bench/real_model_bfcl.sh        # K=25: 190 entries (hours on 2 cores)
# Writes RESULTS/report.md (+ .json, .png: per category with 95% bootstrap intervals, the mean over
# the 8) and RESULTS/wall.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-30117}
MODEL=${MODEL:-models/qwen2.5-coder-0.5b-instruct}
source bench/lib_serve.sh
K=${K:-25}
WORKERS=${WORKERS:-4}
MAX_TOKENS=${MAX_TOKENS:-256}
OUT=${OUT:-runs/real-model-bfcl-eval$K-full}
RESULTS=${RESULTS:-bench/results/qwen2.5-coder-0.5b-bfcl-eval$K-full}
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
[[ -f "$MODEL/config.json" ]] || make -s real-model
ensure_server
echo "[$SECONDS s] Full KV: pask eval --backend openai on bfcl:all:eval=$K"
.venv/bin/pask eval --backend openai --base-url "http://$HOST:$PORT/v1" --data "bfcl:all:eval=$K" \
  --tool-choice required --max-tokens "$MAX_TOKENS" --workers "$WORKERS" --request-timeout 900 \
  --no-progress --out "$OUT" | tail -n 12
.venv/bin/pask report "$OUT" --out "$RESULTS" >/dev/null
cat "$RESULTS/report.md"
echo "wall (this invocation; a resumed run adds up): $SECONDS s" | tee -a "$RESULTS/wall.txt"
