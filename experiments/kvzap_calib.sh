#!/usr/bin/env bash
# KVzap (the learned scorer alone, methods/kvzap.py) against KVzip, whose scores it was fitted to,
# on the reference runner at the same budgets: the calib split only (the scorer was fitted on
# train; eval is not touched), KVzip's strongest schedule (prefill), tool_choice=required, greedy,
# 128 tokens. One `pask sweep` (both methods share each prompt's forward where their cache kinds
# allow) and the paired bootstrap of KVzap against KVzip per budget.
#   bash experiments/kvzap_calib.sh                       # N=100, budgets 0.33 and 0.2 (~2 min, 1 thread)
#   N=300 BUDGETS=0.5,0.33,0.2 bash experiments/kvzap_calib.sh
# Writes RESULTS/report.md (+ .json, .png, meta.json) and RESULTS/paired.md.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100}
BUDGETS=${BUDGETS:-0.33,0.2}
MODEL=${MODEL:-models/pask-tiny-fc}
SCORER=${SCORER:-policies/pask-tiny-fc.kvzap.safetensors}
RUNS=${RUNS:-runs/calib-kvzap}
RESULTS=${RESULTS:-experiments/results/pask-tiny-fc-calib-kvzap-n$N}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
$PY -m sglang_pask.cli sweep --model "$MODEL" --data "synthetic:calib:$N:tiny" \
    --methods "kvzip,kvzap:scorer=$SCORER" --budgets "$BUDGETS" --schedules prefill --tool-choice required \
    --max-tokens 128 --jobs 1 --no-progress --out "$RUNS" --results "$RESULTS"
$PY bench/paired_table.py --runs "kvzap=$RUNS/kvzap+scorer=${SCORER//\//_}-prefill-{b}" \
    --baseline "kvzip=$RUNS/kvzip-prefill-{b}" --budgets "$BUDGETS" --out "$RESULTS/paired.md"
