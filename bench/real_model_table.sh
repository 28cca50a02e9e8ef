#!/usr/bin/env bash
# The budget table on the real model (Qwen2.5-Coder-0.5B-Instruct, `make real-model`): BFCL's 8
# AST categories (the seeded subset bfcl:all:eval=$K, a prefix of eval=25's order), scored by BFCL's
# own checker, on the reference runner (the server computes no attention statistics, so SnapKV,
# PyramidKV and H2O run only there). One `pask sweep`: each entry is prefilled once per attention-
# statistics kind and every cell compresses and decodes from a copy (same records as cell by cell).
# Rows: Full; StreamingLLM; SnapKV per layer (our default) and per KV head (its authors'); PyramidKV;
# H2O with kvpress's normalised scores; PASK with the uncalibrated prior (4 groups of 6 layers);
# PASK calibrated when $CALIBRATED names its policy (`pask calibrate` on bfcl:all:calib=..., disjoint
# by id; each budget runs its own NAME.bB.json when there is one). Schedule: prefill for every
# method -- the stronger one for every baseline at every budget in the tiny model's calib sweep
# (bench/results/pask-tiny-fc-calib-baselines-n100); not re-chosen on this model, nothing chosen on
# its eval entries.
#   K=5 bash bench/real_model_table.sh      # resumable: rerun to finish; hours on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/qwen2.5-coder-0.5b-instruct}
NAME=$(basename "$MODEL")
K=${K:-5}
BUDGETS=${BUDGETS:-0.33,0.2}
GROUPS_N=${GROUPS_N:-4}
PRIOR=${PRIOR:-policies/$NAME.prior.json}
OUT=${OUT:-runs/real-model-table-eval$K}
RESULTS=${RESULTS:-bench/results/$NAME-table-eval$K}
MAX_TOKENS=${MAX_TOKENS:-256}
PASK=.venv/bin/pask
[[ -f "$MODEL/config.json" ]] || make -s real-model
[[ -f "$PRIOR" ]] || $PASK policy prior --model "$MODEL" --groups "$GROUPS_N" --budget 0.33 --out "$PRIOR"
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
common=(--model "$MODEL" --data "bfcl:all:eval=$K" --schedules prefill
        --tool-choice required --max-tokens "$MAX_TOKENS" --no-progress)
$PASK sweep "${common[@]}" --budgets "$BUDGETS" --policy "$PRIOR" \
  --methods full,streaming,snapkv:per_head=false,snapkv:per_head=true,pyramidkv:per_head=false,h2o:normalize=true,pask \
  --out "$OUT/prior" --results "$RESULTS/prior"
cells() { for d in "$@"; do [[ -f "$d/summary.json" ]] && echo "$d"; done; }  # run folders only
mapfile -t runs < <(cells "$OUT"/prior/*/)
if [[ -n "${CALIBRATED:-}" ]]; then
  # each budget with its own calibrated policy, CALIBRATED.bB.json (CALIBRATED: the files' stem, e.g.
  # policies/NAME; a CALIBRATED.json where a budget has none): one sweep per budget
  IFS=, read -ra budgets <<< "$BUDGETS"
  for b in "${budgets[@]}"; do
    policy="${CALIBRATED%.json}.b$b.json"
    [[ -f "$policy" ]] || policy=${CALIBRATED%.json}.json
    echo "calibrated PASK at b=$b: $policy"
    $PASK sweep "${common[@]}" --budgets "$b" --policy "$policy" --methods pask --out "$OUT/calibrated-b$b" \
      --results "$RESULTS/calibrated-b$b"
    mapfile -t -O "${#runs[@]}" runs < <(cells "$OUT/calibrated-b$b"/*/)
  done
fi
$PASK report "${runs[@]}" --out "$RESULTS" >/dev/null
cat "$RESULTS/report.md"
if [[ -n "${CALIBRATED:-}" ]]; then
  # paired bootstraps of calibrated PASK against the strongest baseline at each budget (picked on
  # these runs, which favours the baselines) and against Full KV
  commas=$BUDGETS
  cal="pask(calibrated)=$OUT/calibrated-b{b}/pask-prefill-{b}"
  bases=()
  for m in streaming snapkv+per_head=false snapkv+per_head=true pyramidkv+per_head=false h2o+normalize=true; do
    bases+=(--baseline "$(sed "s/=true//; s/+per_head=false//" <<< "$m")=$OUT/prior/$m-prefill-{b}")  # label: no '='
  done
  .venv/bin/python bench/paired_table.py --runs "$cal" "${bases[@]}" --budgets "$commas" \
    --out "$RESULTS/vs-strongest-baseline.md"
  .venv/bin/python bench/paired_table.py --runs "$cal" --baseline "full=$OUT/prior/full" --budgets "$commas" \
    --out "$RESULTS/vs-full.md"
  cat "$RESULTS/vs-strongest-baseline.md" "$RESULTS/vs-full.md"
fi
printf 'command: K=%s%s bash bench/real_model_table.sh\n' "$K" "${CALIBRATED:+ CALIBRATED=$CALIBRATED}" > "$RESULTS/meta.txt"
echo "wall (this invocation; a resumed run adds up): $SECONDS s" | tee -a "$RESULTS/wall.txt"
