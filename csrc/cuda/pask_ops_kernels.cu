// CUDA kernels behind torch.ops.sglang_pask.* on CUDA tensors (bound in pask_ops_cuda.cpp).
// Plain CUDA C++ with a C launcher, so `nvcc -c` compile-checks it on machines whose torch has no
// CUDA (CI does: make csrc-check). UNTESTED on a GPU until a device run commits its output.
//
// top_n_mask: the rule of csrc/cpu/pask_ops.cpp (held positions >= tail_start score +inf; keep the
// n held positions of highest (score, position), NaN lowest, ties to the newer position). One block
// per row; a held position t is kept iff fewer than n held positions rank above it. Each thread
// owns positions t = threadIdx.x + k * blockDim.x and counts over the row in shared-memory tiles:
// O(T^2 / blockDim) work per row -- simple and exact; a radix select would be O(T).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 1024;

__device__ __forceinline__ double key_of(const double* scores, int64_t t, int64_t tail) {
  return t >= tail ? INFINITY : scores[t];
}

// a ranks above b (NaN last, then score descending, then position descending); a != b
__device__ __forceinline__ bool better(double ka, int64_t a, double kb, int64_t b) {
  const bool na = isnan(ka), nb = isnan(kb);
  if (na != nb) return nb;
  if (!na && ka != kb) return ka > kb;
  return a > b;
}

__global__ void top_n_mask_kernel(const bool* __restrict__ held, const double* __restrict__ scores,
                                  const int64_t* __restrict__ n, const int64_t* __restrict__ tail_start,
                                  bool* __restrict__ out, int64_t T) {
  const int64_t r = blockIdx.x;
  const bool* hr = held + r * T;
  const double* sr = scores + r * T;
  bool* orow = out + r * T;
  const int64_t want = n[r], tail = tail_start[r];
  __shared__ double tkey[kTile];
  __shared__ int64_t tpos[kTile];
  __shared__ int tcount;
  // positions this thread owns: at most ceil(T / kThreads), visited in passes
  for (int64_t base = 0; base < T; base += kThreads) {
    const int64_t t = base + threadIdx.x;
    const bool mine = t < T && hr[t];
    const double k = mine ? key_of(sr, t, tail) : 0.0;
    int64_t above = 0;
    for (int64_t start = 0; start < T; start += kTile) {
      if (threadIdx.x == 0) tcount = 0;
      __syncthreads();
      for (int64_t j = start + threadIdx.x; j < start + kTile && j < T; j += kThreads) {
        if (hr[j]) {
          const int slot = atomicAdd(&tcount, 1);
          tkey[slot] = key_of(sr, j, tail);
          tpos[slot] = j;
        }
      }
      __syncthreads();
      if (mine)
        for (int i = 0; i < tcount; ++i)
          if (tpos[i] != t && better(tkey[i], tpos[i], k, t)) ++above;
      __syncthreads();
    }
    if (t < T) orow[t] = mine && want > 0 && above < want;
  }
}

}  // namespace

// held bool[R, T], scores float64[R, T], n / tail_start int64[R], out bool[R, T]: device pointers,
// contiguous; launched on `stream`. Returns the launch's error code.
extern "C" cudaError_t pask_top_n_mask_cuda(const bool* held, const double* scores, const int64_t* n,
                                            const int64_t* tail_start, bool* out, int64_t R, int64_t T,
                                            cudaStream_t stream) {
  if (R == 0 || T == 0) return cudaSuccess;
  top_n_mask_kernel<<<static_cast<unsigned>(R), kThreads, 0, stream>>>(held, scores, n, tail_start, out, T);
  return cudaGetLastError();
}
