#!/usr/bin/env bash
# Calibration on the real model (Qwen2.5-Coder-0.5B-Instruct, `make real-model`): `pask calibrate` on
# bfcl:all:calib=25 -- BFCL's 8 AST categories outside the eval=25 subset the tables score, disjoint
# by id (real BFCL prompts and tools, as the eval; the synthetic bfcl_like profile was not used
# because its schemas are ours). Layer groups: 4 of 6 layers (not searched on this model).
# Made cheap enough for 2 CPU cores: the sensitivity probes rank by the gold call's teacher-forced
# NLL (one forward per probe and entry, no generation; NLL and failure agree at Pearson 0.91 over
# the tiny model's 36 calib probes) and the family search by the mean KL from Full KV's next-token
# distributions along the gold call (OBJECTIVE=kl, the default; OBJECTIVE=nll is what the first
# shipped policy used, and it chose a member that loses argument names: calibrate/search.py says
# why); the held-out check generates and is scored by BFCL's checker. Resumable per stage (rerun
# the same command with the same code).
#   bash bench/real_model_calibration.sh     # about an hour on 2 idle cores
# REUSE=RECORD adopts the sensitivity and distortion stages of a record of the same configuration
# written by other code (pask calibrate --reuse-stages; the report names that code).
# Writes the policies ($NAME.json = b 0.33, $NAME.b0.33.json, $NAME.b0.2.json) and the report
# under OUT's folder; SHIP=1 copies the per-budget files into policies/ (the shipped set: one file per
# budget) and the report into bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/qwen2.5-coder-0.5b-instruct}
NAME=$(basename "$MODEL")
K=${K:-25}
OUT=${OUT:-runs/real-model-calibration/$NAME.json}
PASK=${PASK:-.venv/bin/pask}
[[ -f "$MODEL/config.json" ]] || make -s real-model
mkdir -p "$(dirname "$OUT")"
SECONDS=0
$PASK calibrate --model "$MODEL" --data "bfcl:all:calib=$K" --groups 4 --budgets 0.33,0.2 \
  --fit-n 24 --probe-n 12 --check-n 24 --max-tokens 256 --tool-choice required \
  --sensitivity-signal nll --search-objective "${OBJECTIVE:-kl}" ${REUSE:+--reuse-stages "$REUSE"} --out "$OUT"
echo "wall (this invocation; a resumed run adds up): $SECONDS s" | tee -a "${OUT%.json}.wall.txt"
if [[ "${SHIP:-0}" == 1 ]]; then
  dir=$(dirname "$OUT")
  cp "$dir/$NAME".b0.33.json "$dir/$NAME".b0.2.json policies/
  mkdir -p "bench/results/$NAME-calibration"
  cp "$dir/$NAME".calibration.{md,json} "$dir/$NAME".{S,D}.png "${OUT%.json}.wall.txt" "bench/results/$NAME-calibration/"
  printf 'command: %s\ncode: %s\n' "${REUSE:+REUSE=$REUSE }SHIP=1 bash bench/real_model_calibration.sh" \
    "$(git rev-parse HEAD)" > "bench/results/$NAME-calibration/meta.txt"
fi
