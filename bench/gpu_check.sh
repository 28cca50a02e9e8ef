#!/usr/bin/env bash
# The GPU checks in one command, for a machine with an NVIDIA GPU (the device tool's H200; nothing
# here runs on CPU, and without CUDA it stops at once, naming why). Writes everything under OUT:
#   1. env.txt          the GPU, driver, torch / SGLang / FlashInfer versions it found
#   2. build.log        csrc built with its CUDA sources (setup.py build_ext --inplace)
#   3. tests.log        csrc's operators on CUDA vs the reference (test/unit/ops/test_ops.py runs them on CUDA too where torch sees a GPU),
#                       the FlashInfer index streams and backend checks that need a GPU (with sglang only)
#      throws.txt       bench/ops_throw_check.py: each operator's bad-input error raises on CPU and CUDA
#   4. ops/             bench/gpu_ops_bench.py: top_n_mask compiled on CUDA and CPU vs the reference, and
#                       decode attention alone at Qwen3-4B's shape, Full vs 0.33 (torch only)
#   5. bench/           the serving bench on random weights of Qwen3-4B's shape (bench/server_capacity.py
#                       --tpot-shape qwen3-4b, FlashInfer attention): throughput, TPOT and peak memory,
#                       PASK@0.33 vs Full at equal KV memory
# Budget: about 10 minutes on one H200 (build ~1 min, tests ~1 min, bench the rest; BENCH=0 skips it).
# Packages: uses the python3 it finds (torch with CUDA, sglang, flashinfer); WHEELS=DIR installs
# wheels from DIR first (--no-index: the device machine reaches no registry).
#   OUT=/tmp/gpu bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder to write}
PY=${PY:-python3}
mkdir -p "$OUT"
die() { echo "gpu_check: $*" | tee -a "$OUT/gpu_check.txt" >&2; exit 3; }

command -v nvidia-smi >/dev/null 2>&1 || die "no NVIDIA driver (nvidia-smi not found): this script needs a CUDA GPU"
if [[ -n "${WHEELS:-}" ]]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl || die "wheel install failed"
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/python:${PYTHONPATH:-}
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
  || die "torch.cuda.is_available() is False (or torch missing) under $PY: this script needs a CUDA GPU"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY - <<'PY'
import importlib
for m in ("torch", "sglang", "flashinfer", "xgrammar", "transformers"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:  # noqa: BLE001
        print(m, "missing:", e)
import torch
print("torch cuda", torch.version.cuda)
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

SECONDS=0
$PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
$PY -c "from sglang_pask import ops; print(ops.implementation())" | tee -a "$OUT/build.log"
echo "gpu_check: build ${SECONDS}s" | tee -a "$OUT/gpu_check.txt"

has() { $PY -c "import $1" >/dev/null 2>&1; }
tests=(test/unit/ops/test_ops.py)
if has sglang; then tests+=(test/unit/srt/test_srt_flashinfer_indices.py)
else echo "gpu_check: sglang missing: test_srt_flashinfer_indices.py not run" | tee -a "$OUT/gpu_check.txt"; fi
SECONDS=0
$PY -m pytest -q -p no:cacheprovider "${tests[@]}" > "$OUT/tests.log" 2>&1
echo "gpu_check: tests rc=$? ${SECONDS}s ($(tail -1 "$OUT/tests.log"))" | tee -a "$OUT/gpu_check.txt"

# every bad-input refusal of the operators raises (one subprocess per case: a crash shows as -11)
$PY bench/ops_throw_check.py > "$OUT/throws.txt" 2>&1
echo "gpu_check: throws rc=$?" | tee -a "$OUT/gpu_check.txt"

# the operators and decode attention alone (torch and numpy only): runs on a bare CUDA image
SECONDS=0
$PY bench/gpu_ops_bench.py --out "$OUT/ops" > "$OUT/ops.log" 2>&1
echo "gpu_check: ops bench rc=$? ${SECONDS}s" | tee -a "$OUT/gpu_check.txt"

if [[ "${BENCH:-1}" == 1 ]] && ! { has sglang && has flashinfer; }; then
  echo "gpu_check: serving bench skipped: sglang and flashinfer must both import under $PY (WHEELS=DIR installs them)" \
    | tee -a "$OUT/gpu_check.txt"
elif [[ "${BENCH:-1}" == 1 ]]; then
  SECONDS=0
  $PY bench/server_capacity.py --parts capacity,tpot --tpot-shape qwen3-4b --contexts 2048,4096 \
    --tpot-requests 8 --requests 64 --server-args "--attention-backend flashinfer --disable-cuda-graph" \
    --out "$OUT/bench" > "$OUT/bench.log" 2>&1
  echo "gpu_check: bench rc=$? ${SECONDS}s" | tee -a "$OUT/gpu_check.txt"
fi
