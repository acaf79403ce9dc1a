// KV append on CUDA (kv_append.hpp): the copy kernel into a contiguous cache or
// a paged pool, and the operation (kinds kv_append and kv_append_paged) that
// checks every appended slot and its neighbours bit for bit.
#include "cuda/kv_append.hpp"

#include <algorithm>
#include <climits>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "common/numeric.hpp"
#include "common/paged_kv.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/kv_append.hpp"

namespace phasebench::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per 16-byte vector of the new tokens: vector `idx` of
// [B, S, Hkv, D/8] is read from k_new/v_new at idx and written to its slot.
template <bool Paged>
__global__ void __launch_bounds__(kThreads)
    kv_append_kernel(const uint4* __restrict__ k_new, const uint4* __restrict__ v_new, uint4* __restrict__ k_cache,
                     uint4* __restrict__ v_cache, const std::int32_t* __restrict__ block_table, unsigned n_vec,
                     unsigned S, unsigned Hkv, unsigned vec_per_row, unsigned capacity, unsigned pos,
                     unsigned page_size, unsigned pages_per_seq) {
  const unsigned idx = blockIdx.x * kThreads + threadIdx.x;
  if (idx >= n_vec) return;
  // Issue the loads first; the index arithmetic below overlaps their latency.
  const uint4 kx = __ldcs(k_new + idx);
  const uint4 vx = __ldcs(v_new + idx);
  const unsigned dv = idx % vec_per_row;
  unsigned rest = idx / vec_per_row;
  const unsigned h = rest % Hkv;
  rest /= Hkv;
  const unsigned s = rest % S;
  const unsigned b = rest / S;
  const unsigned t = pos + s;
  std::size_t dst;
  if constexpr (Paged) {
    const unsigned page = static_cast<unsigned>(__ldg(block_table + static_cast<std::size_t>(b) * pages_per_seq + t / page_size));
    dst = ((static_cast<std::size_t>(page) * Hkv + h) * page_size + t % page_size) * vec_per_row + dv;
  } else {
    dst = ((static_cast<std::size_t>(b) * Hkv + h) * capacity + t) * vec_per_row + dv;
  }
  __stcs(k_cache + dst, kx);  // streaming stores: the cache lines are not read again by this kernel
  __stcs(v_cache + dst, vx);
}

}  // namespace

std::optional<std::string> kv_append_unsupported(DType dtype, long long D, bool paged, long long page_size) {
  if (element_bytes(dtype) != 2)
    return "KV append: dtype " + std::string(to_string(dtype)) + " is not supported on CUDA; use bf16 or fp16";
  if (D <= 0 || D % 8 != 0)
    return "KV append: head_dim " + std::to_string(D) + " is not supported; use a multiple of 8 (16-byte vectors)";
  if (paged && (page_size < 16 || page_size % 16 != 0))
    return "KV append: page size " + std::to_string(page_size) + " is not supported; use a multiple of 16";
  return std::nullopt;
}

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

std::optional<std::string> request_unsupported(const OpRequest& r, const Context&) {
  const auto a = KvAppendShape::of(r.shape);
  const bool paged = r.kind == kKvAppendPaged;
  const auto& p = r.options.as<KvAppendOptions>();
  const std::uint64_t P = paged ? p.page_size : 0, cap = p.capacity;
  if (auto why = kv_append_unsupported(r.dtype, static_cast<long long>(a.D), paged, static_cast<long long>(P)))
    return why;
  if (a.B == 0 || a.S == 0 || a.Hkv == 0) return std::string("KV append: batch, tokens and kv heads must be >= 1");
  if (cap < a.S)
    return "KV append: capacity " + std::to_string(cap) + " is smaller than the " + std::to_string(a.S) +
           " tokens appended";
  if (cap > static_cast<std::uint64_t>(INT_MAX)) return std::string("KV append: capacity exceeds 2^31 - 1");
  if (a.B * a.S * a.Hkv * (a.D / 8) >= (1ull << 31))
    return std::string("KV append: more than 2^31 16-byte vectors per call (the kernel's limit)");
  if (paged && a.B * pages_per_sequence(cap, P) > static_cast<std::uint64_t>(INT_MAX))
    return std::string("KV append (paged): more than 2^31 pages");
  return std::nullopt;
}

class KvAppendOp final : public PreparedOp, public AttentionOpAccess {
 public:
  KvAppendOp(Context& ctx, const OpRequest& r) : ctx_(ctx), r_(r), paged_(r.kind == kKvAppendPaged) {
    const auto a = KvAppendShape::of(r.shape);
    B_ = static_cast<int>(a.B);  // cannot_run checked that every dimension fits in int
    S_ = static_cast<int>(a.S);
    Hkv_ = static_cast<int>(a.Hkv);
    D_ = static_cast<int>(a.D);
    cap_ = static_cast<int>(r.options.as<KvAppendOptions>().capacity);
    pos_ = cap_ - S_;
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

    p_ = kv_append_params(r.dtype, k_new_.get(), v_new_.get(), k_cache_.get(), v_cache_.get(), B_, S_, Hkv_, D_, cap_, pos_,
                          paged_ ? pool_.table() : nullptr, pool_.page_size, pool_.pages_per_seq);
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

  std::vector<float> output_values() override { return output_as_float(); }
  std::vector<float> output_as_float() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(k_cache_.get(), r_.dtype, cache_elems_, ctx_.stream);
  }
  void set_fault_injection(bool on) override { fault_ = on; }

 private:
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

  Context& ctx_;
  OpRequest r_;
  bool paged_;
  bool fault_ = false;
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
  add_contiguous_and_paged<KvAppendOp>(registry, kKvAppend, kKvAppendPaged, request_unsupported);
}
