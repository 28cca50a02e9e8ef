#!/usr/bin/env bash
# The real model's retention table (Qwen2.5-Coder-0.5B-Instruct, `make real-model`): of the BFCL
# entries Full KV gets right, the share each method still gets right at 0.33 and 0.2, paired, with
# bootstrap intervals, flips both ways and the BFCL mean of the 8 AST categories (`pask retention`).
# Entries: a seeded eval subset sized per category where the model is competent (BFCL's own
# checker scores every entry), minus every entry the shipped real-model policy's calibration used
# (exclude=its record: disjoint by id). Rows: each method at its strongest schedule (prefill, the
# stronger one for every baseline in the tiny model's calib sweep), at the same budget: StreamingLLM,
# SnapKV per KV head, AdaKV, Expected Attention, KVzip (kvpress's defaults), and the shipped PASK
# policy of each budget (calibrated on bfcl calib entries only), and where its calibration has written
# one, the learned-residual PASK policy of the budget (LEARNED). Nothing is chosen on these entries.
# Then, for PASK's right -> wrong flips, what it dropped that the call copies (bench/flip_causes.py).
# Resumable entry by entry (rerun the same command); hours on 2 cores: run it in the background.
#   bash bench/real_model_retention.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/qwen2.5-coder-0.5b-instruct}
NAME=$(basename "$MODEL")
SIZES=${SIZES:-simple_python=100,multiple=60,live_simple=70,parallel=25,parallel_multiple=25,live_multiple=40,live_parallel=15,live_parallel_multiple=23}
RECORD=${RECORD:-bench/results/$NAME-calibration/$NAME.calibration.json}
DATA="bfcl:$SIZES:eval:exclude=$RECORD"
BUDGETS=${BUDGETS:-0.33 0.2}
BASELINES=${BASELINES:-kvzip snapkv:per_head=true adakv expected_attention streaming}
OUT=${OUT:-experiments/runs/real-model-retention}  # resume state, committed (sessions do not keep runs/)
RESULTS=${RESULTS:-bench/results/$NAME-retention}
LEARNED=${LEARNED:-experiments/policies/$NAME.learned}  # + .bB.json: the learned-residual policies, where calibrated
PASK=${PASK:-.venv/bin/pask}
[[ -f "$MODEL/config.json" ]] || make -s real-model
mkdir -p "$OUT" "$RESULTS"
SECONDS=0
common=(--model "$MODEL" --data "$DATA" --schedules prefill --tool-choice required --max-tokens 256 --no-progress
        --out "$OUT/cells")
$PASK sweep "${common[@]}" --methods full --budgets 0.33 --results "$OUT/reports/full"
learned() { [[ -f "$LEARNED.b$1.json" ]]; }  # a learned-residual policy of budget $1 was calibrated
for b in $BUDGETS; do  # the learned-residual PASK policies (the notebook's, where calibrated; own cells)
  learned "$b" || continue
  $PASK sweep "${common[@]/%$OUT\/cells/$OUT/cells-learned}" --methods pask --budgets "$b" --policy "$LEARNED.b$b.json" \
    --results "$OUT/reports/pask-learned-b$b"
done
for b in $BUDGETS; do  # PASK first: each budget its shipped policy
  $PASK sweep "${common[@]}" --methods pask --budgets "$b" --policy "policies/$NAME.b$b.json" \
    --results "$OUT/reports/pask-b$b"
done
for m in $BASELINES; do  # the strongest first, one method at a time (a stopped run keeps whole cells)
  $PASK sweep "${common[@]}" --methods "$m" --budgets "${BUDGETS// /,}" --results "$OUT/reports/${m//[:=]/-}"
done
for b in $BUDGETS; do
  rows=(--run "pask=$OUT/cells/pask-prefill-$b")
  if learned "$b"; then rows+=(--run "pask-learned=$OUT/cells-learned/pask-prefill-$b"); fi
  for m in $BASELINES; do rows+=(--run "${m%%:*}=$OUT/cells/${m//[:=]/+}-prefill-$b"); done
  $PASK retention --full "$OUT/cells/full" "${rows[@]}" --reference pask --out "$RESULTS/b$b"
done
for b in $BUDGETS; do  # why PASK loses where it loses: what its right -> wrong flips dropped that the call copies
  .venv/bin/python bench/flip_causes.py --model "$MODEL" --data "$DATA" --full "$OUT/cells/full" \
    --run "$OUT/cells/pask-prefill-$b" --method pask --policy "policies/$NAME.b$b.json" --budget "$b" \
    --out "$RESULTS/b$b" > /dev/null
  cat "$RESULTS/b$b/flip_causes.md"
done
echo "wall (this invocation; a resumed run adds up): $SECONDS s" | tee -a "$RESULTS/wall.txt"
.venv/bin/python - "$RESULTS" "$DATA" <<'PY'
import json, os, platform, subprocess, sys, time
out, data = sys.argv[1], sys.argv[2]
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
meta = {"command": "bash bench/real_model_retention.sh", "data": data, "code": f"git {commit}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "wall": open(os.path.join(out, "wall.txt")).read().strip().splitlines()}
open(os.path.join(out, "meta.json"), "w").write(json.dumps(meta, indent=1) + "\n")
PY
