// Decode attention on CUDA (decode_attention.hpp): the launcher of the kernels
// (decode_attention.cuh) and the operation (kinds decode_attention and
// decode_attention_paged), built from its request's plan (decode_attention_plan.hpp)
// and verified against the CPU reference.
// A CTA walks one chunk of one sequence's context for up to 8 query rows of a KV
// head (its GQA heads times the step's new tokens): 8 rows (G = 8 or 16, and
// S*G of 5 to 7, rounded up to 8 with zero rows, or >= 8) on tensor cores
// (decode_attention_mma_kernel), 1, 2 or 4 rows with CUDA-core dot products
// (decode_attention_kernel); the tensor-core kernel's shared memory is checked
// against the device's opt-in limit (head_dim 256 needs 133 KiB). When the batch's CTAs do not
// fill a wave, the context is split into chunks of at least 64 tokens, as many
// as make the grid sit just under a whole number of waves; a second kernel then
// merges each row's splits, all its threads sharing the splits.
#include "cuda/decode_attention.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/common.hpp"
#include "reference/decode_attention.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/decode_attention.cuh"
#include "cuda/decode_attention_op.hpp"
#include "cuda/decode_attention_plan.hpp"
#include "cuda/dispatch.cuh"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"

namespace phasebench::cuda {

// ---- the launcher ---------------------------------------------------------------

namespace {

int log2_if_power_of_two(int n) {
  if (n <= 0 || (n & (n - 1)) != 0) return -1;
  int s = 0;
  while ((1 << s) < n) ++s;
  return s;
}

// Calls f(tag, IC<D>, IC<GT>, BC<paged>, BC<kv_fp8>) for the run-time choices.
template <class F>
void dispatch(DType dtype, int D, int GT, bool paged, bool kv_fp8, F&& f) {
  auto by_gt = [&](auto tag, auto d, auto pg, auto f8) {
    switch (GT) {
      case 1: f(tag, d, IC<1>{}, pg, f8); return;
      case 2: f(tag, d, IC<2>{}, pg, f8); return;
      case 4: f(tag, d, IC<4>{}, pg, f8); return;
      case 8: f(tag, d, IC<8>{}, pg, f8); return;
      default: throw std::logic_error("decode attention: heads per CTA must be 1, 2, 4 or 8");
    }
  };
  auto by_cache = [&](auto tag, auto d) {
    dispatch_bool(paged, [&](auto pg) { dispatch_bool(kv_fp8, [&](auto f8) { by_gt(tag, d, pg, f8); }); });
  };
  dispatch_16bit(dtype, "decode attention", [&](auto tag) {
    switch (D) {
      case 64: by_cache(tag, IC<64>{}); return;
      case 128: by_cache(tag, IC<128>{}); return;
      case 256: by_cache(tag, IC<256>{}); return;
      default: throw Unsupported("decode attention: head_dim " + std::to_string(D) + " is not supported; use 64, 128 or 256");
    }
  });
}

// Tokens each lane group of the CUDA-core kernel loads before it uses any (GT < 8;
// GT = 8 runs the tensor-core kernel).
constexpr int kTokensPerStep = 4;

// The tensor-core kernel's dynamic shared memory: above 48 KiB for head_dim 128 and 256.
template <class Tag, int D, class KV, bool F8>
void allow_mma_smem() {
  allow_dynamic_smem<decode_attention_mma_kernel<Tag, D, KV, F8>>(MmaConfig<D, F8>::smem);
}

}  // namespace

std::size_t decode_attention_smem_bytes(int D, int G, bool kv_fp8) {
  if (decode_heads_per_cta(G) != 8) return 0;
  switch (D) {
    case 64: return kv_fp8 ? MmaConfig<64, true>::smem : MmaConfig<64, false>::smem;
    case 128: return kv_fp8 ? MmaConfig<128, true>::smem : MmaConfig<128, false>::smem;
    case 256: return kv_fp8 ? MmaConfig<256, true>::smem : MmaConfig<256, false>::smem;
    default: return 0;
  }
}

int decode_attention_ctas_per_sm(DType dtype, int D, int G, bool paged, bool kv_fp8) {
  int n = 0;
  dispatch(dtype, D, decode_heads_per_cta(G), paged, kv_fp8, [&](auto tag, auto d, auto gt, auto pg, auto f8) {
    using Tag = decltype(tag);
    constexpr int Dv = decltype(d)::value;
    constexpr int GTv = decltype(gt)::value;
    constexpr bool F8 = decltype(f8)::value;
    using KV = KvOf<Dv, decltype(pg)::value>;
    if constexpr (GTv == 8) {  // the kernel launch_decode_attention runs for these rows
      allow_mma_smem<Tag, Dv, KV, F8>();
      PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_attention_mma_kernel<Tag, Dv, KV, F8>,
                                                                  kThreads, MmaConfig<Dv, F8>::smem));
    } else {
      PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, decode_attention_kernel<Tag, Dv, GTv, kTokensPerStep, KV, F8>, kThreads, 0));
    }
  });
  return std::max(n, 1);
}

DecodeAttentionParams decode_attention_params(DType t, const void* q, void* out, const void* k, const void* v, int B,
                                              int Hq, int Hkv, int L, int D, int splits, float* workspace) {
  // No block table or pages, S = 1, no lengths (every context L), no fp8 scales.
  return {t, q, out, k, v, nullptr, B, Hq, Hkv, L, D, 1, nullptr, 0, 0, splits, workspace, false, nullptr};
}

void launch_decode_attention(const DecodeAttentionParams& p, int chunk, cudaStream_t stream) {
  const bool paged = p.block_table != nullptr;
  if (auto why = decode_attention_unsupported(p.dtype, p.Hq, p.Hkv, p.D, paged, p.page_size, p.S))
    throw Unsupported(*why);
  if (p.L < p.S) throw Unsupported("decode attention: the context cannot hold the step's new tokens");
  if (p.B <= 0 || p.L <= 0) throw Unsupported("decode attention: batch and context must be >= 1");
  if (p.B > 65535) throw Unsupported("decode attention: batch " + std::to_string(p.B) + " exceeds 65535");
  if (p.splits < 1 || p.splits > kMaxDecodeSplits || chunk < 1 ||
      static_cast<long long>(chunk) * (p.splits - 1) >= p.L || static_cast<long long>(chunk) * p.splits < p.L)
    throw std::logic_error("decode attention: splits and chunk do not tile the context");
  if (p.splits > 1 && p.workspace == nullptr) throw std::logic_error("decode attention: split-KV needs a workspace");
  if (p.kv_fp8 && p.kv_scales == nullptr) throw std::logic_error("decode attention: an fp8 cache needs its scales");
  const int G = p.Hq / p.Hkv;
  const int GT = decode_heads_per_cta(p.S * G);
  const int chunks = decode_head_chunks(p.S * G);
  // The tensor-core kernel's 16-token tiles start at multiples of 16 and must not cross a page
  // (pages are multiples of 16): chunks of whole tiles (plan_decode_splits aligns them to the page).
  if (GT == 8 && paged && p.splits > 1 && chunk % 16 != 0)
    throw std::logic_error("decode attention: paged chunks of 8-row CTAs must be a multiple of 16 tokens");
  const float qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(p.D)));
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.Hkv * chunks), static_cast<unsigned>(p.B));
  const auto* q = static_cast<const std::uint16_t*>(p.q);
  auto* out = static_cast<std::uint16_t*>(p.out);
  dispatch(p.dtype, p.D, GT, paged, p.kv_fp8, [&](auto tag, auto d, auto gt, auto pg, auto f8) {
    using Tag = decltype(tag);
    constexpr int Dv = decltype(d)::value;
    constexpr int GTv = decltype(gt)::value;
    constexpr bool Pg = decltype(pg)::value;
    constexpr bool F8 = decltype(f8)::value;
    using KV = KvOf<Dv, Pg>;
    KV kv{};
    if constexpr (Pg) {
      kv = PagedKV<Dv>{p.block_table, p.Hkv, p.page_size, p.pages_per_seq, log2_if_power_of_two(p.page_size)};
    } else {
      kv = ContiguousKV<Dv>{p.Hkv, p.L};
    }
    if constexpr (GTv == 8) {  // 8 query rows per CTA: tensor cores
      allow_mma_smem<Tag, Dv, KV, F8>();
      decode_attention_mma_kernel<Tag, Dv, KV, F8><<<grid, kThreads, MmaConfig<Dv, F8>::smem, stream>>>(
          q, out, p.k, p.v, kv, p.kv_scales, p.workspace, p.Hq, p.Hkv, G, p.L, p.S, p.lengths, chunk, p.splits, qscale);
      PB_CUDA_CHECK_LAUNCH("decode_attention_mma_kernel");
    } else {
      decode_attention_kernel<Tag, Dv, GTv, kTokensPerStep, KV, F8><<<grid, kThreads, 0, stream>>>(
          q, out, p.k, p.v, kv, p.kv_scales, p.workspace, p.Hq, p.Hkv, G, p.L, p.S, p.lengths, chunk, p.splits, qscale);
      PB_CUDA_CHECK_LAUNCH("decode_attention_kernel");
    }
    if (p.splits > 1) {
      const unsigned rows = static_cast<unsigned>(p.B * p.S * p.Hq);
      const std::size_t smem = (static_cast<std::size_t>(p.splits) + kReduceWarps * Dv) * sizeof(float);
      decode_reduce_kernel<Tag><<<rows, kReduceThreads, smem, stream>>>(p.workspace, out, p.splits, Dv);
      PB_CUDA_CHECK_LAUNCH("decode_reduce_kernel");
    }
  });
}

// ---- the operation (decode_attention_op.hpp) ---------------------------------------

DecodeAttentionOp::DecodeAttentionOp(Context& ctx, const OpRequest& r, const DecodeAttentionPlan& plan)
  : AttentionOpBase(ctx, r), paged_(plan.paged), kv_t_(plan.kv_dtype), lengths_(plan.lengths), chunk_(plan.split.chunk),
      p_(plan.params) {
  const std::size_t es = element_bytes(r.dtype), cs = element_bytes(kv_t_);
  const std::size_t q_elems = static_cast<std::size_t>(p_.B) * p_.S * p_.Hq * p_.D;
  std::size_t kv_elems = static_cast<std::size_t>(p_.B) * p_.Hkv * p_.L * p_.D;
  if (paged_) {
    pool_ = BlockTable(r, r.options.as<DecodeAttentionOptions>().page_size, p_.B, static_cast<std::uint64_t>(p_.L));
    kv_elems = static_cast<std::size_t>(p_.B) * pool_.pages_per_seq * p_.Hkv * pool_.page_size * p_.D;
  }
  q_ = DeviceBuffer(q_elems * es);
  out_ = DeviceBuffer(q_elems * es);
  k_ = DeviceBuffer(kv_elems * cs);
  v_ = DeviceBuffer(kv_elems * cs);
  if (kv_t_ == DType::fp8) {
    const auto scales = reference::kv_head_scales(static_cast<std::size_t>(p_.Hkv));
    scales_ = DeviceBuffer(scales.size() * sizeof(float));
    upload(scales_.get(), scales.data(), scales_.bytes(), ctx.stream);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // `scales` goes out of scope
  }
  if (plan.split.workspace_floats) ws_ = DeviceBuffer(plan.split.workspace_floats * sizeof(float));
  if (!lengths_.empty()) {
    lengths_dev_ = DeviceBuffer(lengths_.size() * sizeof(int));
    upload(lengths_dev_.get(), lengths_.data(), lengths_dev_.bytes(), ctx.stream);
  }
  fill_random(q_.get(), r.dtype, q_elems, seed_of(r.seed, KvBuf::q), 1.0f, ctx.stream);
  PB_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), ctx.stream));
  if (paged_) pool_.to_device(ctx.stream);
  fill_kv_cache(k_.get(), kv_t_, kv_elems, pool_, r.seed, KvBuf::k, KvBuf::k_pool, p_.B, p_.Hkv, p_.L, p_.D, ctx.stream);
  fill_kv_cache(v_.get(), kv_t_, kv_elems, pool_, r.seed, KvBuf::v, KvBuf::v_pool, p_.B, p_.Hkv, p_.L, p_.D, ctx.stream);
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

  // The plan's params, pointed at this op's buffers.
  p_.q = q_.get();
  p_.out = out_.get();
  p_.k = k_.get();
  p_.v = v_.get();
  p_.block_table = paged_ ? pool_.table() : nullptr;
  p_.lengths = lengths_.empty() ? nullptr : lengths_dev_.as<int>();
  p_.workspace = ws_.bytes() ? ws_.as<float>() : nullptr;
  p_.kv_scales = p_.kv_fp8 ? scales_.as<float>() : nullptr;
}

void DecodeAttentionOp::run() { launch_decode_attention(p_, chunk_, ctx_.stream); }

void DecodeAttentionOp::verify() {
  run();
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
  const DType t = r_.dtype;
  const std::size_t es = element_bytes(kv_t_);  // the cache's element bytes
  const int B = p_.B, Hq = p_.Hq, Hkv = p_.Hkv, S = p_.S;
  const std::size_t D = static_cast<std::size_t>(p_.D), L = static_cast<std::size_t>(p_.L);
  const auto scales = kv_t_ == DType::fp8 ? reference::kv_head_scales(static_cast<std::size_t>(Hkv))
                                          : std::vector<float>(2 * static_cast<std::size_t>(Hkv), 1.0f);
  const std::size_t q_elems = static_cast<std::size_t>(B) * S * Hq * D;
  const std::vector<float> q = download_as_float(q_.get(), t, q_elems, ctx_.stream);
  const std::vector<float> out = download_as_float(out_.get(), t, q_elems, ctx_.stream);
  const int G = Hq / Hkv;
  // (batch, kv head) pairs, each checked for all S*G of its query rows: all of
  // them when there are at most 256 query rows in all, else a spread incl. the
  // first and the last; fewer when the context is long (about 2^26 reference
  // elements per cache).
  const std::uint64_t pairs_total = static_cast<std::uint64_t>(B) * Hkv;
  const std::uint64_t rows = static_cast<std::uint64_t>(S) * G;
  const std::uint64_t by_heads = std::max<std::uint64_t>(2, (256 + rows - 1) / rows);
  const std::uint64_t by_work = std::max<std::uint64_t>(2, (std::uint64_t{1} << 26) / (L * D * S));
  const auto pairs = spread_sample(pairs_total, std::min(by_heads, by_work));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p_.D)));
  reference::Tolerance tol = reference::tolerance_for(t);
  tol = {tol.atol * tolerance_scale(), tol.rtol * tolerance_scale()};  // 1 for our kernels
  std::vector<unsigned char> raw(2 * L * D * es);
  std::vector<float> ref(D);
  for (const std::uint64_t pair : pairs) {
    const std::size_t b = pair / Hkv, h = pair % Hkv;
    const std::size_t len = lengths_.empty() ? L : static_cast<std::size_t>(lengths_[b]);
    // K and V of (b, h) as [len, D], read back from the device through the layout
    // (the contiguous cache's stride is the longest context, L).
    download_kv_rows(raw.data(), k_.get(), es, pool_, b, h, Hkv, L, len, D, ctx_.stream);
    download_kv_rows(raw.data() + len * D * es, v_.get(), es, pool_, b, h, Hkv, L, len, D, ctx_.stream);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    // The cache's values: its elements times the head's scales (1 for a 16-bit cache).
    std::vector<float> kv = reference::to_float(raw.data(), kv_t_, 2 * len * D);
    for (std::size_t i = 0; i < len * D; ++i) {
      kv[i] *= scales[h];
      kv[len * D + i] *= scales[static_cast<std::size_t>(Hkv) + h];
    }
    const float* K = kv.data();
    const float* V = kv.data() + len * D;
    for (int i = 0; i < S; ++i)
      for (int g = 0; g < G; ++g) {
        // New token i sees the keys up to its own position: len - S + 1 + i of them.
        const std::size_t hq = h * G + g, seen = len - static_cast<std::size_t>(S) + 1 + static_cast<std::size_t>(i);
        const std::size_t row = ((b * S + static_cast<std::size_t>(i)) * Hq + hq) * D;
        reference::decode_attention_head(
            q.data() + row, seen, D, scale, [&](std::size_t l) { return K + l * D; },
            [&](std::size_t l) { return V + l * D; }, ref.data());
        const std::vector<float> got(out.begin() + static_cast<std::ptrdiff_t>(row),
                                     out.begin() + static_cast<std::ptrdiff_t>(row + D));
        const std::vector<double> want(ref.begin(), ref.end());
        // The kernel's own error is the output rounding (rtol), the tensor-core
        // kernel's rounding of P to 16 bits before P V (as FlashAttention), and
        // fp32 noise, all below the dtype's tolerance.
        reference::check_rows_close(got, want, D, tol,
                                    shape() + ", batch " + std::to_string(b) + ", new token " + std::to_string(i) +
                                        ", query head " + std::to_string(hq) + " (elements are head_dim indices)");
      }
  }
}

std::string DecodeAttentionOp::shape() const {
  std::ostringstream os;
  os << (paged_ ? "decode attention (paged)" : "decode attention") << " " << to_string(r_.dtype)
     << (kv_t_ == DType::fp8 ? " fp8 cache" : "") << " B=" << p_.B
     << " Hq=" << p_.Hq << " Hkv=" << p_.Hkv << " L=" << p_.L << " D=" << p_.D;
  if (p_.S > 1) os << " S=" << p_.S;
  if (!lengths_.empty()) os << " contexts " << r_.options.as<DecodeAttentionOptions>().context_dist.text() << " (longest " << p_.L << ")";
  if (paged_) os << " page_size=" << pool_.page_size;
  os << " splits=" << p_.splits;
  return os.str();
}

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(decode_attention) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  add_contiguous_and_paged<DecodeAttentionOp>(registry, kDecodeAttention, kDecodeAttentionPaged, plan_decode_attention);
}
