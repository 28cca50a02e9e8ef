#!/usr/bin/env bash
# PASK with the learned scorer in its residual, a first probe on CALIB (issue 46; nothing is
# shipped from it): each KVzip-informed policy run as calibrated (residual statistic `kvzip`: a
# reconstruction forward per compression) and with the same residual reading the learned scorer's
# predictions of KVzip's scores instead (`attention_stat=learned`, policies/pask-tiny-fc.kvzap.safetensors,
# fitted on train; no extra forward). The policies were calibrated with KVzip's scores; a policy
# calibrated with the learned statistic is the next step. Same runner settings as
# experiments/kvzap_calib.sh (prefill, tool_choice required, greedy, 128 tokens), so its KVzip and
# KVzap runs on the same entries pair with these (experiments/results/pask-tiny-fc-calib-kvzap-n100).
#   bash experiments/learned_residual_probe.sh          # N=100: the ranked 0.2 and the sturdier 0.33 policy
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100}
MODEL=${MODEL:-models/pask-tiny-fc}
SCORER=${SCORER:-policies/pask-tiny-fc.kvzap.safetensors}
RUNS=${RUNS:-runs/calib-learned-residual}
KVZAP_RUNS=${KVZAP_RUNS:-runs/calib-kvzap}
RESULTS=${RESULTS:-experiments/results/pask-tiny-fc-calib-learned-residual-n$N}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$RESULTS"
t0=$(date +%s)
for spec in 0.2:experiments/policies/pask-tiny-fc.ranked.b0.2.json 0.33:experiments/policies/pask-tiny-fc.sturdy-attn.b0.33.json; do
  b=${spec%%:*}; policy=${spec#*:}
  $PY -m sglang_pask.cli sweep --model "$MODEL" --data "synthetic:calib:$N:tiny" --policy "$policy" \
      --methods "pask,pask:attention_stat=learned:scorer=$SCORER" --budgets "$b" --schedules prefill \
      --tool-choice required --max-tokens 128 --jobs 1 --no-progress --out "$RUNS/b$b" --results "$RESULTS/b$b"
done
# KVzip and KVzap on the same entries (experiments/kvzap_calib.sh; run here when missing)
[[ -d "$KVZAP_RUNS/kvzip-prefill-0.2" ]] || RUNS=$KVZAP_RUNS RESULTS=/tmp/kvzap-calib-n$N N=$N bash experiments/kvzap_calib.sh
tag=${SCORER//\//_}
for b in 0.2 0.33; do
  learned="$RUNS/b$b/pask+attention_stat=learned+scorer=$tag-prefill-$b"
  for base in "pask(kvzip)=$RUNS/b$b/pask-prefill-$b" "kvzip=$KVZAP_RUNS/kvzip-prefill-$b" \
              "kvzap=$KVZAP_RUNS/kvzap+scorer=$tag-prefill-$b"; do
    $PY bench/paired_table.py --runs "pask(learned)=$learned" --baseline "$base" --budgets "$b" \
        --out "$RESULTS/paired-b$b-vs-${base%%=*}.md"
  done
done
cat "$RESULTS"/paired-b*.md
# what wrote the folder (the results page names it)
$PY - "$RESULTS" "$t0" "bash experiments/learned_residual_probe.sh" <<'PY'
import json, os, platform, subprocess, sys, time
out, t0, command = sys.argv[1], int(sys.argv[2]), sys.argv[3]
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
meta = {"command": command, "code": f"git {commit}", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "wall_s": round(time.time() - t0, 1)}
open(os.path.join(out, "meta.json"), "w").write(json.dumps(meta, indent=1) + "\n")
PY
