#!/usr/bin/env bash
# Tool catalogs on the real model (Qwen2.5-Coder-0.5B-Instruct, `make real-model`): each BFCL entry
# (simple_python and multiple, a seeded eval subset disjoint by id from the shipped policy's
# calibration entries) offers its own tools plus N distractor tools drawn from the other entries
# (`:distractors=N`: none named as one of its own, shuffled, seeded), for N = 20 and 50; BFCL's
# checker scores the call against the entry's own tools, unchanged. Rows at 0.33 and 0.2, each at its
# strongest schedule (prefill): the shipped PASK policy of each budget (calibrated on bfcl calib
# entries without distractors), KVzip, SnapKV per KV head, StreamingLLM; Full KV for the pairing.
# Reported per (N, budget) by `pask retention`: retention of Full KV's correct calls with paired
# intervals against PASK, flips both ways, and where the lost calls fail (wrong tool, parameter name,
# value); plus the prompt lengths. Nothing is chosen on these entries.
# Resumable entry by entry (rerun the same command); ~30 s per entry per cell at N = 20 on one core,
# 320 entries (Full KV got 3 of the first 12 right at N = 20, so the sizes are for >= 60 right):
# many hours, run it in the background.
#   bash bench/real_model_catalogs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/qwen2.5-coder-0.5b-instruct}
NAME=$(basename "$MODEL")
SIZES=${SIZES:-simple_python=200,multiple=120}  # ~25% right under Full KV at N = 20: >= 60 right needs ~240
RECORD=${RECORD:-bench/results/$NAME-calibration/$NAME.calibration.json}
DISTRACTORS=${DISTRACTORS:-20 50}
BUDGETS=${BUDGETS:-0.33 0.2}
BASELINES=${BASELINES:-kvzip snapkv:per_head=true streaming}
OUT=${OUT:-experiments/runs/real-model-catalogs}  # resume state, committed (sessions do not keep runs/)
RESULTS=${RESULTS:-bench/results/$NAME-catalogs}
PASK=${PASK:-.venv/bin/pask}
[[ -f "$MODEL/config.json" ]] || make -s real-model
SECONDS=0
for n in $DISTRACTORS; do
  data="bfcl:$SIZES:eval:exclude=$RECORD:distractors=$n"
  common=(--model "$MODEL" --data "$data" --schedules prefill --tool-choice required --max-tokens 256 --no-progress
          --out "$OUT/n$n/cells")
  $PASK sweep "${common[@]}" --methods full --budgets 0.33 --results "$OUT/n$n/reports/full"
  for b in $BUDGETS; do
    $PASK sweep "${common[@]}" --methods pask --budgets "$b" --policy "policies/$NAME.b$b.json" \
      --results "$OUT/n$n/reports/pask-b$b"
  done
  for m in $BASELINES; do
    $PASK sweep "${common[@]}" --methods "$m" --budgets "${BUDGETS// /,}" --results "$OUT/n$n/reports/${m//[:=]/-}"
  done
  for b in $BUDGETS; do
    rows=(--run "pask=$OUT/n$n/cells/pask-prefill-$b")
    for m in $BASELINES; do rows+=(--run "${m%%:*}=$OUT/n$n/cells/${m//[:=]/+}-prefill-$b"); done
    $PASK retention --full "$OUT/n$n/cells/full" "${rows[@]}" --reference pask --out "$RESULTS/n$n-b$b"
  done
done
echo "wall (this invocation; a resumed run adds up): $SECONDS s" | tee -a "$OUT/wall.txt"
mkdir -p "$RESULTS"
.venv/bin/python - "$RESULTS" "$OUT" "$DISTRACTORS" "$SIZES" "$RECORD" <<'PY'
import json, os, platform, statistics, subprocess, sys, time
out, runs, ns, sizes, record = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5]
lines = ["# Tool catalogs: prompt lengths (tokens, Full KV's records)", "",
         "| distractors | entries | min | median | max |", "|---:|---:|---:|---:|---:|"]
for n in ns:
    recs = [json.loads(x) for x in open(os.path.join(runs, f"n{n}", "cells", "full", "results.jsonl")) if x.strip()]
    lens = sorted(r["meta"]["prompt_tokens"] for r in recs)
    lines.append(f"| {n} | {len(lens)} | {lens[0]} | {statistics.median(lens):.0f} | {lens[-1]} |")
open(os.path.join(out, "lengths.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
meta = {"command": "bash bench/real_model_catalogs.sh",
        "data": [f"bfcl:{sizes}:eval:exclude={record}:distractors={n}" for n in ns], "code": f"git {commit}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "wall": open(os.path.join(runs, "wall.txt")).read().strip().splitlines()}
open(os.path.join(out, "meta.json"), "w").write(json.dumps(meta, indent=1) + "\n")
PY
