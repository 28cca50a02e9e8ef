// sglang_pask's compiled CPU operators, registered as torch.ops.sglang_pask.* (loaded by
// python/sglang_pask/ops/__init__.py; the torch reference in ops/reference.py is the oracle that
// test/test_ops.py checks them against on random inputs).
//
//   top_n_mask(held bool[R, T], scores float64[R, T], n int64[R], tail_start int64[R]) -> bool[R, T]
//     per row r: every held position >= tail_start[r] scores +inf; keep the n[r] held positions of
//     highest (score, position) -- ties go to the newer position, NaN ranks below every number --,
//     all of them when n[r] reaches the held count, none when n[r] <= 0. O(T) per row
//     (nth_element over (order key, position) pairs compared as integers), rows in parallel.
//   take_slots(mapping int64[U, F], unit int, full_ids int64[N]) -> int64[M]
//     the unit's slots of full_ids that are held (> 0), in full_ids order, and those mapping
//     entries set to 0: a drop's slot lookup and mapping rewrite in one pass. full_ids are unique
//     (a request's row of req_to_token) and within [0, F).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../pask_ops_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace {

// a uint64 whose unsigned order is the score order: -inf < ... < +inf, NaN (any payload) lowest
inline uint64_t order_key(double v) {
  if (std::isnan(v)) return 0;
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
}

at::Tensor top_n_mask_cpu(const at::Tensor& held, const at::Tensor& scores, const at::Tensor& n,
                          const at::Tensor& tail_start) {
  pask::check_top_n_args(held, scores, n, tail_start);
  const int64_t R = held.size(0), T = held.size(1);
  const auto h = held.contiguous();
  const auto s = scores.to(at::kDouble).contiguous();
  const auto nn = n.to(at::kLong).contiguous();
  const auto ts = tail_start.to(at::kLong).contiguous();
  auto out = at::zeros({R, T}, held.options());
  const bool* hp = h.data_ptr<bool>();
  const double* sp = s.data_ptr<double>();
  const int64_t* np_ = nn.data_ptr<int64_t>();
  const int64_t* tp = ts.data_ptr<int64_t>();
  bool* op = out.data_ptr<bool>();
  // rows in parallel, about 64k positions per task: below that, waking a second thread costs
  // more than it saves (measured: 64 x 1,200 took 0.8 ms on one thread, 2.8 ms on two busy cores)
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(T, 1));
  at::parallel_for(0, R, grain, [&](int64_t begin, int64_t end) {
    // (order key, position): larger is better; compared as unsigned integers, ties to the newer
    std::vector<std::pair<uint64_t, int64_t>> cand;
    for (int64_t r = begin; r < end; ++r) {
      const bool* hr = hp + r * T;
      const double* sr = sp + r * T;
      bool* orow = op + r * T;
      const int64_t want = np_[r];
      if (want <= 0) continue;
      cand.clear();
      for (int64_t t = 0; t < T; ++t)
        if (hr[t]) cand.emplace_back(order_key(t >= tp[r] ? std::numeric_limits<double>::infinity() : sr[t]), t);
      if (static_cast<int64_t>(cand.size()) > want)
        std::nth_element(cand.begin(), cand.begin() + want, cand.end(), std::greater<>());
      const int64_t keep = std::min<int64_t>(want, static_cast<int64_t>(cand.size()));
      for (int64_t i = 0; i < keep; ++i) orow[cand[i].second] = true;
    }
  });
  return out;
}

// `mapping`'s data is written through the const reference (ATen's convention for a Tensor(a!) argument)
at::Tensor take_slots_cpu(const at::Tensor& mapping, int64_t unit, const at::Tensor& full_ids) {
  pask::check_take_slots_args(mapping, unit, full_ids);
  TORCH_CHECK(mapping.is_contiguous(), "take_slots: mapping must be contiguous");
  const auto ids = full_ids.to(at::kLong).contiguous();
  const int64_t F = mapping.size(1), N = ids.numel();
  int64_t* row = mapping.mutable_data_ptr<int64_t>() + unit * F;
  const int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<int64_t> taken;
  taken.reserve(N);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t f = ip[i];  // in [0, F): checked above
    if (row[f] > 0) {
      taken.push_back(row[f]);
      row[f] = 0;
    }
  }
  return at::tensor(taken, mapping.options());
}

}  // namespace

TORCH_LIBRARY(sglang_pask, m) {
  m.def("top_n_mask(Tensor held, Tensor scores, Tensor n, Tensor tail_start) -> Tensor");
  m.def("take_slots(Tensor(a!) mapping, int unit, Tensor full_ids) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_pask, CPU, m) {
  m.impl("top_n_mask", &top_n_mask_cpu);
  m.impl("take_slots", &take_slots_cpu);
}
