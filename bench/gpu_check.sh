#!/usr/bin/env bash
# The GPU checks in one command, for a machine with an NVIDIA GPU (the device tool's H100 / H200;
# without CUDA it stops at once, naming why). Writes everything under OUT, meta.json (the command)
# included:
#   1. env.txt          the GPU, driver, torch / triton / SGLang / FlashInfer versions it found
#   2. build.log        csrc built with its CUDA sources (setup.py build_ext --inplace)
#   3. tests.log        test/unit/ops/: csrc's operators (test_ops.py), the torch sort top-n
#                       (test_top_n.py) and the Triton kernels (test_triton_kernels.py: interpreted on
#                       CPU and compiled on CUDA) against their references, on CPU and CUDA; the
#                       FlashInfer backend's index streams and CUDA-graph bookkeeping (with sglang only);
#                       with flashinfer too, test_srt_flashinfer_gpu.py: the backend over FlashInfer's
#                       kernels vs SDPA over the kept positions, and CUDA-graph capture + replay of a
#                       PASK decode step
#      throws.txt       bench/ops_throw_check.py: each operator's bad-input error raises on CPU and CUDA
#   4. ops/             bench/gpu_ops_bench.py: top_n_mask (csrc CUDA, torch sort on CUDA, the CPU paths)
#                       vs the reference, the Triton kernels vs their torch builds, and decode
#                       attention alone at Qwen3-4B's shape, Full vs 0.33 (torch and triton only; with
#                       flashinfer also FlashInfer's decode kernel, eager and graph-replayed)
#   5. bench/           the serving bench on random weights of Qwen3-4B's shape (bench/server_capacity.py
#                       --tpot-shape qwen3-4b, FlashInfer attention): throughput, TPOT and peak memory,
#                       PASK@0.33 vs Full at equal KV memory (needs sglang and flashinfer)
# Budget: 570 s in all (build <= 300 s, tests <= 180 s, ops bench <= 150 s, the serving bench what is
# left; each step is cut at its limit and says so); BENCH=0 skips the serving bench.
# Packages: uses the python it finds (PY, default python3); WHEELS=DIR installs wheels from DIR
# first (--no-index: the device machine reaches no registry).
# DRY_RUN=1: on any machine, prints what it would run and what it would skip and why (probing
# packages with importlib, importing none of them), writes OUT/report.md and OUT/meta.json, and
# starts nothing: no build, no pytest, no GPU call.
#   OUT=/tmp/gpu bash bench/gpu_check.sh
#   DRY_RUN=1 PY=.venv/bin/python OUT=bench/results/gpu-check-dry-run bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder to write}
PY=${PY:-python3}
BUDGET=570
mkdir -p "$OUT"
command_line() {
  local v words=()
  for v in DRY_RUN PY BENCH WHEELS; do [[ -n "${!v:-}" ]] && words+=("$v=${!v}"); done
  echo "${words[*]} OUT=$OUT bash bench/gpu_check.sh"
}
write_meta() {  # $1: wall seconds
  $PY - "$OUT/meta.json" "$(command_line)" "$1" <<'PY'
import json, os, platform, sys, time
path, command, wall = sys.argv[1:]
json.dump({"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "wall_s": float(wall)},
          open(path, "w"), indent=1)
PY
}
has() { $PY -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)" 2>/dev/null; }
has_cuda_gpu() { command -v nvidia-smi >/dev/null 2>&1; }
# the FlashInfer backend's CPU checks (a torch stand-in for its kernels), run where sglang imports
SRT_TESTS="test/unit/srt/test_srt_flashinfer_indices.py test/unit/srt/test_srt_flashinfer_graphs.py"
# FlashInfer's own kernels through the backend (eager vs SDPA over kept positions; CUDA-graph capture
# and replay of a PASK decode step), run where flashinfer imports too (skipped by pytest otherwise)
FI_TESTS="test/unit/srt/test_srt_flashinfer_gpu.py"

if [[ "${DRY_RUN:-0}" == 1 ]]; then
  {
    echo "gpu_check (dry run): the plan and what this machine has; nothing is built, tested or run on a GPU"
    echo "python: $PY ($($PY -c 'import platform; print(platform.python_version())' 2>&1))"
    $PY - <<'PY'
import importlib.metadata as md, importlib.util as u
found = []
for mod, dist in (("torch", "torch"), ("triton", "triton"), ("sglang", "sglang"), ("flashinfer", "flashinfer-python"),
                  ("xgrammar", "xgrammar"), ("pytest", "pytest"), ("hypothesis", "hypothesis")):
    if u.find_spec(mod) is None:
        found.append(f"{mod} missing")
        continue
    try:
        found.append(f"{mod} {md.version(dist)}")
    except md.PackageNotFoundError:
        found.append(f"{mod} (version unknown)")
print("packages (found by importlib.util.find_spec, none imported): " + ", ".join(found))
PY
    if has_cuda_gpu; then gpu="found"; else gpu="missing"; fi
    nvcc_at=$(command -v nvcc || true)
    echo "nvidia-smi: $gpu; nvcc: ${nvcc_at:-missing}${nvcc_at:+ ($(nvcc --version | grep -o 'release [0-9.]*'))}"
    if [[ $gpu == missing ]]; then
      echo "here the real run stops before step 1: no NVIDIA driver (nvidia-smi not found), so no CUDA GPU"
    fi
    echo "the plan on a GPU machine with these packages ($BUDGET s in all):"
    plan() { printf '  %-5s %-8s %s\n' "$1" "$2" "$3"; }
    plan RUN env "nvidia-smi and the package versions -> env.txt"
    plan RUN build "$PY setup.py build_ext --inplace -> build.log (CUDA sources when torch has CUDA and nvcc is found; <= 300 s)"
    ops_tests="test/unit/ops/test_ops.py test/unit/ops/test_top_n.py"
    if has triton; then ops_tests+=" test/unit/ops/test_triton_kernels.py"; fi
    if has sglang; then for f in $SRT_TESTS; do [[ -f $f ]] && ops_tests+=" $f"; done; fi
    if has sglang && has flashinfer; then ops_tests+=" $FI_TESTS"; fi
    plan RUN tests "pytest $ops_tests -> tests.log (<= 180 s)"
    has pytest || plan SKIP tests "all of them: pytest missing"
    has triton || plan SKIP tests "test/unit/ops/test_triton_kernels.py: triton missing"
    has hypothesis || plan SKIP tests "the property test of test_top_n.py: hypothesis missing (the seeded ones run)"
    has sglang || plan SKIP tests "$SRT_TESTS: sglang missing"
    plan RUN throws "$PY bench/ops_throw_check.py -> throws.txt"
    plan RUN ops "$PY bench/gpu_ops_bench.py --out OUT/ops: parts ops, triton, attention, flashinfer (<= 150 s)"
    has triton || plan SKIP ops "part triton: triton missing"
    if [[ "${BENCH:-1}" != 1 ]]; then
      plan SKIP serving "BENCH=${BENCH}"
    elif has sglang && has flashinfer; then
      plan RUN serving "$PY bench/server_capacity.py --parts capacity,tpot --tpot-shape qwen3-4b ... -> bench/ (the time left)"
    else
      missing=$(for m in sglang flashinfer; do has $m || printf '%s ' $m; done)
      plan SKIP serving "bench/server_capacity.py with FlashInfer: ${missing% } missing (WHEELS=DIR installs wheels)"
    fi
    if has sglang && has flashinfer; then
      plan RUN fi-attn "$FI_TESTS (in tests): the backend over FlashInfer's kernels vs SDPA over the kept positions"
      plan RUN graphs "$FI_TESTS (in tests): torch.cuda.CUDAGraph capture and replay of a PASK decode step"
    else
      missing=$(for m in sglang flashinfer; do has $m || printf '%s ' $m; done)
      plan SKIP fi-attn "$FI_TESTS: ${missing% } missing (WHEELS=DIR installs wheels)"
      plan SKIP graphs "$FI_TESTS (CUDA-graph capture and replay): ${missing% } missing"
    fi
    if has flashinfer; then
      plan RUN ops "part flashinfer: FlashInfer decode, Full vs 0.33 (same batch, 3x), eager and graph-replayed"
    else
      plan SKIP ops "part flashinfer: flashinfer missing"
    fi
  } | tee "$OUT/dry-run.txt"
  { echo "# gpu_check.sh, dry run"; echo; echo '```'; cat "$OUT/dry-run.txt"; echo '```'; } > "$OUT/report.md"
  rm -f "$OUT/dry-run.txt"
  write_meta 0
  exit 0
fi

START=$SECONDS
left() { echo $(( BUDGET - (SECONDS - START) )); }
log() { echo "gpu_check: $*" | tee -a "$OUT/gpu_check.txt"; }
die() { echo "gpu_check: $*" | tee -a "$OUT/gpu_check.txt" >&2; write_meta $((SECONDS - START)); exit 3; }
# run LIMIT NAME CMD...: CMD under `timeout LIMIT` (capped at what the budget has left), logging rc and seconds
run() {
  local limit=$1 name=$2 t0=$SECONDS rc
  shift 2
  (( limit > $(left) )) && limit=$(left)
  if (( limit < 10 )); then log "$name skipped: the budget is spent"; return; fi
  timeout "$limit" "$@"
  rc=$?
  [[ $rc == 124 ]] && log "$name cut at its limit (${limit}s)"
  log "$name rc=$rc $((SECONDS - t0))s"
}

has_cuda_gpu || die "no NVIDIA driver (nvidia-smi not found): this script needs a CUDA GPU (DRY_RUN=1 prints the plan)"
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
for m in ("torch", "triton", "sglang", "flashinfer", "xgrammar", "transformers", "hypothesis"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:  # noqa: BLE001
        print(m, "missing:", e)
import torch
print("torch cuda", torch.version.cuda)
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

run 300 build sh -c "$PY setup.py build_ext --inplace > '$OUT/build.log' 2>&1"
$PY -c "from sglang_pask import ops; print(ops.implementation())" | tee -a "$OUT/build.log"

tests=(test/unit/ops/test_ops.py test/unit/ops/test_top_n.py)
if has triton; then tests+=(test/unit/ops/test_triton_kernels.py)
else log "triton missing: test_triton_kernels.py not run"; fi
if has sglang; then for f in $SRT_TESTS; do [[ -f $f ]] && tests+=("$f"); done
else log "sglang missing: $SRT_TESTS not run"; fi
if has sglang && has flashinfer; then tests+=($FI_TESTS)
else log "sglang or flashinfer missing: $FI_TESTS (FlashInfer vs SDPA, CUDA-graph replay) not run"; fi
run 180 tests sh -c "$PY -m pytest -q -p no:cacheprovider ${tests[*]} > '$OUT/tests.log' 2>&1"
log "tests: $(tail -1 "$OUT/tests.log")"

# every bad-input refusal of the operators raises (one subprocess per case: a crash shows as -11)
run 60 throws sh -c "$PY bench/ops_throw_check.py > '$OUT/throws.txt' 2>&1"

# the operators, the Triton kernels and decode attention alone (torch, numpy, triton): a bare CUDA image
run 150 "ops bench" sh -c "$PY bench/gpu_ops_bench.py --out '$OUT/ops' > '$OUT/ops.log' 2>&1"

if [[ "${BENCH:-1}" == 1 ]] && ! { has sglang && has flashinfer; }; then
  log "serving bench skipped: sglang and flashinfer must both import under $PY (WHEELS=DIR installs them)"
elif [[ "${BENCH:-1}" == 1 ]]; then
  run "$(left)" "serving bench" sh -c "$PY bench/server_capacity.py --parts capacity,tpot --tpot-shape qwen3-4b \
    --contexts 2048,4096 --tpot-requests 8 --requests 64 \
    --server-args '--attention-backend flashinfer --disable-cuda-graph' --out '$OUT/bench' > '$OUT/bench.log' 2>&1"
fi
write_meta $((SECONDS - START))
log "done in $((SECONDS - START))s"
