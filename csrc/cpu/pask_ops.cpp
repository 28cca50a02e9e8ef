// sglang_pask's compiled CPU operators, registered as torch.ops.sglang_pask.* (loaded by
// python/sglang_pask/ops/__init__.py; the torch reference in ops/reference.py is the oracle that
// test/unit/ops/test_ops.py checks them against on random inputs).
//
//   top_n_mask(held bool[R, T], scores float64[R, T], n int64[R], tail_start int64[R]) -> bool[R, T]
//     per row r: every held position >= tail_start[r] scores +inf; keep the n[r] held positions of
//     highest (score, position) -- ties go to the newer position (-0.0 ties +0.0), NaN ranks below
//     every number --, all of them when n[r] reaches the held count, none when n[r] <= 0. O(T) per row
//     (nth_element over (order key, position) pairs compared as integers), rows in parallel.
//   take_slots(mapping int64[U, F], unit int, full_ids int64[N]) -> int64[M]
//     the unit's slots of full_ids that are held (> 0), in full_ids order, and those mapping
//     entries set to 0: a drop's slot lookup and mapping rewrite in one pass. full_ids are unique
//     (a request's row of req_to_token) and within [0, F).
//   decode_attention(q [B, H, D], k_buf [S, HK, D], v_buf [S, HK, Dv], slots int64[B, L],
//                    counts int64[B], scale float) -> [B, H, Dv] (q's dtype)
//     one decode query per request over the KV rows slots[b, :counts[b]] read in place (no gathered
//     copy): softmax(scale * q . k) v, query head h reading KV head h / (H / HK) (SDPA's
//     enable_gqa); float accumulation; requests in parallel. 1 <= counts[b] <= L, those slots in [0, S).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../pask_ops_checks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace {

// a uint64 whose unsigned order is the score order: -inf < ... < +inf, NaN (any payload) lowest,
// -0.0 equal to +0.0 (the reference compares values: a tie between them goes to the newer position)
inline uint64_t order_key(double v) {
  if (std::isnan(v)) return 0;
  if (v == 0.0) v = 0.0;
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

// rows b0 ..< b1 of decode_attention (see the header); returns false at the first request whose
// count or slot is out of range (nothing else is checked per element)
template <typename T>
bool decode_attention_rows(int64_t b0, int64_t b1, const T* qp, const T* kp, const T* vp, const int64_t* sp,
                           const int64_t* cp, T* op, int64_t H, int64_t HK, int64_t D, int64_t Dv, int64_t L,
                           int64_t S, int64_t ks0, int64_t ks1, int64_t vs0, int64_t vs1, float scale) {
  const int64_t G = H / HK;
  std::vector<float> qf(H * D), scores(G * L), acc(G * Dv);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t n = cp[b];
    const int64_t* slots = sp + b * L;
    if (n < 1 || n > L) return false;
    for (int64_t j = 0; j < n; ++j)
      if (slots[j] < 0 || slots[j] >= S) return false;
    for (int64_t i = 0; i < H * D; ++i) qf[i] = static_cast<float>(qp[b * H * D + i]) * scale;
    for (int64_t g = 0; g < HK; ++g) {
      const float* qg = qf.data() + g * G * D;  // the G query heads reading KV head g
      for (int64_t j = 0; j < n; ++j) {
        const T* kr = kp + slots[j] * ks0 + g * ks1;
        for (int64_t h = 0; h < G; ++h) {
          const float* qh = qg + h * D;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int64_t d = 0; d < D; ++d) dot += qh[d] * static_cast<float>(kr[d]);
          scores[h * L + j] = dot;
        }
      }
      for (int64_t h = 0; h < G; ++h) {  // softmax over the n held keys
        float* sh = scores.data() + h * L;
        const float mx = *std::max_element(sh, sh + n);
        float sum = 0.f;
        for (int64_t j = 0; j < n; ++j) sum += (sh[j] = std::exp(sh[j] - mx));
        const float inv = 1.f / sum;
        for (int64_t j = 0; j < n; ++j) sh[j] *= inv;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j < n; ++j) {
        const T* vr = vp + slots[j] * vs0 + g * vs1;
        for (int64_t h = 0; h < G; ++h) {
          const float p = scores[h * L + j];
          float* ah = acc.data() + h * Dv;
#pragma omp simd
          for (int64_t d = 0; d < Dv; ++d) ah[d] += p * static_cast<float>(vr[d]);
        }
      }
      for (int64_t h = 0; h < G; ++h)
        for (int64_t d = 0; d < Dv; ++d) op[(b * H + g * G + h) * Dv + d] = static_cast<T>(acc[h * Dv + d]);
    }
  }
  return true;
}

at::Tensor decode_attention_cpu(const at::Tensor& q, const at::Tensor& k_buf, const at::Tensor& v_buf,
                                const at::Tensor& slots, const at::Tensor& counts, double scale) {
  pask::check_decode_attention_args(q, k_buf, v_buf, slots, counts);
  const auto qc = q.contiguous();
  const auto sc = slots.contiguous();
  const auto cc = counts.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), HK = k_buf.size(1), Dv = v_buf.size(2);
  const int64_t L = slots.size(1), S = k_buf.size(0);
  auto out = at::empty({B, H, Dv}, q.options());
  std::atomic<bool> ok{true};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "decode_attention", [&] {
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      if (!decode_attention_rows<scalar_t>(b0, b1, qc.data_ptr<scalar_t>(), k_buf.data_ptr<scalar_t>(),
                                           v_buf.data_ptr<scalar_t>(), sc.data_ptr<int64_t>(),
                                           cc.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), H, HK, D, Dv, L, S,
                                           k_buf.stride(0), k_buf.stride(1), v_buf.stride(0), v_buf.stride(1),
                                           static_cast<float>(scale)))
        ok = false;
    });
  });
  TORCH_CHECK(ok.load(), std::string("decode_attention: a count outside [1, ") + std::to_string(L) +
                             "] or a slot outside [0, " + std::to_string(S) + ")");
  return out;
}

}  // namespace

TORCH_LIBRARY(sglang_pask, m) {
  m.def("top_n_mask(Tensor held, Tensor scores, Tensor n, Tensor tail_start) -> Tensor");
  m.def("take_slots(Tensor(a!) mapping, int unit, Tensor full_ids) -> Tensor");
  m.def("decode_attention(Tensor q, Tensor k_buf, Tensor v_buf, Tensor slots, Tensor counts, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_pask, CPU, m) {
  m.impl("top_n_mask", &top_n_mask_cpu);
  m.impl("take_slots", &take_slots_cpu);
  m.impl("decode_attention", &decode_attention_cpu);
}
