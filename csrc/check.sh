#!/usr/bin/env bash
# Compile-check csrc's CUDA sources on a machine whose torch has no CUDA (CI; `make csrc-check`):
# the kernels with nvcc to an object, the torch binding with the host compiler (-fsyntax-only)
# against torch's headers and the CUDA toolkit's. A CPU torch wheel lacks the one header CMake
# generates for c10/cuda (cuda_cmake_macros.h); the check writes it, as CMake would, into a
# temporary include folder. Then the Triton kernels of python/sglang_pask/ops/ are compiled to
# cubins the same way (bench/triton_compile_check.py). Nothing built here runs: a GPU machine builds
# and tests (setup.py, bench/gpu_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
NVCC=${NVCC:-nvcc}
ARCH=${ARCH:-sm_90}
command -v "$NVCC" >/dev/null || { echo "csrc-check: $NVCC not found (set NVCC=...)" >&2; exit 2; }
TI=$($PY -c "import torch.utils.cpp_extension as c; print(' '.join('-I' + p for p in c.include_paths()))")
CUDA_INC=$(dirname "$(dirname "$(command -v "$NVCC")")")/include
[[ -f $CUDA_INC/cuda_runtime.h ]] || CUDA_INC=/usr/local/cuda/include
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/c10/cuda/impl"
echo '#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS' > "$tmp/c10/cuda/impl/cuda_cmake_macros.h"
for cu in csrc/cuda/*.cu; do
  "$NVCC" -std=c++17 -O3 -arch="$ARCH" -c "$cu" -o "$tmp/$(basename "$cu").o"
  echo "csrc-check: nvcc $("$NVCC" --version | grep -o 'release [0-9.]*') compiled $cu ($ARCH)"
done
for cpp in csrc/cuda/*.cpp; do
  ${CXX:-c++} -std=c++20 -fsyntax-only -w $TI -I"$tmp" -I"$CUDA_INC" "$cpp"
  echo "csrc-check: ${CXX:-c++} checked $cpp against torch and CUDA headers"
done
TRITON_CACHE_DIR="$tmp/triton" PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} $PY bench/triton_compile_check.py --arch "${ARCH//[!0-9]/}"
