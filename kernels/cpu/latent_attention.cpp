// MLA decode attention on the CPU (ops/latent_attention.hpp), absorbed form.
// A task is one sequence and one chunk of its context (split-KV, so a batch of
// one keeps every thread busy). The task walks its chunk in blocks of up to 16
// latent rows that never straddle a page; each block's rows are loaded (and
// decoded to fp32) once and serve all H heads, like a small GEMM:
//   scores S[H, n] = Q[H, R+P] . C[n, R+P]^T (nope and rope parts together),
//   online softmax per head (running max and sum),
//   O[H, R] += softmax(S) . C[n, :R] (the values are the latents' first R).
// Partial results (unnormalised O, running max and sum per head and chunk) are
// merged per (sequence, head) at the end. Contiguous and paged caches go
// through the same code: only the row addresses differ.
// Also the operations' CPU implementations (latent_attention and
// latent_attention_paged), verified per sampled (sequence, head) against
// reference::latent_attention_head before anything is timed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/paged_kv.hpp"
#include "cpu/cpu_op.hpp"
#include "cpu/storage.hpp"
#include "reference/common.hpp"
#include "reference/latent_attention.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/latent_attention.hpp"

namespace phasebench::cpu {

namespace {

constexpr std::uint64_t kBlock = 16;        // latent rows per block
constexpr std::uint64_t kMinChunk = 256;    // tokens per split at least

struct LatentArgs {
  const void* q = nullptr;      // [B, H, R+P]
  const void* cache = nullptr;  // [B, L, R+P] or pages [pages, page_size, R+P]
  void* out = nullptr;          // [B, H, R]
  const std::int32_t* block_table = nullptr;  // paged: [B, pages_per_seq]
  std::uint64_t B = 0, H = 0, L = 0, R = 0, P = 0, page_size = 0, pages_per_seq = 0;
  std::uint64_t splits = 1, chunk = 0;  // chunks of the context per sequence, tokens per chunk
  float scale = 1.0f;
  DType t = DType::fp32;
  float* part = nullptr;  // [B, splits, H, R + 2]: unnormalised O, running max, running sum
};

// Split-KV plan: about eight tasks per thread (a thread that the OS preempts
// while it holds one task delays the end by one task, not by a thread's share),
// each chunk at least kMinChunk tokens.
std::uint64_t choose_splits(std::uint64_t B, std::uint64_t L, std::uint64_t threads, std::uint64_t requested) {
  if (requested) return std::min(requested, L);
  const std::uint64_t want = (8 * threads + B - 1) / B;
  return std::max<std::uint64_t>(1, std::min(want, L / kMinChunk));
}

std::uint64_t chunk_of(std::uint64_t L, std::uint64_t splits) { return (L + splits - 1) / splits; }

template <class T>
void run(const LatentArgs& a) {
  const std::uint64_t H = a.H, R = a.R, W = a.R + a.P, L = a.L;
  const T* q_all = static_cast<const T*>(a.q);
  const T* cache = static_cast<const T*>(a.cache);
  const bool paged = a.block_table != nullptr;
  auto row = [&](std::uint64_t b, std::uint64_t l) -> const T* {
    if (!paged) return cache + (b * L + l) * W;
    const auto page = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + l / a.page_size]);
    return cache + (page * a.page_size + l % a.page_size) * W;
  };
  const auto tasks = static_cast<std::int64_t>(a.B * a.splits);
#pragma omp parallel
  {
    std::vector<float> qf(H * W), cf(kBlock * W), s(H * kBlock);
    std::vector<const float*> rows(kBlock);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::uint64_t b = static_cast<std::uint64_t>(task) / a.splits, split = static_cast<std::uint64_t>(task) % a.splits;
      const std::uint64_t t0 = split * a.chunk, t1 = std::min(L, t0 + a.chunk);
      float* part = a.part + (b * a.splits + split) * H * (R + 2);
      for (std::uint64_t j = 0; j < H * W; ++j) qf[j] = decode(q_all[b * H * W + j]);
      for (std::uint64_t h = 0; h < H; ++h) {
        float* o = part + h * (R + 2);
        std::fill(o, o + R, 0.f);
        o[R] = -INFINITY;  // running max
        o[R + 1] = 0.f;    // running sum
      }
      for (std::uint64_t l = t0, n = 0; l < t1; l += n) {
        n = std::min(kBlock, t1 - l);
        if (paged) n = std::min(n, a.page_size - l % a.page_size);
        // The block's rows, decoded once for all heads (fp32: read in place).
        for (std::uint64_t j = 0; j < n; ++j) {
          const T* src = row(b, l + j);
          if constexpr (sizeof(T) == 4) {
            rows[j] = reinterpret_cast<const float*>(src);
          } else {
            float* dst = cf.data() + j * W;
            for (std::uint64_t d = 0; d < W; ++d) dst[d] = decode(src[d]);
            rows[j] = dst;
          }
        }
        // Scores over the whole latent (nope part and rope part), four rows at a
        // time: four independent sums share each load of the query.
        for (std::uint64_t h = 0; h < H; ++h) {
          const float* qh = qf.data() + h * W;
          float* sh = s.data() + h * kBlock;
          std::uint64_t j = 0;
          for (; j + 4 <= n; j += 4) {
            const float *c0 = rows[j], *c1 = rows[j + 1], *c2 = rows[j + 2], *c3 = rows[j + 3];
            float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
#pragma omp simd reduction(+ : d0, d1, d2, d3)
            for (std::uint64_t d = 0; d < W; ++d) {
              const float x = qh[d];
              d0 += x * c0[d];
              d1 += x * c1[d];
              d2 += x * c2[d];
              d3 += x * c3[d];
            }
            sh[j] = d0 * a.scale;
            sh[j + 1] = d1 * a.scale;
            sh[j + 2] = d2 * a.scale;
            sh[j + 3] = d3 * a.scale;
          }
          for (; j < n; ++j) {
            const float* c = rows[j];
            float dot = 0.f;
#pragma omp simd reduction(+ : dot)
            for (std::uint64_t d = 0; d < W; ++d) dot += qh[d] * c[d];
            sh[j] = dot * a.scale;
          }
        }
        // Online softmax and O += P . C[:, :R], per head.
        for (std::uint64_t h = 0; h < H; ++h) {
          float* o = part + h * (R + 2);
          float* sh = s.data() + h * kBlock;
          float mx = o[R];
          for (std::uint64_t j = 0; j < n; ++j) mx = std::max(mx, sh[j]);
          const float alpha = std::exp(o[R] - mx);  // 0 on the first block (max was -inf)
          float sum = 0.f;
          for (std::uint64_t j = 0; j < n; ++j) sum += sh[j] = std::exp(sh[j] - mx);
          o[R] = mx;
          o[R + 1] = o[R + 1] * alpha + sum;
          if (alpha != 1.0f)
#pragma omp simd
            for (std::uint64_t d = 0; d < R; ++d) o[d] *= alpha;
          std::uint64_t j = 0;
          for (; j + 4 <= n; j += 4) {
            const float p0 = sh[j], p1 = sh[j + 1], p2 = sh[j + 2], p3 = sh[j + 3];
            const float *c0 = rows[j], *c1 = rows[j + 1], *c2 = rows[j + 2], *c3 = rows[j + 3];
#pragma omp simd
            for (std::uint64_t d = 0; d < R; ++d) o[d] += p0 * c0[d] + p1 * c1[d] + p2 * c2[d] + p3 * c3[d];
          }
          for (; j < n; ++j) {
            const float p = sh[j];
            const float* c = rows[j];
#pragma omp simd
            for (std::uint64_t d = 0; d < R; ++d) o[d] += p * c[d];
          }
        }
      }
    }
    // Merge the chunks of each (sequence, head): weights exp(max_i - max).
    T* out_all = static_cast<T*>(a.out);
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t bh = 0; bh < static_cast<std::int64_t>(a.B * H); ++bh) {
      const std::uint64_t b = static_cast<std::uint64_t>(bh) / H, h = static_cast<std::uint64_t>(bh) % H;
      auto at = [&](std::uint64_t split) { return a.part + ((b * a.splits + split) * H + h) * (R + 2); };
      float M = -INFINITY;
      for (std::uint64_t i = 0; i < a.splits; ++i) M = std::max(M, at(i)[R]);
      std::vector<float> acc(R, 0.f);
      float denom = 0.f;
      for (std::uint64_t i = 0; i < a.splits; ++i) {
        const float* p = at(i);
        if (p[R] == -INFINITY) continue;  // an empty chunk
        const float w = std::exp(p[R] - M);
        denom += w * p[R + 1];
        for (std::uint64_t d = 0; d < R; ++d) acc[d] += w * p[d];
      }
      T* o = out_all + (b * H + h) * R;
      for (std::uint64_t d = 0; d < R; ++d) encode(acc[d] / denom, o + d);
    }
  }
}

void latent_attention(const LatentArgs& a) {
  switch (a.t) {
    case DType::fp32: run<float>(a); break;
    case DType::bf16: run<Bf16>(a); break;
    case DType::fp16: run<Fp16>(a); break;
    default: throw Unsupported("CPU MLA decode attention supports fp32, bf16 and fp16");
  }
}

// Copy a contiguous latent cache [B, L, W] into a paged pool [pages, P, W].
void scatter_to_pages(const unsigned char* contiguous, unsigned char* pool, const std::vector<std::int32_t>& bt,
                      std::uint64_t B, std::uint64_t L, std::uint64_t P, std::uint64_t pages_per_seq,
                      std::uint64_t row_bytes) {
#pragma omp parallel for
  for (std::int64_t b = 0; b < static_cast<std::int64_t>(B); ++b)
    for (std::uint64_t l = 0; l < L; ++l) {
      const auto ub = static_cast<std::uint64_t>(b);
      const auto page = static_cast<std::uint64_t>(bt[ub * pages_per_seq + l / P]);
      std::memcpy(pool + (page * P + l % P) * row_bytes, contiguous + (ub * L + l) * row_bytes, row_bytes);
    }
}

std::uint64_t threads() { return static_cast<std::uint64_t>(omp_get_max_threads()); }

class CpuLatentAttention final : public CpuOp {
 public:
  explicit CpuLatentAttention(const OpRequest& r)
      : CpuOp(r.footprint_bytes()),
        r_(r),
        s_(LatentAttentionShape::of(r.shape)),
        paged_(r.kind == kLatentAttentionPaged) {
    const auto e = element_bytes(r.dtype), W = s_.R + s_.P;
    q_ = HostBuffer(mul({s_.B, s_.H, W, e}));
    out_ = HostBuffer(mul({s_.B, s_.H, s_.R, e}));
    fill(q_, r.dtype, s_.B * s_.H * W, r.seed + 1);
    std::memset(out_.get(), 0, out_.bytes());
    const std::uint64_t n = mul({s_.B, s_.L, W}, "latent cache elements");
    // Generated by logical position: a paged and a contiguous op of the same seed hold the same cache.
    HostBuffer c(n * e);
    fill(c, r.dtype, n, r.seed + 2);
    if (!paged_) {
      cache_ = std::move(c);
    } else {
      pages_ = BlockTable(r, r.options.as<LatentAttentionOptions>().page_size, s_.B, s_.L);
      const std::uint64_t pool = mul({s_.B * pages_.pages_per_seq, pages_.page_size, W, e}, "latent page pool bytes");
      cache_ = HostBuffer(pool);
      std::memset(cache_.get(), 0, pool);
      scatter_to_pages(c.as<unsigned char>(), cache_.as<unsigned char>(), pages_.host, s_.B, s_.L, pages_.page_size, pages_.pages_per_seq, W * e);
      track(pages_.host.data(), pages_.host.size() * sizeof(std::int32_t));
    }
    const std::uint64_t chunk = chunk_of(s_.L, choose_splits(s_.B, s_.L, threads(), r.options.as<LatentAttentionOptions>().splits));
    const std::uint64_t splits = (s_.L + chunk - 1) / chunk;
    part_.assign(s_.B * splits * s_.H * (s_.R + 2), 0.f);
    for (const HostBuffer* b : {&q_, &cache_, &out_}) track(b->get(), b->bytes());
    track(part_.data(), part_.size() * sizeof(float));
    a_ = {.q = q_.get(), .cache = cache_.get(), .out = out_.get(), .block_table = pages_.table(), .B = s_.B, .H = s_.H,
          .L = s_.L, .R = s_.R, .P = s_.P, .page_size = pages_.page_size, .pages_per_seq = pages_.pages_per_seq,
          .splits = splits, .chunk = chunk, .scale = latent_attention_scale(r), .t = r.dtype, .part = part_.data()};
  }

  void run() override { latent_attention(a_); }

  void verify() override {
    run();
    const auto e = element_bytes(r_.dtype);
    const std::uint64_t W = s_.R + s_.P, R = s_.R;
    std::vector<float> got;
    std::vector<double> want, o(R);
    auto addr = [&](std::uint64_t b, std::uint64_t l) -> const unsigned char* {
      if (!paged_) return cache_.as<unsigned char>() + (b * s_.L + l) * W * e;
      const auto page = static_cast<std::uint64_t>(pages_.host[b * pages_.pages_per_seq + l / pages_.page_size]);
      return cache_.as<unsigned char>() + (page * pages_.page_size + l % pages_.page_size) * W * e;
    };
    std::uint64_t last_b = ~0ull;
    std::vector<float> rows;  // the sequence's latent rows, decoded
    for (auto [b, h] : sample_positions(s_.B, s_.H, 64, r_.seed)) {
      if (b != last_b) {
        rows.resize(s_.L * W);
        for (std::uint64_t l = 0; l < s_.L; ++l) {
          const auto f = reference::to_float(addr(b, l), r_.dtype, W);
          std::copy(f.begin(), f.end(), rows.begin() + static_cast<std::ptrdiff_t>(l * W));
        }
        last_b = b;
      }
      const auto q = reference::to_float(q_.as<unsigned char>() + (b * s_.H + h) * W * e, r_.dtype, W);
      reference::latent_attention_head(q.data(), s_.L, R, s_.P, a_.scale,
                                       [&](std::size_t l) { return rows.data() + l * W; }, o.data());
      const auto out = reference::to_float(out_.as<unsigned char>() + (b * s_.H + h) * R * e, r_.dtype, R);
      got.insert(got.end(), out.begin(), out.end());
      want.insert(want.end(), o.begin(), o.end());
    }
    reference::check_rows_close(got, want, R, reference::tolerance_for(r_.dtype),
                                r_.kind + " " + std::string(to_string(r_.dtype)) + " (B=" + std::to_string(s_.B) +
                                    " H=" + std::to_string(s_.H) + " L=" + std::to_string(s_.L) +
                                    " R=" + std::to_string(s_.R) + " P=" + std::to_string(s_.P) +
                                    (paged_ ? " page_size=" + std::to_string(pages_.page_size) : std::string()) +
                                    " splits=" + std::to_string(a_.splits) + ")");
  }

  std::vector<float> output_values() override { return reference::to_float(out_.get(), r_.dtype, s_.B * s_.H * s_.R); }

 private:
  OpRequest r_;
  LatentAttentionShape s_;
  bool paged_ = false;
  BlockTable pages_;  // paged only
  HostBuffer q_, cache_, out_;
  std::vector<float> part_;
  LatentArgs a_;
};

std::optional<std::string> shape_limits(const OpRequest& r, const CpuEnv&) {
  const auto s = LatentAttentionShape::of(r.shape);
  if (s.B == 0 || s.H == 0 || s.L == 0 || s.R == 0)
    return "MLA decode attention: batch, heads, context and kv_lora_rank must be >= 1";
  return std::nullopt;
}

// The split-KV partial results (fp32) beyond the footprint; the paged pool is
// filled from a contiguous copy of the cache, made first.
std::uint64_t scratch(const OpRequest& r, const CpuEnv&) {
  const auto s = LatentAttentionShape::of(r.shape);
  const auto splits = std::max<std::uint64_t>(1, choose_splits(s.B, s.L, threads(), r.options.as<LatentAttentionOptions>().splits));
  std::uint64_t b = mul({4, s.B, splits, s.H, add(s.R, 2)}, "MLA split-KV partial bytes");
  if (r.kind == kLatentAttentionPaged)
    b = add(b, mul({s.B, s.L, add(s.R, s.P), element_bytes(r.dtype)}, "latent cache bytes"));
  return b;
}

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(latent_attention) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  auto prepare = [](CpuEnv&, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
    return std::make_unique<CpuLatentAttention>(r);
  };
  auto types = [](DType t, const CpuEnv&) { return t == DType::fp32 || t == DType::bf16 || t == DType::fp16; };
  registry.add({kLatentAttention, Impl::own, types, {}, shape_limits, scratch, prepare});
  registry.add({kLatentAttentionPaged, Impl::own, types, {}, shape_limits, scratch, prepare});
}
