#!/usr/bin/env bash
# Which tiny-model policy ships at each budget (issue: one policy both accurate and fast)? Accuracy
# on calib entries no calibration read: synthetic:calib:800:tiny without the learned calibrations'
# 600 (entries 600..799; the lookup's calibration read the first 300), n = 200, prefill, tool_choice
# required, 128 tokens. Rows: the lookup (policies/, at 0.2 experiments/policies/*.lookup.b0.2), the learned-scorer policies of both
# calibrations (per KV head + ranked split; --equal-pools), and KVzip at the same budgets. The
# serving side is bench/server_capacity.py (commands in docs/evaluation.md). Resumable.
#   bash experiments/learned_ship_decision.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LEARNED=${LEARNED:-experiments/runs/learned-calibration}
POOLED=${POOLED:-experiments/runs/learned-calibration-pooled}
DATA="synthetic:calib:800:tiny:exclude=$LEARNED/pask-tiny-fc.calibration.json"
OUT=${OUT:-experiments/runs/ship-decision}
RESULTS=${RESULTS:-experiments/results/pask-tiny-fc-learned-ship-decision-calib200}
PASK=${PASK:-.venv/bin/pask}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--model models/pask-tiny-fc --data "$DATA" --schedules prefill --tool-choice required --max-tokens 128
        --no-progress)
for b in 0.5 0.33 0.2; do
  lookup=experiments/policies/pask-tiny-fc.lookup.b$b.json  # shipped until the learned 0.2 replaced it
  [[ -f "$lookup" ]] || lookup=policies/pask-tiny-fc.b$b.json
  $PASK sweep "${common[@]}" --budgets $b --policy "$lookup" --methods pask \
    --out "$OUT/lookup" --results "$OUT/reports/lookup-$b" > /dev/null
  $PASK sweep "${common[@]}" --budgets $b --policy "$LEARNED/pask-tiny-fc.b$b.json" --methods pask \
    --out "$OUT/learned" --results "$OUT/reports/learned-$b" > /dev/null
  [[ -f "$POOLED/pask-tiny-fc.b$b.json" ]] && $PASK sweep "${common[@]}" --budgets $b \
    --policy "$POOLED/pask-tiny-fc.b$b.json" --methods pask --out "$OUT/learned-pooled" \
    --results "$OUT/reports/learned-pooled-$b" > /dev/null
done
$PASK sweep "${common[@]}" --budgets 0.5,0.33,0.2 --methods kvzip --out "$OUT/kvzip" --results "$OUT/reports/kvzip" > /dev/null
mkdir -p "$RESULTS"
runs=()
for d in "$OUT"/{lookup,learned,learned-pooled,kvzip}/*/; do [[ -f "$d/summary.json" ]] && runs+=("$d"); done
$PASK report "${runs[@]}" --out "$RESULTS" > /dev/null
cat "$RESULTS/report.md"
printf '{"command": "bash experiments/learned_ship_decision.sh", "data": "%s"}\n' "$DATA" > "$RESULTS/meta.json"
