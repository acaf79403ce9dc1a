// MLA decode attention on CUDA (latent_attention.hpp): the launcher of the
// kernels (latent_attention.cuh) and the operations (latent_attention,
// latent_attention_paged), built from their request's plan
// (latent_attention_plan.hpp) and verified against reference::latent_attention_head.
#include "cuda/latent_attention.hpp"

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "reference/common.hpp"
#include "reference/latent_attention.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/dispatch.cuh"
#include "cuda/latent_attention.cuh"
#include "cuda/latent_attention_op.hpp"
#include "cuda/latent_attention_plan.hpp"
#include "phasebench/ops/latent_attention.hpp"

namespace phasebench::cuda {

// ---- the launcher ---------------------------------------------------------------

namespace {

// Calls f(tag, BC<paged>) for the run-time choices.
template <class F>
void dispatch(DType dtype, bool paged, F&& f) {
  dispatch_16bit(dtype, "CUDA MLA decode attention", [&](auto tag) { dispatch_bool(paged, [&](auto pg) { f(tag, pg); }); });
}

// The kernel's dynamic shared memory: above 48 KiB.
template <class Tag, bool Paged>
void allow_smem() {
  allow_dynamic_smem<latent_attention_kernel<Tag, Paged>>(kSmemBytes);
}

struct Launch {
  LatentParams p;
  int B = 0;
  int head_tiles = 0;
};

void launch(DType dtype, bool paged, const Launch& l, cudaStream_t stream) {
  dispatch(dtype, paged, [&](auto tag, auto pg) {
    using Tag = decltype(tag);
    constexpr bool Pg = decltype(pg)::value;
    allow_smem<Tag, Pg>();
    const dim3 grid(static_cast<unsigned>(l.head_tiles), static_cast<unsigned>(l.p.splits), static_cast<unsigned>(l.B));
    latent_attention_kernel<Tag, Pg><<<grid, kThreads, kSmemBytes, stream>>>(l.p);
    PB_CUDA_CHECK_LAUNCH("latent_attention_kernel");
    if (l.p.splits > 1) {
      latent_reduce_kernel<Tag><<<static_cast<unsigned>(l.B * l.p.H), 128, 0, stream>>>(l.p.part, l.p.out, l.p.splits);
      PB_CUDA_CHECK_LAUNCH("latent_reduce_kernel");
    }
  });
}

}  // namespace

std::size_t latent_attention_smem_bytes() { return kSmemBytes; }

int latent_attention_ctas_per_sm(DType dtype, bool paged) {
  int n = 0;
  dispatch(dtype, paged, [&](auto tag, auto pg) {
    using Tag = decltype(tag);
    constexpr bool Pg = decltype(pg)::value;
    allow_smem<Tag, Pg>();
    PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, latent_attention_kernel<Tag, Pg>, kThreads, kSmemBytes));
  });
  return std::max(n, 1);
}

// ---- the operation ----------------------------------------------------------------

// ---- the operation (latent_attention_op.hpp) ---------------------------------------

LatentAttentionOp::LatentAttentionOp(Context& ctx, const OpRequest& r, const LatentAttentionPlan& plan)
  : AttentionOpBase(ctx, r), paged_(plan.paged), B_(plan.B), H_(plan.H), L_(plan.L) {
  const std::size_t es = element_bytes(r.dtype);
  const std::size_t q_elems = static_cast<std::size_t>(B_) * H_ * kW;
  std::size_t cache_elems = static_cast<std::size_t>(B_) * L_ * kW;
  if (paged_) {
    pool_ = BlockTable(r, r.options.as<LatentAttentionOptions>().page_size, B_, static_cast<std::uint64_t>(L_));
    cache_elems = static_cast<std::size_t>(B_) * pool_.pages_per_seq * pool_.page_size * kW;
  }
  q_ = DeviceBuffer(q_elems * es);
  out_ = DeviceBuffer(static_cast<std::size_t>(B_) * H_ * kR * es);
  cache_ = DeviceBuffer(cache_elems * es);
  if (plan.split.workspace_floats) ws_ = DeviceBuffer(plan.split.workspace_floats * sizeof(float));
  fill_random(q_.get(), r.dtype, q_elems, seed_of(r.seed, KvBuf::q), 1.0f, ctx.stream);
  PB_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), ctx.stream));
  if (paged_) pool_.to_device(ctx.stream);
  // One latent row per token: a cache of one KV head of width kW.
  fill_kv_cache(cache_.get(), r.dtype, cache_elems, pool_, r.seed, KvBuf::k, KvBuf::k_pool, B_, 1, L_, kW, ctx.stream);
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  p_.q = q_.as<std::uint16_t>();
  p_.out = out_.as<std::uint16_t>();
  p_.cache = cache_.as<std::uint16_t>();
  p_.block_table = paged_ ? pool_.table() : nullptr;
  p_.part = ws_.bytes() ? ws_.as<float>() : nullptr;
  p_.H = H_;
  p_.L = L_;
  p_.page_size = pool_.page_size;
  p_.pages_per_seq = pool_.pages_per_seq;
  p_.chunk = plan.split.chunk;
  p_.splits = plan.split.splits;
  p_.scale_log2 = plan.scale_log2;
}

void LatentAttentionOp::run() { launch(r_.dtype, paged_, Launch{p_, B_, (H_ + kHeads - 1) / kHeads}, ctx_.stream); }

void LatentAttentionOp::verify() {
  run();
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
  const DType t = r_.dtype;
  const std::size_t es = element_bytes(t), L = static_cast<std::size_t>(L_);
  const std::vector<float> q = download_as_float(q_.get(), t, static_cast<std::size_t>(B_) * H_ * kW, ctx_.stream);
  const std::vector<float> out = download_as_float(out_.get(), t, static_cast<std::size_t>(B_) * H_ * kR, ctx_.stream);
  // Sequences: a spread incl. the first and the last, fewer at long contexts
  // (about 2^27 reference multiply-adds); heads: all up to 24, else a spread
  // incl. the first and the last (so the masked last tile is checked).
  const auto heads = spread_sample(static_cast<std::uint64_t>(H_), 24);
  const std::uint64_t per_seq = heads.size() * L * kW;
  const auto seqs = spread_sample(static_cast<std::uint64_t>(B_),
                                  std::max<std::uint64_t>(2, (std::uint64_t{1} << 27) / std::max<std::uint64_t>(per_seq, 1)));
  const float scale = latent_attention_scale(r_);
  std::vector<unsigned char> raw(L * kW * es);
  std::vector<double> ref(kR);
  for (const std::uint64_t b : seqs) {
    download_kv_rows(raw.data(), cache_.get(), es, pool_, b, 0, 1, L, L, kW, ctx_.stream);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    const std::vector<float> C = reference::to_float(raw.data(), t, L * kW);
    for (const std::uint64_t h : heads) {
      const std::size_t bh = b * H_ + h;
      reference::latent_attention_head(q.data() + bh * kW, L, kR, kP, scale,
                                       [&](std::size_t l) { return C.data() + l * kW; }, ref.data());
      const std::vector<float> got(out.begin() + static_cast<std::ptrdiff_t>(bh * kR),
                                   out.begin() + static_cast<std::ptrdiff_t>((bh + 1) * kR));
      reference::check_rows_close(got, ref, kR, reference::tolerance_for(t),
                                  shape() + ", batch " + std::to_string(b) + ", head " + std::to_string(h) +
                                      " (elements are latent columns)");
    }
  }
}

std::string LatentAttentionOp::shape() const {
  std::ostringstream os;
  os << (paged_ ? "MLA decode attention (paged)" : "MLA decode attention") << " " << to_string(r_.dtype)
     << " B=" << B_ << " H=" << H_ << " L=" << L_ << " R=" << kR << " P=" << kP;
  if (paged_) os << " page_size=" << pool_.page_size;
  os << " splits=" << p_.splits;
  return os.str();
}

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(latent_attention) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  add_contiguous_and_paged<LatentAttentionOp>(registry, kLatentAttention, kLatentAttentionPaged,
                                              plan_latent_attention);
}
