#!/usr/bin/env bash
# KV sensitivity of a model on the synthetic eval split, with the reference runner (pask eval
# --backend hf): full, then streaming / h2o / snapkv / pyramidkv / pask (prior policy) at each
# budget, merged by `pask report` into one methods x budgets x categories table and a PNG.
#   MODEL=models/pask-tiny-fc N=200 bash bench/tiny_sensitivity.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/pask-tiny-fc}
N=${N:-200}
BUDGETS=${BUDGETS:-"0.5 0.33 0.2"}
METHODS=${METHODS:-"streaming h2o snapkv pyramidkv pask"}
OUT=${OUT:-runs/sensitivity-$(basename "$MODEL")}
MAX_TOKENS=${MAX_TOKENS:-128}
TOOL_CHOICE=${TOOL_CHOICE:-required}
PASK=.venv/bin/pask
DATA="synthetic:eval:$N:tiny"
POLICY=${POLICY:-$OUT/prior.json}
mkdir -p "$OUT"
[[ -f "$POLICY" ]] || $PASK policy prior --model "$MODEL" --groups 2 --budget 0.33 --out "$POLICY"

common=(--data "$DATA" --backend hf --model "$MODEL" --max-tokens "$MAX_TOKENS" --tool-choice "$TOOL_CHOICE" --no-progress)
$PASK eval "${common[@]}" --method full --out "$OUT/full" | tail -n 3
for b in $BUDGETS; do
  for m in $METHODS; do
    extra=(--budget "$b")
    [[ "$m" == pask ]] && extra+=(--policy "$POLICY")
    $PASK eval "${common[@]}" --method "$m" "${extra[@]}" --out "$OUT/$m-$b" | tail -n 3
  done
done
$PASK report "$OUT"/full "$OUT"/*-0.* --out "$OUT/report"
