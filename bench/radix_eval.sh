#!/usr/bin/env bash
# Accuracy with the radix cache on (the server caches each tools block once, compressed: the
# shared segment) vs off, and the reference runner's segment compression vs whole-prompt
# compression, in one `pask report` table (rows keyed by backend; labels [segment=system, own
# budget, radix]), plus paired differences. Data: the tiny eval split grouped so that every 10
# consecutive requests share one tools block (synthetic:eval:N:tiny:group=10), tool_choice=required,
# greedy, 128 tokens. Policy per budget b: policies/<model>.b<b>.json (calibrated on the calib
# split, whole prompt), schedule S. Variants, each on the server and on the runner:
#   radix on:            --pask-segment system (the issue's split: the segment at b, each request's
#                        own tokens at b, the segment's slots counted in the request's budget)
#   radix off:           --disable-radix-cache (the whole prompt compressed per request)
#   radix on, own kept:  --pask-segment system --pask-own-budget 1 (only the shared segment is
#                        compressed), with the whole-prompt policy and, when it exists, with
#                        SEGMENT_POLICY (default experiments/policies/<model>.segment.b0.33.json: calibrated on calib
#                        under exactly this rule, bench/tiny_calibrate.sh; used at its own budget only)
#   radix on, own kept, full prefill: the same with SEGMENT_POLICY and --pask-segment-prefill full
#                        (each request's own tokens prefilled against the whole segment; the tree
#                        keeps the segment whole, a hit reuses it, each request reads its view)
#   runner, full:        pask eval --backend hf --method full (the reference)
#   bash bench/radix_eval.sh                    # N=200, budget 0.33, schedule prefill (~8 min)
#   N=20 BUDGETS="0.33 0.2" bash bench/radix_eval.sh
#   SEGMENT_BUDGET=0.1 bash bench/radix_eval.sh  # the segment at 0.1 (server and runner)
#   RESUME=1 bash bench/radix_eval.sh           # keep finished entries of an interrupted run
# Writes RESULTS/report.md (+ .json, .png), RESULTS/paired.md and RESULTS/wall.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-30112}
source bench/lib_serve.sh
N=${N:-200}
BUDGETS=${BUDGETS:-"0.33"}
SCHEDULE=${SCHEDULE:-prefill}
WORKERS=${WORKERS:-4}
SEGMENT_BUDGET=${SEGMENT_BUDGET:-}   # the shared segment's budget (default: the budget)
NAME=$(basename "$MODEL")
SEGMENT_POLICY=${SEGMENT_POLICY:-experiments/policies/$NAME.segment.b0.33.json}
SEGARGS=""; HFSEGARGS=""
[[ -n $SEGMENT_BUDGET ]] && SEGARGS="--pask-segment-budget $SEGMENT_BUDGET" && HFSEGARGS="--segment-budget $SEGMENT_BUDGET"
DATA="synthetic:eval:$N:tiny:group=10"
OUT=${OUT:-runs/radix-eval-$NAME-$SCHEDULE-n$N}
RESULTS=${RESULTS:-bench/results/$NAME-radix-eval-n$N}
COMMON=(--data "$DATA" --tool-choice required --max-tokens 128)
# fresh by default: pask eval resumes finished entries, and an old run of the same name (another
# code version) would be reused silently; RESUME=1 keeps them
[[ ${RESUME:-0} == 1 ]] || rm -rf "$OUT"
mkdir -p "$OUT" "$RESULTS"
SECONDS=0

policy_budget() { .venv/bin/python -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['budget']:g}\")" "$1"; }

# one variant at budget $1: label $2, policy $3, server flags $4, runner flags $5
variant() {
  local b=$1 label=$2 policy=$3 sflags=$4 hflags=$5
  POLICY=$policy SERVE_ARGS="--pask-budget $b --pask-schedule $SCHEDULE $sflags --sleep-on-idle" ensure_server
  echo "[$SECONDS s] server, $label, budget $b ($policy): pask eval --backend openai ($N entries, $WORKERS workers)"
  .venv/bin/pask eval --backend openai --base-url "http://$HOST:$PORT/v1" --method pask --budget "$b" \
    --schedule "$SCHEDULE" --workers "$WORKERS" "${COMMON[@]}" --out "$OUT/server-$label-$b" | tail -n 1
  stop_started_server
  started_pid=""
  echo "[$SECONDS s] runner, $label, budget $b: pask eval --backend hf"
  # shellcheck disable=SC2086
  .venv/bin/pask eval --backend hf --model "$MODEL" --method pask --policy "$policy" --budget "$b" \
    --schedule "$SCHEDULE" $hflags "${COMMON[@]}" --out "$OUT/hf-$label-$b" | tail -n 1
}

labels=(radix-on radix-off radix-on-own-kept)
for b in $BUDGETS; do
  policy=policies/$NAME.b$b.json
  variant "$b" radix-on "$policy" "--pask-segment system $SEGARGS" "--segment system $HFSEGARGS"
  variant "$b" radix-off "$policy" "--disable-radix-cache" "--segment none"
  variant "$b" radix-on-own-kept "$policy" "--pask-segment system $SEGARGS --pask-own-budget 1" \
    "--segment system $HFSEGARGS --own-budget 1"
  if [[ -f $SEGMENT_POLICY && $(policy_budget "$SEGMENT_POLICY") == "$b" ]]; then
    variant "$b" radix-on-own-kept-segment-policy "$SEGMENT_POLICY" \
      "--pask-segment system $SEGARGS --pask-own-budget 1" "--segment system $HFSEGARGS --own-budget 1"
    variant "$b" radix-on-own-kept-full-prefill "$SEGMENT_POLICY" \
      "--pask-segment system $SEGARGS --pask-own-budget 1 --pask-segment-prefill full" \
      "--segment system $HFSEGARGS --own-budget 1 --segment-prefill full"
    for l in radix-on-own-kept-segment-policy radix-on-own-kept-full-prefill; do
      [[ " ${labels[*]} " == *" $l "* ]] || labels+=("$l")
    done
  fi
done
echo "[$SECONDS s] runner, full"
.venv/bin/pask eval --backend hf --model "$MODEL" --method full "${COMMON[@]}" --out "$OUT/hf-full" | tail -n 1
.venv/bin/pask report "$OUT"/server-* "$OUT"/hf-* --group-by backend --out "$RESULTS" | tail -n 1
csv=$(echo $BUDGETS | tr ' ' ',')
paired() {  # label A, folder format A, label B, folder format B
  .venv/bin/python bench/paired_table.py --runs "$1=$2" --baseline "$3=$4" --budgets "$csv" --out "$OUT/paired-$5.md"
  echo
}
{
  for l in "${labels[@]}"; do
    [[ $l == radix-off ]] && continue
    paired "server $l" "$OUT/server-$l-{b}" "server radix off" "$OUT/server-radix-off-{b}" "server-$l"
    paired "runner $l" "$OUT/hf-$l-{b}" "runner radix off (whole prompt)" "$OUT/hf-radix-off-{b}" "runner-$l"
  done
  for l in "${labels[@]}"; do
    paired "server $l" "$OUT/server-$l-{b}" "runner $l" "$OUT/hf-$l-{b}" "engines-$l"
  done
} > "$RESULTS/paired.md"
cat "$RESULTS/paired.md"
echo "wall ${SECONDS}s ($(nproc) cpus; N=$N, budgets $BUDGETS, schedule $SCHEDULE, data $DATA)" | tee "$RESULTS/wall.txt"
