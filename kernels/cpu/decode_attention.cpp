// Decode attention on the CPU. A task is one sequence and a chunk of KV heads;
// the Hq/Hkv query heads that share a KV head, times the step's S new tokens,
// are handled together, so each K and V row is read from memory once for the
// whole group (GQA, speculative verification). Two streaming
// passes: K to scores (register tiles of heads x rows, summed horizontally
// together), then V weighted by the softmax (register tiles of heads x 16
// columns). Both walk the cache in blocks of 16 tokens that never straddle a
// page, so contiguous and paged caches go through the same code and give
// bit-identical results.
// Also the decode attention operations' CPU implementations (contiguous and
// paged), verified per sampled head against reference::decode_attention_head.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/decode_attention.hpp"
#include "cpu/attention_tiles.hpp"
#include "cpu/simd.hpp"
#include "phasebench/error.hpp"
#include "common/paged_kv.hpp"
#include "cpu/cpu_op.hpp"
#include "reference/common.hpp"
#include "reference/decode_attention.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/ops/decode_attention.hpp"

namespace phasebench::cpu {

namespace {

constexpr std::uint64_t kBlock = 16;  // tokens per block; pages are multiples of it
// Blocks ahead (in the order the cache is walked) prefetched meanwhile.
constexpr std::uint64_t kPrefetchBlocks = 2;
using namespace attention_tiles;

// KV heads per task: as many as keep at least one task per thread (tasks are
// equal, and longer runs per page are what paging needs), a divisor of Hkv.
std::uint64_t heads_per_task(std::uint64_t B, std::uint64_t Hkv, std::uint64_t threads) {
  std::uint64_t best = 1;
  for (std::uint64_t c = 1; c <= Hkv; ++c)
    if (Hkv % c == 0 && B * (Hkv / c) >= threads) best = c;
  return best;
}

// T: q and out; KV: the cache's elements (T, or simd::Fp8E4M3 with per-head scales).
template <class T, class KV>
void run(const DecodeAttentionArgs& a) {
  // L: the cache's stride and the longest context; S*group query rows per KV head,
  // ordered (new token, head).
  const std::uint64_t group = a.Hq / a.Hkv, L = a.L, D = a.D, S = a.S, SG = S * group;
  auto length = [&](std::uint64_t b) { return a.lengths ? a.lengths[b] : L; };
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto k_scale = [&](std::uint64_t h) { return a.k_scale ? a.k_scale[h] : 1.0f; };
  auto v_scale = [&](std::uint64_t h) { return a.v_scale ? a.v_scale[h] : 1.0f; };
  const T* q_all = static_cast<const T*>(a.q);
  const KV* k_all = static_cast<const KV*>(a.k);
  const KV* v_all = static_cast<const KV*>(a.v);
  T* out_all = static_cast<T*>(a.out);
  const bool paged = a.block_table != nullptr;
  // Row l of (b, h): in the contiguous cache [B,Hkv,L,D] or the paged pool
  // [pages,Hkv,P,D] through the block table.
  auto row = [&](const KV* base, std::uint64_t b, std::uint64_t h, std::uint64_t l) {
    if (!paged) return base + ((b * a.Hkv + h) * L + l) * D;
    const auto page = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + l / a.page_size]);
    return base + ((page * a.Hkv + h) * a.page_size + l % a.page_size) * D;
  };
  // Block boundaries: every kBlock tokens and every page end, the same for all
  // heads, so a block's rows are contiguous in memory.
  auto block_len = [&](std::uint64_t at, std::uint64_t len) {
    const std::uint64_t n = std::min(kBlock, len - at);
    return paged ? std::min(n, a.page_size - at % a.page_size) : n;
  };
  // A task is one sequence and a chunk of C KV heads. Each layout is walked in
  // its memory order: the contiguous cache head by head (one run of L rows
  // each), the paged pool page by page with the C heads of a page together
  // (C*P*D contiguous elements), so paging costs only the jumps between pages,
  // not C times as many of them. Per head the blocks and the arithmetic are the
  // same in both orders, so the results are bit-identical.
  // fn(c, l, n, ahead): head h0+c, rows l..l+n-1; `ahead` is the block
  // kPrefetchBlocks further in this order, prefetched while this one is processed.
  auto for_each_block = [&](const KV* base, std::uint64_t b, std::uint64_t h0, std::uint64_t C, std::uint64_t len,
                            auto&& fn) {
    // Block i of the order starts at token (i / C) * kBlock of head i % C when
    // paged, at token (i % nb) * kBlock of head i / nb when contiguous (exact
    // when pages are multiples of kBlock; otherwise only the hint is off).
    const std::uint64_t nb = (len + kBlock - 1) / kBlock, total = nb * C;
    auto block = [&](std::uint64_t i) {
      if (i >= total) return Prefetcher{};
      const std::uint64_t c = paged ? i % C : i / nb, l = (paged ? i / C : i % nb) * kBlock;
      return Prefetcher{reinterpret_cast<const char*>(row(base, b, h0 + c, l)), block_len(l, len) * D * sizeof(KV)};
    };
    std::uint64_t i = 0;
    if (!paged) {
      for (std::uint64_t c = 0; c < C; ++c)
        for (std::uint64_t l = 0, n = 0; l < len; l += n, ++i)
          fn(c, l, n = block_len(l, len), block(i + kPrefetchBlocks));
    } else {
      for (std::uint64_t l = 0, n = 0; l < len; l += n) {
        n = block_len(l, len);
        for (std::uint64_t c = 0; c < C; ++c, ++i) fn(c, l, n, block(i + kPrefetchBlocks));
      }
    }
  };
  const std::uint64_t C = heads_per_task(a.B, a.Hkv, static_cast<std::uint64_t>(omp_get_max_threads()));
  const std::uint64_t chunks = a.Hkv / C;
  const std::int64_t tasks = static_cast<std::int64_t>(a.B * chunks);
  const std::uint64_t rows_per_task = C * SG;  // query rows of a task: (KV head, new token, head of its group)
  // Row j of a task: KV head h0 + j / SG, new token (j % SG) / group, query head
  // (h0 + j / SG) * group + j % group; its element offset in q and out.
  auto q_row = [&](std::uint64_t b, std::uint64_t h0, std::uint64_t j) {
    return ((b * S + (j % SG) / group) * a.Hq + (h0 + j / SG) * group + j % group) * D;
  };
#pragma omp parallel
  {
    std::vector<float> qf(rows_per_task * D), s(rows_per_task * L), acc(rows_per_task * D), inv_sum(rows_per_task);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::uint64_t b = static_cast<std::uint64_t>(task) / chunks, h0 = static_cast<std::uint64_t>(task) % chunks * C;
      const std::uint64_t len = length(b);
      for (std::uint64_t j = 0; j < rows_per_task; ++j)
        for (std::uint64_t d = 0; d < D; ++d) qf[j * D + d] = to_float(q_all[q_row(b, h0, j) + d]);
      // Pass 1: scores of every row over the whole context (the few keys a new
      // token must not see are masked below).
      for_each_block(k_all, b, h0, C, len, [&](std::uint64_t c, std::uint64_t l, std::uint64_t n, Prefetcher next) {
        block_scores(row(k_all, b, h0 + c, l), D, n, qf.data() + c * SG * D, SG, D, scale * k_scale(h0 + c),
                     s.data() + c * SG * L + l, L, next);
      });
      // Softmax per query row over the keys it sees (new token i: len - S + 1 + i);
      // the keys after them get probability 0. The normalisation is applied to the outputs.
      for (std::uint64_t j = 0; j < rows_per_task; ++j) {
        float* sj = s.data() + j * L;
        const std::uint64_t seen = len - S + 1 + (j % SG) / group;
        inv_sum[j] = 1.0f / simd::exp_shift_sum(sj, seen, simd::max_of(sj, seen));
        std::fill(sj + seen, sj + len, 0.f);
      }
      // Pass 2: weighted sum of V rows.
      std::fill(acc.begin(), acc.end(), 0.f);
      for_each_block(v_all, b, h0, C, len, [&](std::uint64_t c, std::uint64_t l, std::uint64_t n, Prefetcher next) {
        block_pv(row(v_all, b, h0 + c, l), D, n, s.data() + c * SG * L + l, L, SG, D, acc.data() + c * SG * D, next);
      });
      for (std::uint64_t j = 0; j < rows_per_task; ++j) {
        T* o = out_all + q_row(b, h0, j);
        const float f = inv_sum[j] * v_scale(h0 + j / SG);
        for (std::uint64_t d = 0; d < D; ++d) {
          if constexpr (sizeof(T) == 4)
            o[d] = acc[j * D + d] * f;
          else
            o[d] = numeric::float_to_bf16(acc[j * D + d] * f);
        }
      }
    }
  }
}

// fp16: plain loops converting q, K and V on the fly; fp16 is the slow path on
// CPUs without native half arithmetic, kept for completeness rather than speed.
void run_fp16(const DecodeAttentionArgs& a) {
  const std::uint64_t group = a.Hq / a.Hkv, L = a.L, D = a.D, S = a.S;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const auto* q_all = static_cast<const std::uint16_t*>(a.q);
  const auto* k_all = static_cast<const std::uint16_t*>(a.k);
  const auto* v_all = static_cast<const std::uint16_t*>(a.v);
  auto* out_all = static_cast<std::uint16_t*>(a.out);
  const bool paged = a.block_table != nullptr;
  auto row = [&](const std::uint16_t* base, std::uint64_t b, std::uint64_t h, std::uint64_t l) {
    if (!paged) return base + ((b * a.Hkv + h) * L + l) * D;
    const auto page = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + l / a.page_size]);
    return base + ((page * a.Hkv + h) * a.page_size + l % a.page_size) * D;
  };
  const std::int64_t tasks = static_cast<std::int64_t>(a.B * a.Hkv);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::uint64_t b = static_cast<std::uint64_t>(task) / a.Hkv, h = static_cast<std::uint64_t>(task) % a.Hkv;
    const std::uint64_t len = a.lengths ? a.lengths[b] : L;
    for (std::uint64_t i = 0; i < S; ++i)
      for (std::uint64_t j = 0; j < group; ++j) {
        const std::uint64_t qrow = ((b * S + i) * a.Hq + h * group + j) * D, seen = len - S + 1 + i;
        const std::uint16_t* q = q_all + qrow;
        std::vector<float> s(seen), acc(D, 0.f);
        float mx = -INFINITY;
        for (std::uint64_t l = 0; l < seen; ++l) {
          const std::uint16_t* k = row(k_all, b, h, l);
          float dot = 0.f;
          for (std::uint64_t d = 0; d < D; ++d) dot += numeric::fp16_to_float(q[d]) * numeric::fp16_to_float(k[d]);
          s[l] = dot * scale;
          mx = std::max(mx, s[l]);
        }
        float sum = 0.f;
        for (auto& x : s) {
          x = std::exp(x - mx);
          sum += x;
        }
        for (std::uint64_t l = 0; l < seen; ++l) {
          const std::uint16_t* v = row(v_all, b, h, l);
          for (std::uint64_t d = 0; d < D; ++d) acc[d] += s[l] * numeric::fp16_to_float(v[d]);
        }
        std::uint16_t* o = out_all + qrow;
        for (std::uint64_t d = 0; d < D; ++d) o[d] = numeric::float_to_fp16(acc[d] / sum);
      }
  }
}

}  // namespace

void decode_attention(const DecodeAttentionArgs& a) {
  if (a.Hkv == 0 || a.Hq % a.Hkv != 0) throw Unsupported("decode attention needs Hq to be a multiple of Hkv");
  if (a.L == 0) throw Unsupported("decode attention needs a context of at least one token");
  if (a.S == 0) throw Unsupported("decode attention needs at least one new token per sequence");
  for (std::uint64_t b = 0; a.lengths && b < a.B; ++b)
    if (a.lengths[b] < a.S || a.lengths[b] > a.L)
      throw Unsupported("decode attention: sequence " + std::to_string(b) + "'s context of " +
                        std::to_string(a.lengths[b]) + " tokens must hold the step's " + std::to_string(a.S) +
                        " new tokens and fit the cache's " + std::to_string(a.L));
  if (!a.lengths && a.L < a.S)
    throw Unsupported("decode attention: a context of " + std::to_string(a.L) + " tokens cannot hold " +
                      std::to_string(a.S) + " new tokens");
  if (a.kv_fp8) {
    switch (a.t) {
      case DType::fp32: run<float, simd::Fp8E4M3>(a); return;
      case DType::bf16: run<std::uint16_t, simd::Fp8E4M3>(a); return;
      default: throw Unsupported("CPU decode attention over an fp8 cache takes fp32 or bf16 queries");
    }
  }
  switch (a.t) {
    case DType::fp32: run<float, float>(a); break;
    case DType::bf16: run<std::uint16_t, std::uint16_t>(a); break;
    case DType::fp16: run_fp16(a); break;
    default: throw Unsupported("CPU decode attention supports fp32, bf16 and fp16");
  }
}

namespace {

// Copy a contiguous cache [B,Hkv,L,D] into a paged pool [pages,Hkv,P,D].
void scatter_to_pages(const unsigned char* contiguous, unsigned char* pool, const std::vector<std::int32_t>& bt,
                      std::uint64_t B, std::uint64_t Hkv, std::uint64_t L, std::uint64_t D, std::uint64_t P,
                      std::uint64_t pages_per_seq, std::uint64_t e) {
  const std::uint64_t row = D * e;
#pragma omp parallel for collapse(2)
  for (std::int64_t b = 0; b < static_cast<std::int64_t>(B); ++b)
    for (std::int64_t h = 0; h < static_cast<std::int64_t>(Hkv); ++h)
      for (std::uint64_t l = 0; l < L; ++l) {
        const auto ub = static_cast<std::uint64_t>(b), uh = static_cast<std::uint64_t>(h);
        const auto page = static_cast<std::uint64_t>(bt[ub * pages_per_seq + l / P]);
        std::memcpy(pool + ((page * Hkv + uh) * P + l % P) * row, contiguous + ((ub * Hkv + uh) * L + l) * row, row);
      }
}

class CpuDecodeAttention final : public CpuOp {
 public:
  explicit CpuDecodeAttention(const OpRequest& r)
      : CpuOp(r.footprint_bytes()),
        r_(r),
        s_(AttentionShape::of(r.shape)),
        paged_(r.kind == kDecodeAttentionPaged),
        kv_t_(decode_attention_kv_dtype(r)),
        S_(decode_attention_new_tokens(r)),
        Lmax_(decode_attention_max_length(r)) {
    const auto e = element_bytes(r.dtype), c = element_bytes(kv_t_);
    if (r.options.as<DecodeAttentionOptions>().context_dist.ragged()) {
      lengths_ = decode_attention_lengths(r);
      track(lengths_.data(), lengths_.size() * sizeof(std::uint64_t));
    }
    const std::uint64_t q_elems = mul({s_.B, S_, s_.Hq, s_.D}, "query elements");
    q_ = HostBuffer(q_elems * e);
    out_ = HostBuffer(q_elems * e);
    fill(q_, r.dtype, q_elems, r.seed + 1);
    std::memset(out_.get(), 0, out_.bytes());
    const std::uint64_t n = mul({s_.B, s_.Hkv, Lmax_, s_.D}, "KV-cache elements");
    // K and V are generated by logical position, so a paged and a contiguous op
    // with the same seed hold the same data.
    HostBuffer k(n * c), v(n * c);
    fill(k, kv_t_, n, r.seed + 2);
    fill(v, kv_t_, n, r.seed + 3);
    if (kv_t_ == DType::fp8) {
      scales_ = reference::kv_head_scales(s_.Hkv);
      track(scales_.data(), scales_.size() * sizeof(float));
    }
    if (!paged_) {
      k_ = std::move(k);
      v_ = std::move(v);
    } else {
      pages_ = BlockTable(r, r.options.as<DecodeAttentionOptions>().page_size, s_.B, Lmax_);
      const std::uint64_t pool = mul({s_.B * pages_.pages_per_seq, s_.Hkv, pages_.page_size, s_.D, c}, "page pool bytes");
      k_ = HostBuffer(pool);
      v_ = HostBuffer(pool);
      std::memset(k_.get(), 0, pool);
      std::memset(v_.get(), 0, pool);
      scatter_to_pages(k.as<unsigned char>(), k_.as<unsigned char>(), pages_.host, s_.B, s_.Hkv, Lmax_, s_.D, pages_.page_size, pages_.pages_per_seq, c);
      scatter_to_pages(v.as<unsigned char>(), v_.as<unsigned char>(), pages_.host, s_.B, s_.Hkv, Lmax_, s_.D, pages_.page_size, pages_.pages_per_seq, c);
      track(pages_.host.data(), pages_.host.size() * sizeof(std::int32_t));
    }
    for (const HostBuffer* b : {&q_, &k_, &v_, &out_}) track(b->get(), b->bytes());
  }

  void run() override {
    const bool fp8 = kv_t_ == DType::fp8;
    decode_attention({.q = q_.get(), .k = k_.get(), .v = v_.get(), .out = out_.get(), .block_table = pages_.table(),
                      .B = s_.B, .Hq = s_.Hq, .Hkv = s_.Hkv, .L = Lmax_, .D = s_.D, .page_size = pages_.page_size,
                      .pages_per_seq = pages_.pages_per_seq, .S = S_,
                      .lengths = lengths_.empty() ? nullptr : lengths_.data(), .t = r_.dtype, .kv_fp8 = fp8,
                      .k_scale = fp8 ? scales_.data() : nullptr, .v_scale = fp8 ? scales_.data() + s_.Hkv : nullptr});
  }

  void verify() override {
    run();
    const auto e = element_bytes(r_.dtype), c = element_bytes(kv_t_);
    const std::uint64_t D = s_.D, group = s_.Hq / s_.Hkv;
    std::vector<float> got;
    std::vector<double> want;
    std::vector<float> o(D);
    // Sampled (sequence, new token) rows and query heads; new token i of a
    // sequence of len tokens sees its first len - S + 1 + i.
    for (auto [bs, hq] : sample_positions(s_.B * S_, s_.Hq, 64, r_.seed)) {
      const std::uint64_t b = bs / S_, i = bs % S_, h = hq / group;
      const std::uint64_t seen = (lengths_.empty() ? s_.L : lengths_[b]) - S_ + 1 + i;
      auto addr = [&](const HostBuffer& base, std::uint64_t l) -> const unsigned char* {
        if (!paged_) return base.as<unsigned char>() + ((b * s_.Hkv + h) * Lmax_ + l) * D * c;
        const auto page = static_cast<std::uint64_t>(pages_.host[b * pages_.pages_per_seq + l / pages_.page_size]);
        return base.as<unsigned char>() + ((page * s_.Hkv + h) * pages_.page_size + l % pages_.page_size) * D * c;
      };
      // The cache's values: its elements times the head's scale (an fp8 cache).
      const float ks = scales_.empty() ? 1.0f : scales_[h], vs = scales_.empty() ? 1.0f : scales_[s_.Hkv + h];
      auto dequantized = [&](const unsigned char* p, float sc, std::vector<float>& buf) {
        buf = reference::to_float(p, kv_t_, D);
        for (auto& x : buf) x *= sc;
        return buf.data();
      };
      const auto q = reference::to_float(q_.as<unsigned char>() + (bs * s_.Hq + hq) * D * e, r_.dtype, D);
      std::vector<float> kbuf, vbuf;
      reference::decode_attention_head(
          q.data(), seen, D, 1.0f / std::sqrt(static_cast<float>(D)),
          [&](std::uint64_t l) { return dequantized(addr(k_, l), ks, kbuf); },
          [&](std::uint64_t l) { return dequantized(addr(v_, l), vs, vbuf); }, o.data());
      const auto out = reference::to_float(out_.as<unsigned char>() + (bs * s_.Hq + hq) * D * e, r_.dtype, D);
      got.insert(got.end(), out.begin(), out.end());
      want.insert(want.end(), o.begin(), o.end());
    }
    reference::check_rows_close(got, want, D, reference::tolerance_for(r_.dtype),
                                r_.kind + (kv_t_ == DType::fp8 ? " fp8 cache" : "") + " (B=" + std::to_string(s_.B) +
                                    " Hq=" + std::to_string(s_.Hq) +
                                    " Hkv=" + std::to_string(s_.Hkv) + " L=" + std::to_string(s_.L) +
                                    " D=" + std::to_string(D) + " S=" + std::to_string(S_) +
                                    (lengths_.empty() ? "" : " contexts " + r_.options.as<DecodeAttentionOptions>().context_dist.text()) +
                                    ")");
  }

  std::vector<float> output_values() override {
    return reference::to_float(out_.get(), r_.dtype, s_.B * S_ * s_.Hq * s_.D);
  }

 private:
  OpRequest r_;
  AttentionShape s_;
  bool paged_ = false;
  DType kv_t_;
  std::uint64_t S_ = 1, Lmax_ = 0;       // new tokens per sequence; the longest context (the cache's stride)
  std::vector<std::uint64_t> lengths_;  // each sequence's context when ragged, else empty
  BlockTable pages_;  // paged only
  std::vector<float> scales_;  // fp8 cache: K's scale per KV head, then V's
  HostBuffer q_, k_, v_, out_;
};

bool float_type(DType t) { return t == DType::fp32 || t == DType::bf16 || t == DType::fp16; }

std::optional<std::string> shape_limits(const OpRequest& r, const CpuEnv&) {
  const auto s = AttentionShape::of(r.shape);
  if (decode_attention_kv_dtype(r) == DType::fp8 && r.dtype == DType::fp16)
    return "decode attention over an fp8 cache: the CPU backend takes fp32 or bf16 queries";
  if (s.B == 0 || s.Hq == 0 || s.Hkv == 0 || s.L == 0 || s.D == 0) return "decode attention: every dimension must be >= 1";
  if (s.Hq % s.Hkv != 0) return "decode attention: query heads must be a multiple of kv heads";
  return std::nullopt;
}

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(decode_attention) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  auto prepare = [](CpuEnv&, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
    return std::make_unique<CpuDecodeAttention>(r);
  };
  auto types = [](DType t, const CpuEnv&) { return float_type(t); };
  // An fp8 cache takes fp32 or bf16 queries (the fp16 path is plain loops).
  auto applies = [](const OpRequest& r) { return decode_attention_kv_dtype(r) != DType::fp8 || r.dtype != DType::fp16; };
  registry.add({kDecodeAttention, Impl::own, types, applies, shape_limits, {}, prepare});
  // The paged pool is filled from a contiguous copy of the cache, made first.
  registry.add({kDecodeAttentionPaged, Impl::own, types, applies, shape_limits,
                [](const OpRequest& r, const CpuEnv&) {
                  const auto s = AttentionShape::of(r.shape);
                  return mul({2, s.B, s.Hkv, decode_attention_max_length(r), s.D,
                              element_bytes(decode_attention_kv_dtype(r))},
                             "KV-cache bytes");
                },
                prepare});
}

