#!/usr/bin/env bash
# SGLang's own serving benchmark (sglang.benchmark.serving, dataset random-ids) against `make serve`.
# Uses the server at $HOST:$PORT if one answers /health; otherwise starts `make serve` on that port
# and stops it by the PID of its python process when done (also on failure).
#   bash bench/serve_smoke.sh                       # defaults below
#   NUM_PROMPTS=64 CONCURRENCY=16 bash bench/serve_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib_serve.sh
NUM_PROMPTS=${NUM_PROMPTS:-32}
CONCURRENCY=${CONCURRENCY:-8}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-64}
PY=.venv/bin/python
OUT=$LOGDIR
ensure_server

$PY -m sglang_pask.cpu_shim.bench_serving --backend sglang --host "$HOST" --port "$PORT" \
  --model "$MODEL" --tokenizer "$MODEL" --dataset-name random-ids \
  --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --random-range-ratio 1.0 \
  --num-prompts "$NUM_PROMPTS" --max-concurrency "$CONCURRENCY" --seed 1 \
  --output-file "$OUT/result.jsonl" 2>&1 | tee "$OUT/bench.log"   # bench_serving's own progress and table

$PY - "$OUT/result.jsonl" <<'PYEOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"requests {r['completed']}  input_len {r.get('random_input_len')}  output_len {r.get('random_output_len')}  concurrency {r.get('max_concurrency')}")
print(f"output throughput  {r['output_throughput']:.1f} tok/s")
print(f"total throughput   {r.get('total_throughput', r['input_throughput'] + r['output_throughput']):.1f} tok/s")
print(f"TPOT mean {r['mean_tpot_ms']:.2f} ms  median {r['median_tpot_ms']:.2f} ms  p99 {r['p99_tpot_ms']:.2f} ms")
print(f"TTFT mean {r['mean_ttft_ms']:.1f} ms")
PYEOF
