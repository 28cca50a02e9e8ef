// CUDA kernels behind torch.ops.sglang_pask.* on CUDA tensors (bound in pask_ops_cuda.cpp).
// Plain CUDA C++ (CUB from the toolkit) with a C launcher, so `nvcc -c` compile-checks it on machines
// whose torch has no CUDA (CI does: make csrc-check).
//
// UNTESTED on a GPU: this radix-select top_n_mask replaced the O(T^2) rank-counting kernel that ran
// on the lent H200 (bench/results/gpu-check-h200/), and no GPU has run it yet. Its algorithm was
// checked on CPU only in a numpy emulation; bench/gpu_check.sh runs test/unit/ops/test_ops.py on
// CUDA, which compares it with the reference bit for bit.
//
// top_n_mask: the rule of csrc/cpu/pask_ops.cpp and python/sglang_pask/ops/reference.py (held
// positions >= tail_start score +inf; keep the n held positions of highest (score, position):
// NaN lowest, -0.0 equal to +0.0, ties to the newer position). One block of 256 threads per row,
// O(T) per row, no memory that grows with T:
//   1. each held position's score becomes a uint64 whose unsigned order is the rank order
//      (order_key; NaN -> 1, every number above it);
//   2. radix select, most significant byte first: 8 passes of a 256-bin histogram over the held
//      keys that share the bytes chosen so far give the exact key K of the n-th best position and
//      how many positions with key K are still wanted (`need`);
//   3. one pass from the newest position down: keys > K are kept, and of the keys == K the newest
//      `need` (a block-wide inclusive scan in position-descending order ranks them).
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <cmath>
#include <cstdint>

namespace {

constexpr int kThreads = 256;  // one thread per bin of an 8-bit digit

// a uint64 whose unsigned order is the rank order of a held position's score: NaN (any payload) 1,
// then -inf < ... < +inf, with -0.0 == +0.0 (the reference compares values, not bits)
__device__ __forceinline__ uint64_t order_key(double v) {
  if (isnan(v)) return 1;
  if (v == 0.0) v = 0.0;
  const uint64_t u = static_cast<uint64_t>(__double_as_longlong(v));
  return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));  // ~u >= ~bits(-inf) = 0x000F...F > 1
}

__device__ __forceinline__ uint64_t key_at(const double* scores, int64_t t, int64_t tail) {
  return order_key(t >= tail ? INFINITY : scores[t]);
}

__global__ void top_n_mask_kernel(const bool* __restrict__ held, const double* __restrict__ scores,
                                  const int64_t* __restrict__ n, const int64_t* __restrict__ tail_start,
                                  bool* __restrict__ out, int64_t T) {
  using Scan = cub::BlockScan<int, kThreads>;
  using Reduce = cub::BlockReduce<int, kThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } tmp;
  __shared__ int hist[kThreads];
  __shared__ int s_held, s_digit, s_need;

  const int64_t r = blockIdx.x;
  const bool* hr = held + r * T;
  const double* sr = scores + r * T;
  bool* orow = out + r * T;
  const int64_t want = n[r], tail = tail_start[r];

  int mine = 0;
  for (int64_t t = threadIdx.x; t < T; t += kThreads) mine += hr[t];
  const int total = Reduce(tmp.reduce).Sum(mine);  // valid in thread 0
  if (threadIdx.x == 0) s_held = total;
  __syncthreads();
  if (want <= 0 || want >= s_held) {  // none, or every held position
    for (int64_t t = threadIdx.x; t < T; t += kThreads) orow[t] = want > 0 && hr[t];
    return;
  }

  // 2. invariant: 1 <= need <= #held keys matching `prefix` on the bytes in `mask`; every held key
  // above that prefix is kept, every one below is not
  uint64_t prefix = 0, mask = 0;
  int need = static_cast<int>(want);
  for (int shift = 56; shift >= 0; shift -= 8) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    for (int64_t t = threadIdx.x; t < T; t += kThreads) {
      if (!hr[t]) continue;
      const uint64_t k = key_at(sr, t, tail);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 0xff], 1);
    }
    __syncthreads();
    // thread i holds digit 255 - i: the inclusive sum counts the keys with a digit >= 255 - i; the
    // one thread where it first reaches `need` holds the digit of the n-th best key
    const int h = hist[kThreads - 1 - threadIdx.x];
    int incl;
    Scan(tmp.scan).InclusiveSum(h, incl);
    if (incl >= need && incl - h < need) {
      s_digit = kThreads - 1 - threadIdx.x;
      s_need = need - (incl - h);
    }
    __syncthreads();
    prefix |= static_cast<uint64_t>(s_digit) << shift;
    mask |= uint64_t{0xff} << shift;
    need = s_need;
    __syncthreads();  // every thread has read s_digit / s_need and is done with tmp.scan
  }

  // 3. newest first: thread 0 takes the newest position of each chunk of kThreads
  int carry = 0;  // keys == prefix seen in the newer chunks
  for (int64_t base = ((T - 1) / kThreads) * kThreads; base >= 0; base -= kThreads) {
    const int64_t t = base + (kThreads - 1 - threadIdx.x);
    const bool h = t < T && hr[t];
    const uint64_t k = h ? key_at(sr, t, tail) : 0;
    const int tie = h && k == prefix;
    int incl, chunk;
    Scan(tmp.scan).InclusiveSum(tie, incl, chunk);
    if (t < T) orow[t] = h && (k > prefix || (tie && carry + incl <= need));
    carry += chunk;
    __syncthreads();  // tmp.scan is reused by the next chunk
  }
}

}  // namespace

// held bool[R, T], scores float64[R, T], n / tail_start int64[R], out bool[R, T]: device pointers,
// contiguous; launched on `stream`. Returns the launch's error code.
extern "C" cudaError_t pask_top_n_mask_cuda(const bool* held, const double* scores, const int64_t* n,
                                            const int64_t* tail_start, bool* out, int64_t R, int64_t T,
                                            cudaStream_t stream) {
  if (R == 0 || T == 0) return cudaSuccess;
  if (T > INT_MAX || R > INT_MAX) return cudaErrorInvalidValue;  // counts are int
  top_n_mask_kernel<<<static_cast<unsigned>(R), kThreads, 0, stream>>>(held, scores, n, tail_start, out, T);
  return cudaGetLastError();
}
