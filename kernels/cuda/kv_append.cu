// KV append on CUDA (kv_append.hpp): the launcher of the copy kernel
// (kv_append.cuh) into a contiguous cache or a paged pool, and the operation
// (kinds kv_append and kv_append_paged), built from its request's plan
// (kv_append_plan.hpp), that checks every appended slot and its neighbours bit for bit.
#include "cuda/kv_append.hpp"

#include <algorithm>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/kv_append.cuh"
#include "cuda/kv_append_plan.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/kv_append.hpp"

namespace phasebench::cuda {

// ---- the launcher ---------------------------------------------------------------

KvAppendParams kv_append_params(DType t, const void* k_new, const void* v_new, void* k_cache, void* v_cache, int B, int S,
                                int Hkv, int D, int capacity, int pos, const std::int32_t* block_table, int page_size,
                                int pages_per_seq) {
  return {t, k_new, v_new, k_cache, v_cache, block_table, B, S, Hkv, D, capacity, pos, page_size, pages_per_seq};
}

void launch_kv_append(const KvAppendParams& p, cudaStream_t stream) {
  const bool paged = p.block_table != nullptr;
  if (auto why = kv_append_unsupported(p.dtype, p.D, paged, p.page_size)) throw Unsupported(*why);
  if (p.B <= 0 || p.S <= 0 || p.Hkv <= 0) throw Unsupported("KV append: batch, tokens and kv heads must be >= 1");
  const long long capacity = paged ? static_cast<long long>(p.pages_per_seq) * p.page_size : p.capacity;
  if (p.pos < 0 || p.pos + static_cast<long long>(p.S) > capacity)
    throw std::logic_error("KV append: positions " + std::to_string(p.pos) + ".." + std::to_string(p.pos + p.S - 1) +
                           " do not fit a cache of " + std::to_string(capacity) + " tokens");
  const unsigned long long n_vec = static_cast<unsigned long long>(p.B) * p.S * p.Hkv * (p.D / 8);
  if (n_vec >= (1ull << 31))
    throw Unsupported("KV append: " + std::to_string(n_vec) + " vectors per call exceed the kernel's 2^31 limit");
  const unsigned blocks = static_cast<unsigned>((n_vec + kThreads - 1) / kThreads);
  const auto* kn = static_cast<const uint4*>(p.k_new);
  const auto* vn = static_cast<const uint4*>(p.v_new);
  auto* kc = static_cast<uint4*>(p.k_cache);
  auto* vc = static_cast<uint4*>(p.v_cache);
  const unsigned vpr = static_cast<unsigned>(p.D / 8);
  if (paged) {
    kv_append_kernel<true><<<blocks, kThreads, 0, stream>>>(kn, vn, kc, vc, p.block_table, static_cast<unsigned>(n_vec),
                                                            p.S, p.Hkv, vpr, 0u, p.pos, p.page_size, p.pages_per_seq);
  } else {
    kv_append_kernel<false><<<blocks, kThreads, 0, stream>>>(kn, vn, kc, vc, nullptr, static_cast<unsigned>(n_vec), p.S,
                                                             p.Hkv, vpr, p.capacity, p.pos, 0u, 0u);
  }
  PB_CUDA_CHECK_LAUNCH("kv_append_kernel");
}

// ---- the operation ----------------------------------------------------------------

namespace {

class KvAppendOp final : public AttentionOpBase {
 public:
  KvAppendOp(Context& ctx, const OpRequest& r, const KvAppendPlan& plan)
      : AttentionOpBase(ctx, r), paged_(plan.paged), p_(plan.params) {
    B_ = p_.B;
    S_ = p_.S;
    Hkv_ = p_.Hkv;
    D_ = p_.D;
    cap_ = p_.capacity;
    pos_ = p_.pos;
    const std::size_t es = element_bytes(r.dtype);
    new_elems_ = static_cast<std::size_t>(B_) * S_ * Hkv_ * D_;
    if (paged_) {
      pool_ = BlockTable(r, r.options.as<KvAppendOptions>().page_size, B_, r.options.as<KvAppendOptions>().capacity);
      cache_elems_ = static_cast<std::size_t>(B_) * pool_.pages_per_seq * Hkv_ * pool_.page_size * D_;
    } else {
      cache_elems_ = static_cast<std::size_t>(B_) * Hkv_ * cap_ * D_;
    }

    k_new_ = DeviceBuffer(new_elems_ * es);
    v_new_ = DeviceBuffer(new_elems_ * es);
    k_cache_ = DeviceBuffer(cache_elems_ * es);
    v_cache_ = DeviceBuffer(cache_elems_ * es);
    fill_random(k_new_.get(), r.dtype, new_elems_, seed_of(r.seed, KvBuf::k_new), 1.0f, ctx.stream);
    fill_random(v_new_.get(), r.dtype, new_elems_, seed_of(r.seed, KvBuf::v_new), 1.0f, ctx.stream);
    fill_random(k_cache_.get(), r.dtype, cache_elems_, seed_of(r.seed, KvBuf::k), 1.0f, ctx.stream);
    fill_random(v_cache_.get(), r.dtype, cache_elems_, seed_of(r.seed, KvBuf::v), 1.0f, ctx.stream);
    if (paged_) {
      pool_.to_device(ctx.stream);
    }
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

    // The plan's params, pointed at this op's buffers.
    p_.k_new = k_new_.get();
    p_.v_new = v_new_.get();
    p_.k_cache = k_cache_.get();
    p_.v_cache = v_cache_.get();
    p_.block_table = paged_ ? pool_.table() : nullptr;
  }

  void run() override { launch_kv_append(p_, ctx_.stream); }

  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    const std::size_t es = element_bytes(r_.dtype);
    const std::size_t D = static_cast<std::size_t>(D_);
    // Test hook: zero the first appended K slot (batch 0, head 0, position pos).
    corrupt_for_test(fault_, byte_ptr(k_cache_.get(), cache_offset(0, 0, pos_), es), D * es, ctx_.stream);
    // Batches checked: all up to 8, else 8 spread incl. the first and the last.
    const auto batches = spread_sample(static_cast<std::uint64_t>(B_), 8);
    // Positions read back: the appended ones plus up to 16 untouched ones before them
    // (and, paged, the unused slots after the capacity in the last page).
    const int lo = std::max(0, pos_ - 16);
    for (const std::uint64_t b : batches) {
      const std::size_t new_off = static_cast<std::size_t>(b) * S_ * Hkv_ * D;
      for (int which = 0; which < 2; ++which) {
        const void* src_new = which == 0 ? k_new_.get() : v_new_.get();
        const void* cache = which == 0 ? k_cache_.get() : v_cache_.get();
        const char* name = which == 0 ? "K" : "V";
        const std::uint64_t cache_seed = seed_of(r_.seed, which == 0 ? KvBuf::k : KvBuf::v);
        const std::vector<std::uint16_t> fresh = download_u16(byte_ptr(src_new, new_off, es), S_ * Hkv_ * D, ctx_.stream);
        // slots: host copy of positions [lo, end) of every head of sequence b, [h][t - lo][D] or per page.
        const int end = paged_ ? pool_.pages_per_seq * pool_.page_size : cap_;
        std::vector<std::uint16_t> got(static_cast<std::size_t>(Hkv_) * (end - lo) * D);
        if (!paged_) {
          PB_CUDA_CHECK(cudaMemcpy2DAsync(got.data(), (end - lo) * D * es, byte_ptr(cache, cache_offset(b, 0, lo), es),
                                          static_cast<std::size_t>(cap_) * D * es, (end - lo) * D * es, Hkv_,
                                          cudaMemcpyDeviceToHost, ctx_.stream));
        } else {
          for (int h = 0; h < Hkv_; ++h)
            for (int t = lo; t < end;) {
              const int n = std::min(end - t, pool_.page_size - t % pool_.page_size);  // slots of t's page from t on
              PB_CUDA_CHECK(cudaMemcpyAsync(got.data() + (static_cast<std::size_t>(h) * (end - lo) + (t - lo)) * D,
                                            byte_ptr(cache, cache_offset(b, h, t), es), n * D * es,
                                            cudaMemcpyDeviceToHost, ctx_.stream));
              t += n;
            }
        }
        PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
        for (int h = 0; h < Hkv_; ++h)
          for (int t = lo; t < end; ++t) {
            const std::uint16_t* slot = got.data() + (static_cast<std::size_t>(h) * (end - lo) + (t - lo)) * D;
            const std::size_t base = cache_offset(b, h, t);
            for (std::size_t d = 0; d < D; ++d) {
              std::uint16_t want;
              const char* kind;
              if (t >= pos_ && t < cap_) {
                want = fresh[(static_cast<std::size_t>(t - pos_) * Hkv_ + h) * D + d];
                kind = "appended";
              } else {
                want = encode_host(r_.dtype, numeric::random_value(cache_seed, base + d, 1.0f));
                kind = "untouched";
              }
              if (slot[d] != want) {
                std::ostringstream os;
                os << shape() << ": " << name << " cache, " << kind << " slot (batch " << b << ", head " << h
                   << ", position " << t << ", element " << d << ") holds 0x" << std::hex << slot[d]
                   << ", expected 0x" << want << (t >= pos_ && t < cap_ ? " (the new token's bits)" : " (its fill value)");
                throw VerificationError(os.str());
              }
            }
          }
      }
    }
  }

 private:
  // The test access reads the whole K cache (or K page pool).
  const DeviceBuffer& output() const override { return k_cache_; }
  // Element offset of (batch b, head h, position t) in the cache or pool.
  std::size_t cache_offset(std::size_t b, std::size_t h, std::size_t t) const {
    const std::size_t D = static_cast<std::size_t>(D_);
    if (!paged_) return ((b * Hkv_ + h) * cap_ + t) * D;
    const std::size_t P = static_cast<std::size_t>(pool_.page_size);
    const std::size_t page = static_cast<std::size_t>(pool_.host[b * pool_.pages_per_seq + t / P]);
    return ((page * Hkv_ + h) * P + t % P) * D;
  }
  std::string shape() const {
    std::ostringstream os;
    os << (paged_ ? "KV append (paged)" : "KV append") << " " << to_string(r_.dtype) << " B=" << B_ << " S=" << S_
       << " Hkv=" << Hkv_ << " D=" << D_ << " capacity=" << cap_;
    if (paged_) os << " page_size=" << pool_.page_size;
    return os.str();
  }

  bool paged_;
  int B_ = 0, S_ = 0, Hkv_ = 0, D_ = 0, cap_ = 0, pos_ = 0;
  std::size_t new_elems_ = 0, cache_elems_ = 0;
  DeviceBuffer k_new_, v_new_, k_cache_, v_cache_;
  BlockTable pool_;  // paged only
  KvAppendParams p_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(kv_append) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  // A bit-exact copy of 16-bit elements.
  add_contiguous_and_paged<KvAppendOp>(registry, kKvAppend, kKvAppendPaged, plan_kv_append);
}
