#!/usr/bin/env bash
# The server against the reference runner for every shipped policy of one model, each at its own
# budget and operating point (schedule, interval from the policy file): kept positions per unit at
# every compression and the generated tokens, N requests each (bench/server_parity.py). One results
# folder per policy, bench/results/<model>-server-parity-shipped-b<budget>-n<N>/ (its meta.json holds
# the exact server_parity command); a finished folder is skipped unless FORCE=1.
#   bash bench/shipped_parity.sh                       # the tiny model, n = 100 (synthetic eval)
#   MODEL=qwen2.5-coder-0.5b-instruct N=24 EXTRA="--data bfcl:all:calib=25 --max-tokens 256" bash bench/shipped_parity.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-pask-tiny-fc}
N=${N:-100}
PY=${PY:-.venv/bin/python}
read -r -a extra <<< "${EXTRA:-}"
shopt -s nullglob
policies=(policies/"$MODEL".b*.json)
(( ${#policies[@]} )) || { echo "shipped_parity: no policies/$MODEL.b*.json" >&2; exit 2; }
for policy in "${policies[@]}"; do
  read -r budget schedule interval < <($PY -c 'import json, sys
d = json.load(open(sys.argv[1])); p = d["operating_point"]
print(d["budget"], p["schedule"], p["interval"])' "$policy")
  out=bench/results/$MODEL-server-parity-shipped-b$budget-n$N
  if [[ -f $out/results.json && -z ${FORCE:-} ]]; then echo "shipped_parity: done before: $out"; continue; fi
  $PY bench/server_parity.py --model "models/$MODEL" --policy "$policy" --budgets "$budget" --schedule "$schedule" \
    --interval "$interval" --n "$N" --no-full "${extra[@]}" --out "$out"
done
