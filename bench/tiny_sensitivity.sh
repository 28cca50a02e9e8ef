#!/usr/bin/env bash
# KV sensitivity of a model on the synthetic eval split with the reference runner: full, then every
# method at every budget under every schedule, in one `pask sweep` (resumable: rerun to finish),
# which writes the report (md, json with 95% CIs, png) and meta.json (command, commit, wall time)
# into RESULTS.
#   MODEL=models/pask-tiny-fc N=200 bash bench/tiny_sensitivity.sh
# Lists (BUDGETS, METHODS, SCHEDULES) may be space- or comma-separated; a method takes options as
# NAME:KEY=VALUE (e.g. h2o:normalize=true).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/pask-tiny-fc}
N=${N:-200}
BUDGETS=${BUDGETS:-"0.5 0.33 0.2"}
# h2o: the paper's scores; h2o:normalize=true: kvpress's normalised scores (ObservedAttention) with
# H2O's recent half; h2o:normalize=true:recent_ratio=0: ObservedAttentionPress exactly.
METHODS=${METHODS:-"full streaming h2o h2o:normalize=true h2o:normalize=true:recent_ratio=0 snapkv pyramidkv random pask"}
SCHEDULES=${SCHEDULES:-"prefill continuous"}
OUT=${OUT:-runs/sensitivity-$(basename "$MODEL")}
RESULTS=${RESULTS:-bench/results/$(basename "$MODEL")-sensitivity-n$N}
MAX_TOKENS=${MAX_TOKENS:-128}
TOOL_CHOICE=${TOOL_CHOICE:-required}
JOBS=${JOBS:-2}
PASK=.venv/bin/pask
# the committed prior policy of the model if there is one, else a fresh prior
PRIOR=policies/$(basename "$MODEL").prior.json
[[ -f "$PRIOR" ]] || PRIOR=$OUT/prior.json
POLICY=${POLICY:-$PRIOR}
commas() { echo "$*" | tr -s ' ,' ','; }
mkdir -p "$OUT"
[[ -f "$POLICY" ]] || $PASK policy prior --model "$MODEL" --groups 2 --budget 0.33 --out "$POLICY"
$PASK sweep --model "$MODEL" --data "synthetic:eval:$N:tiny" --methods "$(commas $METHODS)" \
  --budgets "$(commas $BUDGETS)" --schedules "$(commas $SCHEDULES)" --policy "$POLICY" \
  --tool-choice "$TOOL_CHOICE" --max-tokens "$MAX_TOKENS" --jobs "$JOBS" --out "$OUT" --results "$RESULTS"
