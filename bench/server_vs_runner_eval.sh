#!/usr/bin/env bash
# Accuracy with KV persistence inside the SGLang server vs the reference runner, same policy,
# budget and schedule, in one `pask report` table (rows keyed by backend) plus the paired
# difference per budget. Per budget b (policy P = policies/<model>.b<b>.json, calibrated on the
# calib split):
#   server: `make serve POLICY=P SERVE_ARGS="--pask-budget b --pask-schedule S --disable-radix-cache"`
#           (the whole prompt compressed per request, as the runner; bench/radix_eval.sh has the
#           radix cache on; started here and stopped by PID), scored with `pask eval --backend openai` (the run records what the
#           server reports it runs; the --method/--budget/--schedule given are checked against it)
#   runner: `pask eval --backend hf --method pask --policy P --budget b --schedule S`
# Data: the tiny eval split (synthetic:eval:N:tiny), tool_choice=required, greedy, 128 tokens.
#   bash bench/server_vs_runner_eval.sh                 # N=200, budgets 0.5 0.33 0.2, schedule prefill
#   N=20 BUDGETS=0.33 bash bench/server_vs_runner_eval.sh
#   RESUME=1 bash bench/server_vs_runner_eval.sh        # keep finished entries of an interrupted run
#   METHOD=snapkv BUDGETS=0.33 bash bench/server_vs_runner_eval.sh   # another server method (the policy
#                                                       # then gives only the layer shape)
#   POLICIES=experiments/policies/pask-tiny-fc.attn BUDGETS=0.33 bash bench/server_vs_runner_eval.sh
# Writes RESULTS/report.md (+ .json, .png: `pask report --group-by backend`), RESULTS/paired.md
# (bench/paired_table.py: server - runner, paired 95% bootstrap) and RESULTS/wall.txt.
set -euo pipefail
# the command as run, for meta.json: the variables the caller set, then the script
given=""
for v in N BUDGETS SCHEDULE METHOD POLICIES OUT RESULTS; do [[ -n "${!v+x}" ]] && given+="$v=$(printf '%q' "${!v}") " || true; done
cd "$(dirname "$0")/.."
PORT=${PORT:-30111}
source bench/lib_serve.sh
N=${N:-200}
BUDGETS=${BUDGETS:-"0.5 0.33 0.2"}
SCHEDULE=${SCHEDULE:-prefill}
WORKERS=${WORKERS:-4}
NAME=$(basename "$MODEL")
METHOD=${METHOD:-pask}
POLICIES=${POLICIES:-policies/$NAME}  # the policy of budget b: $POLICIES.b<b>.json
TAG=""  # the default run keeps its old folder names; another method or policy set is named in them
if [[ $METHOD != pask || $POLICIES != policies/$NAME ]]; then TAG="-$METHOD"; fi
if [[ $POLICIES != policies/$NAME ]]; then TAG+="-${POLICIES##*.}"; fi
OUT=${OUT:-runs/server-vs-runner-$NAME$TAG-$SCHEDULE-n$N}
RESULTS=${RESULTS:-bench/results/$NAME-server-vs-runner$TAG-n$N}
COMMON=(--data "synthetic:eval:$N:tiny" --tool-choice required --max-tokens 128)
# fresh by default: pask eval resumes finished entries, and an old run of the same name (another
# code version) would be reused silently; RESUME=1 keeps them
[[ ${RESUME:-0} == 1 ]] || rm -rf "$OUT"
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
for b in $BUDGETS; do
  policy=$POLICIES.b$b.json
  POLICY=$policy SERVE_ARGS="--pask-method $METHOD --pask-budget $b --pask-schedule $SCHEDULE --disable-radix-cache --sleep-on-idle" \
    ensure_server
  echo "[$SECONDS s] server, budget $b: pask eval --backend openai ($N entries, $WORKERS workers)"
  .venv/bin/pask eval --backend openai --base-url "http://$HOST:$PORT/v1" --method "$METHOD" --budget "$b" \
    --schedule "$SCHEDULE" --workers "$WORKERS" "${COMMON[@]}" --out "$OUT/server-$b" | tail -n 1
  stop_started_server
  started_pid=""
  echo "[$SECONDS s] runner, budget $b: pask eval --backend hf"
  if [[ $METHOD == pask ]]; then own=(--policy "$policy"); else own=(); fi
  .venv/bin/pask eval --backend hf --model "$MODEL" --method "$METHOD" "${own[@]}" --budget "$b" \
    --schedule "$SCHEDULE" "${COMMON[@]}" --out "$OUT/hf-$b" | tail -n 1
done
.venv/bin/pask report "$OUT"/server-* "$OUT"/hf-* --group-by backend --out "$RESULTS" | tail -n 1
.venv/bin/python bench/paired_table.py --runs "server=$OUT/server-{b}" --baseline "runner=$OUT/hf-{b}" \
  --budgets "$(echo $BUDGETS | tr ' ' ',')" --out "$RESULTS/paired.md"
cat "$RESULTS/paired.md"
echo "wall ${SECONDS}s ($(nproc) cpus; N=$N, budgets $BUDGETS, schedule $SCHEDULE)" | tee "$RESULTS/wall.txt"
printf '{"command": "%sbash bench/server_vs_runner_eval.sh", "wall_s": %s}\n' "$given" "$SECONDS" > "$RESULTS/meta.json"
