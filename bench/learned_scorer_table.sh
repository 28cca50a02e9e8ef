#!/usr/bin/env bash
# The learned scorer's table (tiny model, EVAL split, n = 200): every method at its strongest
# schedule (prefill: the stronger one for every baseline on calib, bench/results/pask-tiny-fc-calib-
# baselines-2025-n100; KVzip compresses the context once, as its authors do) at budgets 0.5, 0.33,
# 0.2 and 0.1, in one `pask report`, with paired bootstraps of each PASK row against KVzip and
# against Full KV. Rows: Full; StreamingLLM, SnapKV per KV head, AdaKV, Expected Attention, KVzip
# (kvpress's defaults); the learned scorer alone (KVzap: KVzip's ranking on the scorer's
# predictions, policies/pask-tiny-fc.kvzap.safetensors, fitted on train); PASK's lookup (the
# calibrated class-priority policies: policies/ at 0.5 and 0.33, experiments/policies/*.lookup.b0.2);
# PASK with the learned scorer, calibrated on calib with `pask calibrate --attention-blend --scorer
# --equal-pools` (experiments/policies/*.learned.b0.5/.b0.33, the shipped policies/*.b0.2) and
# without --equal-pools (per KV head, ranked split: experiments/policies/*.learned-heads.*); and the
# equal-pools policies reading KVzip's true scores (attention_stat=kvzip: a reconstruction forward per
# compression), what the prediction costs. At 0.1 no policy was calibrated: each PASK row runs its
# 0.2 policy at 0.1.
# Nothing here chooses anything. Resumable (rerun to finish).
#   bash bench/learned_scorer_table.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/pask-tiny-fc}
NAME=$(basename "$MODEL")
N=${N:-200}
BUDGETS=${BUDGETS:-0.5 0.33 0.2 0.1}
SCORER=${SCORER:-policies/$NAME.kvzap.safetensors}
NOTEBOOK=${NOTEBOOK:-experiments/policies}
OUT=${OUT:-runs/learned-scorer-table}  # resume state (about 40 min on one thread: one session)
RESULTS=${RESULTS:-bench/results/$NAME-learned-scorer-table-n$N}
PASK=${PASK:-.venv/bin/pask}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
common=(--model "$MODEL" --data "synthetic:eval:$N:tiny" --schedules prefill --tool-choice required
        --max-tokens 128 --no-progress)
commas=${BUDGETS// /,}
$PASK sweep "${common[@]}" --budgets "$commas" --out "$OUT/baselines" --results "$OUT/reports/baselines" \
  --methods "full,streaming,snapkv:per_head=true,adakv,expected_attention,kvzip,kvzap:scorer=$SCORER"
# a row's policy at budget b: the notebook's variant when there is one, else the shipped file; at
# 0.1 the 0.2 policy
policy_for() {
  local b=$1 f; [[ "$b" == 0.1 ]] && b=0.2
  f="$NOTEBOOK/$NAME.$2.b$b.json"; [[ -f "$f" ]] || f="policies/$NAME.b$b.json"; echo "$f"
}
for b in $BUDGETS; do
  $PASK sweep "${common[@]}" --budgets "$b" --policy "$(policy_for "$b" lookup)" --methods pask \
    --out "$OUT/lookup" --results "$OUT/reports/lookup-$b"
  $PASK sweep "${common[@]}" --budgets "$b" --policy "$(policy_for "$b" learned)" \
    --methods "pask,pask:attention_stat=kvzip" --out "$OUT/learned" --results "$OUT/reports/learned-$b"
  $PASK sweep "${common[@]}" --budgets "$b" --policy "$(policy_for "$b" learned-heads)" --methods pask \
    --out "$OUT/learned-heads" --results "$OUT/reports/learned-heads-$b"
done
cells() { for d in "$@"; do [[ -f "$d/summary.json" ]] && echo "$d"; done; }
mapfile -t runs < <(cells "$OUT"/baselines/*/)
for d in $(cells "$OUT"/lookup/*/); do runs+=("$d"); done
for d in $(cells "$OUT"/learned/*/ "$OUT"/learned-heads/*/); do runs+=("$d"); done
$PASK report "${runs[@]}" --out "$RESULTS" > /dev/null
cat "$RESULTS/report.md"
# paired: each PASK row against KVzip and against Full KV, per budget
for row in "pask(learned)=$OUT/learned/pask-prefill-{b}" "pask(lookup)=$OUT/lookup/pask-prefill-{b}" \
           "pask(learned per head)=$OUT/learned-heads/pask-prefill-{b}" \
           "pask(learned policy, kvzip scores)=$OUT/learned/pask+attention_stat=kvzip-prefill-{b}"; do
  label=${row%%=*}
  for base in "kvzip=$OUT/baselines/kvzip-prefill-{b}" "full=$OUT/baselines/full"; do
    .venv/bin/python bench/paired_table.py --runs "$row" --baseline "$base" --budgets "$commas" \
      --out "$RESULTS/paired-${label//[^a-z]/_}-vs-${base%%=*}.md" > /dev/null
  done
done
cat "$RESULTS"/paired-*.md
echo "wall (this invocation; a resumed run adds up): $SECONDS s" | tee -a "$RESULTS/wall.txt"
.venv/bin/python - "$RESULTS" <<'PY'
import json, os, platform, subprocess, sys, time
out = sys.argv[1]
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
meta = {"command": "bash bench/learned_scorer_table.sh", "code": f"git {commit}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "wall": open(os.path.join(out, "wall.txt")).read().strip().splitlines()}
open(os.path.join(out, "meta.json"), "w").write(json.dumps(meta, indent=1) + "\n")
PY
