#!/usr/bin/env bash
# Measure what the user runs: the README's serving commands with their defaults (the policy's own
# operating point, no schedule flag), scored through the live server with `pask eval`, next to the
# tables they must reproduce. Data: the tiny eval split, n = N, tool_choice=required, greedy, 128
# tokens (the calibration report's settings).
#   1. make serve POLICY=policies/pask-tiny-fc.b0.33.json                      (nothing else)
#      on synthetic:eval:N:tiny; compared with the learned-scorer table's cell of the same policy
#      (bench/results/pask-tiny-fc-learned-scorer-table-n200/report.json: the reference runner, prefill,
#      where the file ran as experiments/policies/pask-tiny-fc.learned.b0.33.json, named learned@0.33)
#   2. make serve POLICY=experiments/policies/pask-tiny-fc.segment.b0.33.json SERVE_ARGS="--pask-segment-prefill full"
#      (the README's accurate radix command) on synthetic:eval:N:tiny:group=10; compared with the
#      radix table's full-prefill row (bench/results/pask-tiny-fc-radix-eval-n200/report.json)
#   bash bench/default_serving_eval.sh        # N=200 (~6 min on 2 cores)
# Writes RESULTS/report.md (+ .json, .png from `pask report`), RESULTS/compare.md, RESULTS/wall.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-30113}
source bench/lib_serve.sh
N=${N:-200}
WORKERS=${WORKERS:-4}
OUT=${OUT:-runs/default-serving-eval-n$N}
RESULTS=${RESULTS:-bench/results/pask-tiny-fc-default-serving-n$N}
rm -rf "$OUT"
mkdir -p "$OUT" "$RESULTS"
SECONDS=0

# $1 label, $2 policy, $3 SERVE_ARGS, $4 data
run() {
  POLICY=$2 SERVE_ARGS=$3 ensure_server
  grep -E "sglang_pask: (operating point|.*overrides the policy)" "$LOGDIR/server.log" | head -n 3 \
    | sed 's/^/  server: /' || true
  echo "[$SECONDS s] $1: make serve POLICY=$2${3:+ SERVE_ARGS=\"$3\"}; pask eval --backend openai on $4"
  .venv/bin/pask eval --backend openai --base-url "http://$HOST:$PORT/v1" --data "$4" --tool-choice required \
    --max-tokens 128 --workers "$WORKERS" --out "$OUT/$1" | tail -n 1
  stop_started_server
  started_pid=""
}

run readme-default policies/pask-tiny-fc.b0.33.json "" "synthetic:eval:$N:tiny"
run readme-radix experiments/policies/pask-tiny-fc.segment.b0.33.json "--pask-segment-prefill full" "synthetic:eval:$N:tiny:group=10"

.venv/bin/pask report "$OUT/readme-default" "$OUT/readme-radix" --group-by data --out "$RESULTS" >/dev/null
.venv/bin/python - "$OUT" "$RESULTS" <<'PY'
import json, sys
out, res = sys.argv[1], sys.argv[2]
def mean(run):
    return 100 * json.load(open(f"{out}/{run}/summary.json"))["mean"]
def table_cell(path, pick):
    rows = json.load(open(path))["rows"]
    r = next(r for r in rows if pick(r))
    return 100 * r["mean"]
def op(run):
    cfg = json.load(open(f"{out}/{run}/run.json"))
    o = cfg.get("operating_point") or {}
    return ", ".join(f"{k} {v['value']} ({v['source']})" for k, v in o.items() if k != "overridden")
lines = ["# The README's serving commands, measured", "",
         "| command | data | accuracy | the table it must reproduce | table | diff |", "|---|---|---:|---|---:|---:|"]
cal = "bench/results/pask-tiny-fc-learned-scorer-table-n200/report.json"
rad = "bench/results/pask-tiny-fc-radix-eval-n200/report.json"
pairs = [("readme-default", "`make serve POLICY=policies/pask-tiny-fc.b0.33.json`", "tiny eval",
          cal, "pask, learned residual (the shipped 0.33 policy), prefill, reference runner",
          lambda r: r["label"].startswith("pask[attention_blend=0.75,attention_stat=learned") and r["budget"] == 0.33
          and r["policy"].startswith("pask-tiny-fc.learned@0.33@")),
         ("readme-radix", "`make serve POLICY=experiments/policies/pask-tiny-fc.segment.b0.33.json SERVE_ARGS=\"--pask-segment-prefill full\"`",
          "tiny eval, group=10", rad, "radix on, own kept, full prefill (server)",
          lambda r: "full prefill" in r["label"] and r["group"].get("backend") == "openai")]
for run, cmd, data, path, what, pick in pairs:
    try:
        want = table_cell(path, pick)
    except (OSError, StopIteration, KeyError) as e:
        want = float("nan"); what += f" (not found: {e!r})"
    got = mean(run)
    lines.append(f"| {cmd} | {data} | {got:.1f} | {what} | {want:.1f} | {got - want:+.1f} |")
lines += ["", "Operating point as the server reported it (run.json):", ""]
lines += [f"- {run}: {op(run)}" for run, *_ in pairs]
open(f"{res}/compare.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "wall: $SECONDS s" | tee "$RESULTS/wall.txt"
