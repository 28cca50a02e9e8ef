#!/usr/bin/env bash
# Issue 11's table: on the tiny **eval** split (n = 200, constrained, prefill schedule, 128 tokens),
# every method at budgets 0.5 / 0.33 / 0.2 in one `pask report` (95% bootstrap intervals, plot of
# accuracy vs budget), then paired bootstraps of calibrated PASK against the strongest baseline at
# each budget and against Full KV. Nothing here feeds back into a policy: the policies come from
# `pask calibrate` on the calib split.
#   bash bench/tiny_calibration_report.sh
# Rows: full; the baselines (streaming, h2o as in its paper, h2o with kvpress's normalised scores,
# snapkv and pyramidkv per layer, random) under the prefill schedule, the stronger schedule for every one of them
# on the calib split (bench/results/pask-tiny-fc-calib-baselines-n100); pask with the uncalibrated
# prior; pask with the calibrated per-budget policies (policies/NAME.b<b>.json); and the ablations:
# floors only (residual shares equal), residual only (floors 0), without span delimiters, and the
# 0.33 policy used at the other budgets; pask calibrated with --attention-blend ($ATTN). Newer baselines (issue 24): SnapKV and PyramidKV per KV
# head (their authors' form), AdaKV, Expected Attention and KVzip, with kvpress's defaults. The
# sturdier calibration (issue 24: 360 fit entries, paired with KVzip, 5-fold estimate, joint probe,
# fractional floors; $STURDY) and its attention-informed family (SnapKV's or KVzip's statistic, per
# group or per KV head; $STURDY_ATTN), when those files exist. The ranked calibration (4 one-layer
# groups, the residual split across groups and KV heads by one ranking of KVzip's scores blended
# with class priority; $RANKED, calibrated at 0.2, and $RANKED033, the same at 0.33), when its
# files exist; both are the "ranked" rows (pask-ranked-<b>).
# Runs are resumable (rerun to finish); JOBS at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/pask-tiny-fc}
NAME=$(basename "$MODEL")
N=${N:-200}
BUDGETS=${BUDGETS:-"0.5 0.33 0.2"}
MAIN=${MAIN:-0.33}
POLICIES=${POLICIES:-policies/$NAME}       # the calibrated files are $POLICIES.b<b>.json
ATTN=${ATTN:-experiments/policies/$NAME.attn}           # calibrated with --attention-blend: $ATTN.b<b>.json
PRIOR=${PRIOR:-policies/$NAME.prior.json}
STURDY=${STURDY:-experiments/policies/$NAME.sturdy}     # $STURDY.b<b>.json
STURDY_ATTN=${STURDY_ATTN:-experiments/policies/$NAME.sturdy-attn}  # $STURDY_ATTN.b<b>.json
RANKED=${RANKED:-experiments/policies/$NAME.ranked}     # $RANKED.b<b>.json
RANKED033=${RANKED033:-experiments/policies/$NAME.ranked033}  # $RANKED033.b<b>.json
ranked_file() { for s in "$RANKED" "$RANKED033"; do [[ -f "$s.b$1.json" ]] && { echo "$s.b$1.json"; return 0; }; done; return 0; }
OUT=${OUT:-runs/calibration-report-$NAME}
RESULTS=${RESULTS:-bench/results/$NAME-calibration-report-n$N}
JOBS=${JOBS:-2}
# each newer baseline's schedule: the stronger on calib (n = 100, 0.5 / 0.33 / 0.2; prefill won or
# tied every budget for all: bench/results/pask-tiny-fc-calib-baselines-2025-n100). KVzip only at
# prefill: its authors compress the context once (a reconstruction forward per compression)
SCHED_SNAPKV_PH=prefill SCHED_PYRAMIDKV_PH=prefill SCHED_ADAKV=prefill SCHED_EXPECTED=prefill SCHED_KVZIP=prefill
# one thread per run: JOBS runs of torch's default thread count oversubscribe the cores
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
PASK=.venv/bin/pask
mkdir -p "$OUT/policies" "$RESULTS"
SECONDS=0
ev() {  # ev DIR [pask eval options]: one run, in the background, at most JOBS at a time
  local dir=$1; shift
  $PASK eval --backend hf --model "$MODEL" --data "synthetic:eval:$N:tiny" --schedule prefill \
    --tool-choice required --max-tokens 128 --no-progress --out "$OUT/$dir" "$@" > "$OUT/$dir.log" 2>&1 &
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
}
ev full --method full
for b in $BUDGETS; do
  cal=$POLICIES.b$b.json
  for v in floors-only residual-only; do
    $PASK policy ablate "$cal" --variant "$v" --out "$OUT/policies/$NAME.b$b.$v.json" > /dev/null
  done
  for m in streaming h2o random; do ev "$m-$b" --method "$m" --budget "$b"; done
  # SnapKV and PyramidKV per layer (votes summed over all heads; the default before it became
  # per KV head, as their authors run them: the per-head rows below)
  for m in snapkv pyramidkv; do ev "$m-$b" --method "$m" --method-opt per_head=false --budget "$b"; done
  ev "h2o-normalized-$b" --method h2o --method-opt normalize=true --budget "$b"
  # the per-KV-head forms (SnapKV's and PyramidKV's authors, kvpress) and the 2025 baselines, each
  # at its stronger schedule on calib (bench/results/pask-tiny-fc-calib-baselines-2025-n100)
  ev "snapkv-per-head-$b" --method snapkv --method-opt per_head=true --budget "$b" --schedule "$SCHED_SNAPKV_PH"
  ev "pyramidkv-per-head-$b" --method pyramidkv --method-opt per_head=true --budget "$b" --schedule "$SCHED_PYRAMIDKV_PH"
  ev "adakv-$b" --method adakv --budget "$b" --schedule "$SCHED_ADAKV"
  ev "expected-attention-$b" --method expected_attention --budget "$b" --schedule "$SCHED_EXPECTED"
  ev "kvzip-$b" --method kvzip --budget "$b" --schedule "$SCHED_KVZIP"
  ev "pask-prior-$b" --method pask --policy "$PRIOR" --budget "$b"
  ev "pask-calibrated-$b" --method pask --policy "$cal" --budget "$b"
  # the attention-informed calibration (its search could pick a blend of SnapKV's window votes)
  [[ -f "$ATTN.b$b.json" ]] && ev "pask-attn-$b" --method pask --policy "$ATTN.b$b.json" --budget "$b"
  [[ -f "$STURDY.b$b.json" ]] && ev "pask-sturdy-$b" --method pask --policy "$STURDY.b$b.json" --budget "$b"
  [[ -f "$STURDY_ATTN.b$b.json" ]] && ev "pask-sturdy-attn-$b" --method pask --policy "$STURDY_ATTN.b$b.json" --budget "$b"
  rf=$(ranked_file "$b"); [[ -n "$rf" ]] && ev "pask-ranked-$b" --method pask --policy "$rf" --budget "$b"
  ev "pask-floors-only-$b" --method pask --policy "$OUT/policies/$NAME.b$b.floors-only.json" --budget "$b"
  ev "pask-residual-only-$b" --method pask --policy "$OUT/policies/$NAME.b$b.residual-only.json" --budget "$b"
  ev "pask-no-delimiters-$b" --method pask --policy "$cal" --method-opt span_delimiters=false --budget "$b"
  [[ "$b" == "$MAIN" ]] || ev "pask-main-policy-$b" --method pask --policy "$POLICIES.b$MAIN.json" --budget "$b"
done
wait
runs=(); for d in "$OUT"/*/; do [[ -f "$d/summary.json" ]] && runs+=("$d"); done  # not policies/
$PASK report "${runs[@]}" --out "$RESULTS"
commas=$(echo $BUDGETS | tr ' ' ',')
bases=()
for m in streaming h2o h2o-normalized snapkv pyramidkv snapkv-per-head pyramidkv-per-head adakv expected-attention kvzip; do
  bases+=(--baseline "$m=$OUT/$m-{b}")
done
.venv/bin/python bench/paired_table.py --runs "pask(calibrated)=$OUT/pask-calibrated-{b}" "${bases[@]}" \
  --budgets "$commas" --out "$RESULTS/vs-strongest-baseline.md"
.venv/bin/python bench/paired_table.py --runs "pask(calibrated)=$OUT/pask-calibrated-{b}" \
  --baseline "full=$OUT/full" --budgets "$commas" --out "$RESULTS/vs-full.md"
if [[ -f "$ATTN.b$MAIN.json" ]]; then
  .venv/bin/python bench/paired_table.py --runs "pask(attention-informed)=$OUT/pask-attn-{b}" "${bases[@]}" \
    --budgets "$commas" --out "$RESULTS/vs-strongest-baseline-attn.md"
  .venv/bin/python bench/paired_table.py --runs "pask(attention-informed)=$OUT/pask-attn-{b}" \
    --baseline "full=$OUT/full" --budgets "$commas" --out "$RESULTS/vs-full-attn.md"
fi
for v in sturdy sturdy-attn ranked; do
  case $v in sturdy) stem=$STURDY ;; sturdy-attn) stem=$STURDY_ATTN ;; ranked) stem="" ;; esac
  have=""; for b in $BUDGETS; do
    if [[ -n "$stem" && -f "$stem.b$b.json" ]] || [[ -z "$stem" && -n "$(ranked_file "$b")" ]]; then have+="${have:+,}$b"; fi
  done
  [[ -n "$have" ]] || continue
  .venv/bin/python bench/paired_table.py --runs "pask($v)=$OUT/pask-$v-{b}" "${bases[@]}" \
    --budgets "$have" --out "$RESULTS/vs-strongest-baseline-$v.md"
  .venv/bin/python bench/paired_table.py --runs "pask($v)=$OUT/pask-$v-{b}" \
    --baseline "full=$OUT/full" --budgets "$have" --out "$RESULTS/vs-full-$v.md"
done
.venv/bin/python bench/paired_table.py --runs "pask(calibrated)=$OUT/pask-calibrated-{b}" \
  --baseline "snapkv=$OUT/snapkv-{b}" --budgets "$commas" --out "$RESULTS/vs-snapkv.md"
cals=()  # each calibration's chosen members: fit, k-fold, held-out calib, eval
for pair in "lookup (shipped)=$POLICIES=pask-calibrated" "attention-informed=$ATTN=pask-attn" \
            "sturdy lookup=$STURDY=pask-sturdy" "sturdy attention-informed=$STURDY_ATTN=pask-sturdy-attn" \
            "ranked (4 groups)=$RANKED=pask-ranked" "ranked (4 groups)=$RANKED033=pask-ranked"; do
  IFS== read -r label stem dir <<< "$pair"
  [[ -f "$stem.calibration.json" ]] && cals+=(--calibration "$label=$stem.calibration.json=$OUT/$dir-{b}")
done
.venv/bin/python bench/calibration_summary.py "${cals[@]}" --budgets "$commas" --out "$RESULTS/calibration-summary.md" > /dev/null
{ echo "command: bash bench/tiny_calibration_report.sh (MODEL=$MODEL N=$N BUDGETS=\"$BUDGETS\" POLICIES=$POLICIES ATTN=$ATTN STURDY=$STURDY STURDY_ATTN=$STURDY_ATTN RANKED=$RANKED RANKED033=$RANKED033)"
  echo "commit: $(git rev-parse HEAD)$(git status --porcelain --untracked-files=no | grep -q . && echo -dirty || true)"
  echo "policies: $(sha256sum "$POLICIES".b*.json | awk '{print substr($1,1,12), $2}' | tr '\n' ' ')"
  ls "$ATTN".b*.json >/dev/null 2>&1 && \
    echo "attention-informed policies: $(sha256sum "$ATTN".b*.json | awk '{print substr($1,1,12), $2}' | tr '\n' ' ')"
  for stem in "$STURDY" "$STURDY_ATTN" "$RANKED" "$RANKED033"; do
    ls "$stem".b*.json >/dev/null 2>&1 && \
      echo "policies ($(basename "$stem")): $(sha256sum "$stem".b*.json | awk '{print substr($1,1,12), $2}' | tr '\n' ' ')"
  done
  echo "threads per run: OMP_NUM_THREADS=$OMP_NUM_THREADS, JOBS=$JOBS"
  echo "wall: ${SECONDS}s (this invocation; runs are resumed, so a rerun only reports)"; } | tee "$RESULTS/meta.txt"
