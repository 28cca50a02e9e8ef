#!/usr/bin/env bash
# Accuracy with the radix cache on (the server caches each tools block once, compressed: the
# shared segment) vs off, and the reference runner's segment compression vs whole-prompt
# compression, in one `pask report` table (rows keyed by backend; labels [segment=system, radix]),
# plus paired differences. Data: the tiny eval split grouped so that every 10 consecutive
# requests share one tools block (synthetic:eval:N:tiny:group=10), tool_choice=required, greedy,
# 128 tokens. Policy per budget b: policies/<model>.b<b>.json (calibrated on the calib split),
# schedule S.
#   server, radix on:  make serve POLICY=P SERVE_ARGS="--pask-budget b --pask-schedule S --pask-segment system"
#   server, radix off: the same + --disable-radix-cache (the whole prompt compressed per request)
#   runner:            pask eval --backend hf ... --segment system   and   --segment none
#   full:              pask eval --backend hf --method full (the reference)
#   bash bench/radix_eval.sh                    # N=200, budget 0.33, schedule prefill
#   N=20 BUDGETS="0.33 0.2" bash bench/radix_eval.sh
#   SEGMENT_BUDGET=0.1 bash bench/radix_eval.sh  # the segment at 0.1 (server and runner)
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
SEGARGS=""; HFSEGARGS=""
[[ -n $SEGMENT_BUDGET ]] && SEGARGS="--pask-segment-budget $SEGMENT_BUDGET" && HFSEGARGS="--segment-budget $SEGMENT_BUDGET"
NAME=$(basename "$MODEL")
DATA="synthetic:eval:$N:tiny:group=10"
OUT=${OUT:-runs/radix-eval-$NAME-$SCHEDULE-n$N}
RESULTS=${RESULTS:-bench/results/$NAME-radix-eval-n$N}
COMMON=(--data "$DATA" --tool-choice required --max-tokens 128)
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
for b in $BUDGETS; do
  policy=policies/$NAME.b$b.json
  for radix in on off; do
    extra="--pask-segment system $SEGARGS"; [[ $radix == off ]] && extra="--disable-radix-cache"
    POLICY=$policy SERVE_ARGS="--pask-budget $b --pask-schedule $SCHEDULE $extra --sleep-on-idle" ensure_server
    echo "[$SECONDS s] server, radix $radix, budget $b: pask eval --backend openai ($N entries, $WORKERS workers)"
    .venv/bin/pask eval --backend openai --base-url "http://$HOST:$PORT/v1" --method pask --budget "$b" \
      --schedule "$SCHEDULE" --workers "$WORKERS" "${COMMON[@]}" --out "$OUT/server-radix-$radix-$b" | tail -n 1
    stop_started_server
    started_pid=""
  done
  for seg in system none; do
    echo "[$SECONDS s] runner, segment $seg, budget $b: pask eval --backend hf"
    .venv/bin/pask eval --backend hf --model "$MODEL" --method pask --policy "$policy" --budget "$b" \
      --schedule "$SCHEDULE" --segment "$seg" $([[ $seg == system ]] && echo $HFSEGARGS) "${COMMON[@]}" \
      --out "$OUT/hf-segment-$seg-$b" | tail -n 1
  done
done
echo "[$SECONDS s] runner, full"
.venv/bin/pask eval --backend hf --model "$MODEL" --method full "${COMMON[@]}" --out "$OUT/hf-full" | tail -n 1
.venv/bin/pask report "$OUT"/server-radix-* "$OUT"/hf-* --group-by backend --out "$RESULTS" | tail -n 1
csv=$(echo $BUDGETS | tr ' ' ',')
.venv/bin/python bench/paired_table.py --runs "server radix on=$OUT/server-radix-on-{b}" \
  --baseline "server radix off=$OUT/server-radix-off-{b}" --budgets "$csv" --out "$OUT/paired-radix.md"
.venv/bin/python bench/paired_table.py --runs "runner segment=$OUT/hf-segment-system-{b}" \
  --baseline "runner whole prompt=$OUT/hf-segment-none-{b}" --budgets "$csv" --out "$OUT/paired-segment.md"
.venv/bin/python bench/paired_table.py --runs "server radix on=$OUT/server-radix-on-{b}" \
  --baseline "runner segment=$OUT/hf-segment-system-{b}" --budgets "$csv" --out "$OUT/paired-engines.md"
cat "$OUT/paired-radix.md" <(echo) "$OUT/paired-segment.md" <(echo) "$OUT/paired-engines.md" > "$RESULTS/paired.md"
cat "$RESULTS/paired.md"
echo "wall ${SECONDS}s ($(nproc) cpus; N=$N, budgets $BUDGETS, schedule $SCHEDULE, data $DATA)" | tee "$RESULTS/wall.txt"
