// Argument checks shared by the CPU and CUDA implementations of torch.ops.sglang_pask.* (one
// message per problem, naming the operator and the argument).
//
// Every message is ONE std::string (built with std::to_string): TORCH_CHECK formats several
// arguments through std::ostringstream, and on the GPU script's machine (torch 2.11 + CUDA 13, the
// extension built by that image's /opt/gcc) every such formatted throw crashed the process while
// one-string messages raised cleanly (bench/results/gpu-check-h200/diag.txt).
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace pask {

// held bool [R, T], scores [R, T], n and tail_start [R]
inline void check_top_n_args(const at::Tensor& held, const at::Tensor& scores, const at::Tensor& n,
                             const at::Tensor& tail_start) {
  TORCH_CHECK(held.dim() == 2 && held.scalar_type() == at::kBool, "top_n_mask: held must be bool [R, T]");
  TORCH_CHECK(scores.sizes() == held.sizes(), "top_n_mask: scores must have held's shape [R, T]");
  TORCH_CHECK(n.numel() == held.size(0) && tail_start.numel() == held.size(0),
              "top_n_mask: n and tail_start must be [R]");
}

// mapping int64 [U, F], 0 <= unit < U, full_ids [N] in [0, F). Checked before anything is written:
// a refused call leaves the mapping as it was (and an out-of-range id never reaches a CUDA
// index_select, whose device-side assert would end the process's CUDA context).
inline void check_take_slots_args(const at::Tensor& mapping, int64_t unit, const at::Tensor& full_ids) {
  TORCH_CHECK(mapping.dim() == 2 && mapping.scalar_type() == at::kLong, "take_slots: mapping must be int64 [U, F]");
  TORCH_CHECK(unit >= 0 && unit < mapping.size(0), std::string("take_slots: unit ") + std::to_string(unit) + " out of range");
  TORCH_CHECK(full_ids.dim() == 1, "take_slots: full_ids must be [N]");
  const int64_t F = mapping.size(1);
  const auto bad = full_ids.lt(0).logical_or(full_ids.ge(F));
  if (bad.any().item<bool>()) {
    const int64_t f = full_ids.masked_select(bad)[0].item<int64_t>();
    TORCH_CHECK(false, std::string("take_slots: full id ") + std::to_string(f) + " out of range [0, " +
                           std::to_string(F) + ")");
  }
}

// q [B, H, D]; k_buf [S, HK, D] and v_buf [S, HK, Dv] with unit stride in the last dim, q's dtype
// and device; H a multiple of HK; slots int64 [B, L]; counts int64 [B]
inline void check_decode_attention_args(const at::Tensor& q, const at::Tensor& k_buf, const at::Tensor& v_buf,
                                        const at::Tensor& slots, const at::Tensor& counts) {
  TORCH_CHECK(q.dim() == 3 && k_buf.dim() == 3 && v_buf.dim() == 3,
              "decode_attention: q must be [B, H, D], k_buf [S, HK, D], v_buf [S, HK, Dv]");
  TORCH_CHECK(k_buf.scalar_type() == q.scalar_type() && v_buf.scalar_type() == q.scalar_type(),
              "decode_attention: q, k_buf and v_buf must share one dtype");
  TORCH_CHECK(k_buf.size(0) == v_buf.size(0) && k_buf.size(1) == v_buf.size(1) && k_buf.size(2) == q.size(2),
              "decode_attention: k_buf / v_buf shapes do not match q");
  TORCH_CHECK(k_buf.size(1) > 0 && q.size(1) % k_buf.size(1) == 0,
              "decode_attention: the query heads must be a multiple of the KV heads");
  TORCH_CHECK(k_buf.stride(2) == 1 && v_buf.stride(2) == 1, "decode_attention: k_buf / v_buf need unit stride in dim 2");
  TORCH_CHECK(slots.dim() == 2 && slots.size(0) == q.size(0) && slots.scalar_type() == at::kLong,
              "decode_attention: slots must be int64 [B, L]");
  TORCH_CHECK(counts.dim() == 1 && counts.size(0) == q.size(0) && counts.scalar_type() == at::kLong,
              "decode_attention: counts must be int64 [B]");
}

}  // namespace pask
