#!/usr/bin/env bash
# The calibrated policies (policies/pask-tiny-fc.b<b>.json, from pask calibrate on the calib split)
# on the tiny eval split, once, each at its own budget (prefill schedule, constrained, 128 tokens),
# then the paired bootstrap against SnapKV prefill's runs of bench/tiny_sensitivity.sh (same data
# and settings) into RESULTS/report.md. Two budgets run at a time (JOBS).
#   bash bench/tiny_calibrated_eval.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/pask-tiny-fc}
N=${N:-200}
BUDGETS=${BUDGETS:-"0.5 0.33 0.2"}
OUT=${OUT:-runs/calibrated-$(basename "$MODEL")}
BASE=${BASE:-runs/sensitivity-$(basename "$MODEL")}
RESULTS=${RESULTS:-bench/results/$(basename "$MODEL")-calibrated-n$N}
JOBS=${JOBS:-2}
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
for b in $BUDGETS; do
  .venv/bin/pask eval --backend hf --model "$MODEL" --data "synthetic:eval:$N:tiny" --method pask \
    --policy "policies/$(basename "$MODEL").b$b.json" --budget "$b" --schedule prefill \
    --tool-choice required --max-tokens 128 --out "$OUT/pask-prefill-$b" &
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
done
wait
.venv/bin/python bench/paired_table.py --runs "pask(calibrated)=$OUT/pask-prefill-{b}" \
  --baseline "snapkv prefill=$BASE/snapkv-prefill-{b}" --budgets "$(echo $BUDGETS | tr ' ' ',')" \
  --out "$RESULTS/report.md"
echo "wall ${SECONDS}s" | tee "$RESULTS/wall.txt"
