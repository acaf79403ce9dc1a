// Causal prefill attention on the CPU (fp32), flash-attention style. A task is
// one sequence, one KV head and a block of kQueryRows prompt rows: the G query
// heads that share the KV head times the block's rows make G*kQueryRows query
// rows, which walk the keys up to the block's last row kKeyBlock at a time with
// an online softmax (running max and sum per query row; the accumulator is
// rescaled when the max grows). Scores exist for one key block at a time, and
// each K and V block is read from cache once for all the task's query rows.
// Also the prefill attention operation's CPU implementation (fp32), verified on
// sampled rows against reference::prefill_attention_row.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/attention_tiles.hpp"
#include "cpu/prefill_attention.hpp"
#include "cpu/simd.hpp"
#include "phasebench/error.hpp"
#include "cpu/cpu_op.hpp"
#include "reference/common.hpp"
#include "reference/prefill_attention.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench::cpu {

namespace {
// Equal, so that the diagonal key block starts at the query block's first row
// and no query row ever sees a block with every key masked.
constexpr std::uint64_t kQueryRows = kPrefillQueryRows, kKeyBlock = kPrefillQueryRows;
}  // namespace

void prefill_attention(const PrefillAttentionArgs& a) {
  using namespace attention_tiles;
  if (a.Hkv == 0 || a.Hq % a.Hkv != 0) throw Unsupported("prefill attention needs Hq to be a multiple of Hkv");
  if (a.S == 0 || a.D == 0) throw Unsupported("prefill attention needs a prompt and a head size");
  const std::uint64_t G = a.Hq / a.Hkv, S = a.S, D = a.D, rs = a.Hkv * D;  // rs: K/V row stride
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::uint64_t blocks = (S + kQueryRows - 1) / kQueryRows;
  const auto tasks = static_cast<std::int64_t>(a.B * a.Hkv * blocks);
#pragma omp parallel
  {
    const std::uint64_t max_rows = G * kQueryRows;
    std::vector<float> q(max_rows * D), acc(max_rows * D), mx(max_rows), sum(max_rows), s(max_rows * kKeyBlock);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      // Last query blocks first: they attend to the most keys (load balance).
      const auto tk = static_cast<std::uint64_t>(task);
      const std::uint64_t qb = blocks - 1 - tk % blocks, bh = tk / blocks, b = bh / a.Hkv, h = bh % a.Hkv;
      const std::uint64_t i0 = qb * kQueryRows, rows = std::min(kQueryRows, S - i0), m = G * rows;
      // Query row g*rows + r: query head h*G+g at prompt position i0+r.
      for (std::uint64_t g = 0; g < G; ++g)
        for (std::uint64_t r = 0; r < rows; ++r)
          std::copy_n(a.q + ((b * S + i0 + r) * a.Hq + h * G + g) * D, D, q.data() + (g * rows + r) * D);
      std::fill_n(acc.data(), m * D, 0.0f);
      std::fill_n(mx.data(), m, -INFINITY);
      std::fill_n(sum.data(), m, 0.0f);
      const float* k = a.k + (b * S * a.Hkv + h) * D;
      const float* v = a.v + (b * S * a.Hkv + h) * D;
      for (std::uint64_t l0 = 0; l0 < i0 + rows; l0 += kKeyBlock) {
        const std::uint64_t n = std::min(kKeyBlock, i0 + rows - l0);
        block_scores(k + l0 * rs, rs, n, q.data(), m, D, scale, s.data(), kKeyBlock, Prefetcher{});
        for (std::uint64_t j = 0; j < m; ++j) {
          float* sj = s.data() + j * kKeyBlock;
          const std::uint64_t pos = i0 + j % rows;
          if (l0 + n > pos + 1)  // the diagonal block: keys after the query's position
            for (std::uint64_t t = pos + 1 - l0; t < n; ++t) sj[t] = -INFINITY;
          const float mb = simd::max_of(sj, n);
          if (mb > mx[j]) {
            const float corr = std::exp(mx[j] - mb);  // 0 on the first block (mx = -inf)
            sum[j] *= corr;
            for (std::uint64_t d = 0; d < D; ++d) acc[j * D + d] *= corr;
            mx[j] = mb;
          }
          // Masked scores give exp(-inf) = 0 (the vector exp's smallest
          // normal, ~1e-38, where it clamps: nothing a float sum can see).
          sum[j] += simd::exp_shift_sum(sj, n, mx[j]);
        }
        block_pv(v + l0 * rs, rs, n, s.data(), kKeyBlock, m, D, acc.data(), Prefetcher{});
      }
      for (std::uint64_t g = 0; g < G; ++g)
        for (std::uint64_t r = 0; r < rows; ++r) {
          const std::uint64_t j = g * rows + r;
          const float inv = 1.0f / sum[j];
          float* o = a.out + ((b * S + i0 + r) * a.Hq + h * G + g) * D;
          for (std::uint64_t d = 0; d < D; ++d) o[d] = acc[j * D + d] * inv;
        }
    }
  }
}

namespace {

class CpuPrefillAttention final : public CpuOp {
 public:
  explicit CpuPrefillAttention(const OpRequest& r)
      : CpuOp(r.footprint_bytes()), r_(r), s_(PrefillAttentionShape::of(r.shape)) {
    const std::uint64_t nq = mul({s_.B, s_.S, s_.Hq, s_.D}, "prefill attention query elements");
    const std::uint64_t nkv = mul({s_.B, s_.S, s_.Hkv, s_.D}, "prefill attention key elements");
    q_ = HostBuffer(nq * 4);
    k_ = HostBuffer(nkv * 4);
    v_ = HostBuffer(nkv * 4);
    out_ = HostBuffer(nq * 4);
    fill(q_, DType::fp32, nq, r.seed + 1);
    fill(k_, DType::fp32, nkv, r.seed + 2);
    fill(v_, DType::fp32, nkv, r.seed + 3);
    std::memset(out_.get(), 0, out_.bytes());
    for (const HostBuffer* b : {&q_, &k_, &v_, &out_}) track(b->get(), b->bytes());
  }

  void run() override {
    PrefillAttentionArgs a;
    a.q = q_.as<float>();
    a.k = k_.as<float>();
    a.v = v_.as<float>();
    a.out = out_.as<float>();
    a.B = s_.B;
    a.S = s_.S;
    a.Hq = s_.Hq;
    a.Hkv = s_.Hkv;
    a.D = s_.D;
    prefill_attention(a);
  }

  // Sampled (sequence, query head) pairs, and in each the rows around the
  // kernel's query blocks.
  void verify() override {
    run();
    const std::uint64_t S = s_.S, D = s_.D, G = s_.Hq / s_.Hkv;
    const auto rows = reference::prefill_rows_to_check(S, kPrefillQueryRows);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> got, ref(D);
    std::vector<double> want;
    for (auto [b, hq] : sample_positions(s_.B, s_.Hq, 8, r_.seed)) {
      const std::uint64_t h = hq / G;
      auto kv_row = [&](const HostBuffer& buf, std::uint64_t l) { return buf.as<float>() + ((b * S + l) * s_.Hkv + h) * D; };
      for (std::uint64_t i : rows) {
        const std::uint64_t off = ((b * S + i) * s_.Hq + hq) * D;
        reference::prefill_attention_row(
            q_.as<float>() + off, i, D, scale, [&](std::size_t l) { return kv_row(k_, l); },
            [&](std::size_t l) { return kv_row(v_, l); }, ref.data());
        got.insert(got.end(), out_.as<float>() + off, out_.as<float>() + off + D);
        want.insert(want.end(), ref.begin(), ref.end());
      }
    }
    reference::check_rows_close(got, want, D, reference::tolerance_for(DType::fp32),
                                "prefill attention (B=" + std::to_string(s_.B) + " S=" + std::to_string(S) +
                                    " Hq=" + std::to_string(s_.Hq) + " Hkv=" + std::to_string(s_.Hkv) +
                                    " D=" + std::to_string(D) + ")");
  }

  std::vector<float> output_values() override { return reference::to_float(out_.get(), DType::fp32, out_.bytes() / 4); }

 private:
  OpRequest r_;
  PrefillAttentionShape s_;
  HostBuffer q_, k_, v_, out_;
};

std::optional<std::string> shape_limits(const OpRequest& r, const CpuEnv&) {
  const auto p = PrefillAttentionShape::of(r.shape);
  if (p.Hkv == 0 || p.Hq % p.Hkv != 0 || p.S == 0 || p.D == 0)
    return "prefill attention needs S, D > 0 and Hq a multiple of Hkv";
  if (p.S > 0x7fffffff || p.Hkv * p.D > 0x7fffffff) return "a dimension exceeds BLAS's 32-bit integers";
  return std::nullopt;
}

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(prefill_attention) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  registry.add({kPrefillAttention, Impl::own, [](DType t, const CpuEnv&) { return t == DType::fp32; }, {}, shape_limits,
                {}, [](CpuEnv&, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
                  return std::make_unique<CpuPrefillAttention>(r);
                }});
}

