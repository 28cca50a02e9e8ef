// The CUDA implementations of torch.ops.sglang_pask.* (schemas in csrc/cpu/pask_ops.cpp). Built
// only by a CUDA torch (setup.py); compile-checked elsewhere with `make csrc-check`. Run on an H200
// by bench/gpu_check.sh: test_ops.py passed on CUDA (bench/results/gpu-check-h200/) with the earlier
// top_n_mask kernel; the radix select that replaced it (pask_ops_kernels.cu) is UNTESTED on a GPU.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../pask_ops_checks.h"

extern "C" cudaError_t pask_top_n_mask_cuda(const bool* held, const double* scores, const int64_t* n,
                                            const int64_t* tail_start, bool* out, int64_t R, int64_t T,
                                            cudaStream_t stream);

namespace {

at::Tensor top_n_mask_cuda(const at::Tensor& held, const at::Tensor& scores, const at::Tensor& n,
                           const at::Tensor& tail_start) {
  pask::check_top_n_args(held, scores, n, tail_start);
  const int64_t R = held.size(0), T = held.size(1);
  const c10::cuda::CUDAGuard guard(held.device());
  const auto h = held.contiguous();
  const auto s = scores.to(at::kDouble).contiguous();
  const auto nn = n.to(held.device(), at::kLong).contiguous();
  const auto ts = tail_start.to(held.device(), at::kLong).contiguous();
  auto out = at::empty({R, T}, held.options());
  const cudaError_t err = pask_top_n_mask_cuda(h.data_ptr<bool>(), s.data_ptr<double>(), nn.data_ptr<int64_t>(),
                                               ts.data_ptr<int64_t>(), out.data_ptr<bool>(), R, T,
                                               c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, std::string("top_n_mask: CUDA launch failed: ") + cudaGetErrorString(err));
  return out;
}

// the unit's held slots of full_ids, in order, and those entries zeroed (ATen ops on the device)
at::Tensor take_slots_cuda(const at::Tensor& mapping, int64_t unit, const at::Tensor& full_ids) {
  pask::check_take_slots_args(mapping, unit, full_ids);
  auto row = mapping.select(0, unit);
  const auto ids = full_ids.to(mapping.device(), at::kLong);
  const auto slots = row.index_select(0, ids);
  const auto held = slots.gt(0);
  row.index_put_({ids.masked_select(held)}, 0);
  return slots.masked_select(held);
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_pask, CUDA, m) {
  m.impl("top_n_mask", &top_n_mask_cuda);
  m.impl("take_slots", &take_slots_cuda);
}
