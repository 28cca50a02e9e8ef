// Argument checks shared by the CPU and CUDA implementations of torch.ops.sglang_pask.* (one
// message per problem, naming the operator and the argument).
#pragma once

#include <ATen/ATen.h>

namespace pask {

// held bool [R, T], scores [R, T], n and tail_start [R]
inline void check_top_n_args(const at::Tensor& held, const at::Tensor& scores, const at::Tensor& n,
                             const at::Tensor& tail_start) {
  TORCH_CHECK(held.dim() == 2 && held.scalar_type() == at::kBool, "top_n_mask: held must be bool [R, T]");
  TORCH_CHECK(scores.sizes() == held.sizes(), "top_n_mask: scores must have held's shape [R, T]");
  TORCH_CHECK(n.numel() == held.size(0) && tail_start.numel() == held.size(0),
              "top_n_mask: n and tail_start must be [R]");
}

// mapping int64 [U, F], 0 <= unit < U
inline void check_take_slots_args(const at::Tensor& mapping, int64_t unit) {
  TORCH_CHECK(mapping.dim() == 2 && mapping.scalar_type() == at::kLong, "take_slots: mapping must be int64 [U, F]");
  TORCH_CHECK(unit >= 0 && unit < mapping.size(0), "take_slots: unit ", unit, " out of range");
}

}  // namespace pask
