// The KV-cache and attention operations of the CUDA backend as PreparedOps:
// decode attention (contiguous, paged), KV append (contiguous, paged) and
// prefill attention (flash kernel, cuBLAS reference path). Constructors
// allocate and fill (outside any timed region) and synchronise; run() only
// enqueues on the context's stream; verify() runs once, synchronises and
// compares with the CPU reference.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/reference.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/attention_util.cuh"
#include "cuda/cuda_common.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/kv_append.hpp"
#include "cuda/prefill_attention.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

namespace {

// Seeds of the buffers of one request: distinct per buffer, derived from req.seed.
enum class Buf : std::uint64_t { q = 1, k = 2, v = 3, k_new = 4, v_new = 5, block_table = 6, k_pool = 7, v_pool = 8 };
std::uint64_t seed_of(std::uint64_t seed, Buf b) { return buffer_seed(seed, static_cast<std::uint64_t>(b)); }

int to_int(std::uint64_t v, const std::string& what) { return to_int32(v, what); }

void require_positive(std::uint64_t v, const std::string& what) {
  if (v == 0) throw Unsupported(what + " must be >= 1");
}

// A block table [B, pages_per_seq] that is a random permutation of the page ids
// (deterministic Fisher-Yates on splitmix64), so consecutive logical pages of a
// sequence are not adjacent in the pool.
std::vector<std::int32_t> scattered_block_table(std::uint64_t B, std::uint64_t pages_per_seq, std::uint64_t seed) {
  const std::uint64_t n = B * pages_per_seq;
  if (n > static_cast<std::uint64_t>(INT_MAX)) throw Unsupported("paged KV cache: more than 2^31 pages");
  std::vector<std::int32_t> t(n);
  for (std::uint64_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>(i);
  for (std::uint64_t i = n; i > 1; --i) {
    const std::uint64_t j = numeric::mix64(seed + i) % i;
    std::swap(t[i - 1], t[j]);
  }
  return t;
}

// Host encoding of a float into 16-bit storage bits, as fill_random does on the device.
std::uint16_t encode_host(DType t, float v) {
  return t == DType::bf16 ? numeric::float_to_bf16(v) : numeric::float_to_fp16(v);
}

// `rows` rows of `row_elems` elements, `pitch_elems` apart on the device, decoded to floats [rows][row_elems].
std::vector<float> download_2d_as_float(const void* src, DType t, std::size_t rows, std::size_t row_elems,
                                        std::size_t pitch_elems, cudaStream_t stream) {
  const std::size_t es = element_bytes(t);
  std::vector<unsigned char> raw(rows * row_elems * es);
  if (!raw.empty()) {
    PB_CUDA_CHECK(cudaMemcpy2DAsync(raw.data(), row_elems * es, src, pitch_elems * es, row_elems * es, rows,
                                    cudaMemcpyDeviceToHost, stream));
    PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return reference::to_float(raw.data(), t, rows * row_elems);
}

// n indices in [0, total) including the first and the last, evenly spaced; all when total <= n.
std::vector<std::uint64_t> spread_sample(std::uint64_t total, std::uint64_t n) {
  std::vector<std::uint64_t> idx;
  if (total <= n) {
    for (std::uint64_t i = 0; i < total; ++i) idx.push_back(i);
    return idx;
  }
  n = std::max<std::uint64_t>(n, 2);
  for (std::uint64_t k = 0; k < n; ++k) idx.push_back(k * (total - 1) / (n - 1));
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

// Writes logical element (b, h, t, d), t < L, of a [B, Hkv, L, D] cache filled
// with fill_random(seed) into its paged slot, so that a paged pool holds exactly
// what the contiguous cache of the same seed holds (pages: [pages, Hkv, P, D]).
template <class Tag>
__global__ void paged_logical_fill_kernel(std::uint16_t* __restrict__ pool, const std::int32_t* __restrict__ block_table,
                                          std::uint64_t seed, int Hkv, int L, int D, int P, int pages_per_seq,
                                          std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % D);
    std::size_t rest = i / D;
    const int t = static_cast<int>(rest % L);
    rest /= L;
    const int h = static_cast<int>(rest % Hkv);
    const std::size_t b = rest / Hkv;
    const int page = block_table[b * pages_per_seq + t / P];
    pool[((static_cast<std::size_t>(page) * Hkv + h) * P + t % P) * D + d] =
        encode<Tag>(numeric::random_value(seed, i, 1.0f));
  }
}

void paged_logical_fill(void* pool, const std::int32_t* block_table, DType t, std::uint64_t seed, int B, int Hkv, int L,
                        int D, int P, int pages_per_seq, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(B) * Hkv * L * D;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + threads - 1) / threads, 65535u * 4));
  auto* p = static_cast<std::uint16_t*>(pool);
  if (t == DType::bf16)
    paged_logical_fill_kernel<Bf16Tag><<<blocks, threads, 0, stream>>>(p, block_table, seed, Hkv, L, D, P, pages_per_seq, n);
  else
    paged_logical_fill_kernel<Fp16Tag><<<blocks, threads, 0, stream>>>(p, block_table, seed, Hkv, L, D, P, pages_per_seq, n);
  PB_CUDA_CHECK_LAUNCH("paged_logical_fill_kernel");
}

// ---- decode attention --------------------------------------------------------

class DecodeAttentionOp final : public PreparedOp, public AttentionOpAccess {
 public:
  DecodeAttentionOp(Context& ctx, const OpRequest& r, bool paged) : ctx_(ctx), r_(r), paged_(paged) {
    const auto& a = r.attention;
    const std::string why = decode_attention_unsupported(r.dtype, static_cast<long long>(a.Hq),
                                                         static_cast<long long>(a.Hkv), static_cast<long long>(a.D),
                                                         paged, static_cast<long long>(r.page_size));
    if (!why.empty()) throw Unsupported(why);
    for (auto [v, name] : {std::pair{a.B, "batch"}, {a.Hq, "query heads"}, {a.Hkv, "kv heads"}, {a.L, "context"}})
      require_positive(v, std::string("decode attention: ") + name);
    B_ = to_int(a.B, "batch");
    Hq_ = to_int(a.Hq, "query heads");
    Hkv_ = to_int(a.Hkv, "kv heads");
    L_ = to_int(a.L, "context");
    D_ = to_int(a.D, "head_dim");
    if (B_ > 65535) throw Unsupported("decode attention: batch " + std::to_string(B_) + " exceeds 65535");
    const std::size_t es = element_bytes(r.dtype);
    const std::size_t q_elems = static_cast<std::size_t>(B_) * Hq_ * D_;
    std::size_t kv_elems = static_cast<std::size_t>(B_) * Hkv_ * L_ * D_;
    if (paged_) {
      P_ = to_int(r.page_size, "page size");
      pps_ = to_int(pages_per_sequence(a.L, r.page_size), "pages per sequence");
      kv_elems = static_cast<std::size_t>(B_) * pps_ * Hkv_ * P_ * D_;
    }
    // Splits: requested, or chosen for about two waves of the GPU.
    const int G = Hq_ / Hkv_;
    const int align = paged_ ? P_ : 64;
    int splits = 1;
    if (r.splits == 0) {
      const int per_sm = decode_attention_ctas_per_sm(r.dtype, D_, G, paged_);
      splits = choose_decode_splits(B_, Hkv_, decode_head_chunks(G), L_, align, ctx.sm_count, per_sm);
    } else {
      if (r.splits > static_cast<std::uint64_t>(kMaxDecodeSplits))
        throw Unsupported("decode attention: " + std::to_string(r.splits) + " splits requested; at most " +
                          std::to_string(kMaxDecodeSplits));
      splits = static_cast<int>(std::min<std::uint64_t>(r.splits, a.L));
    }
    chunk_ = decode_split_chunk(L_, splits, align);
    splits = (L_ + chunk_ - 1) / chunk_;
    const std::size_t ws_floats = decode_attention_workspace_floats(B_, Hq_, D_, splits);

    const std::uint64_t bytes = 2 * q_elems * es + 2 * kv_elems * es + ws_floats * 4 +
                                (paged_ ? static_cast<std::uint64_t>(B_) * pps_ * 4 : 0);
    require_memory(ctx, bytes, "decode attention " + shape());

    q_ = DeviceBuffer(q_elems * es);
    out_ = DeviceBuffer(q_elems * es);
    k_ = DeviceBuffer(kv_elems * es);
    v_ = DeviceBuffer(kv_elems * es);
    if (ws_floats) ws_ = DeviceBuffer(ws_floats * sizeof(float));
    fill_random(q_.get(), r.dtype, q_elems, seed_of(r.seed, Buf::q), 1.0f, ctx.stream);
    PB_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), ctx.stream));
    if (paged_) {
      bt_host_ = scattered_block_table(static_cast<std::uint64_t>(B_), static_cast<std::uint64_t>(pps_),
                                       seed_of(r.seed, Buf::block_table));
      bt_ = DeviceBuffer(bt_host_.size() * sizeof(std::int32_t));
      upload(bt_.get(), bt_host_.data(), bt_.bytes(), ctx.stream);
      // Slots past L in each sequence's last page hold unrelated non-zero data (read
      // by nobody); the logical slots hold the contiguous cache's values of the same seed.
      fill_random(k_.get(), r.dtype, kv_elems, seed_of(r.seed, Buf::k_pool), 1.0f, ctx.stream);
      fill_random(v_.get(), r.dtype, kv_elems, seed_of(r.seed, Buf::v_pool), 1.0f, ctx.stream);
      paged_logical_fill(k_.get(), bt_.as<std::int32_t>(), r.dtype, seed_of(r.seed, Buf::k), B_, Hkv_, L_, D_, P_,
                         pps_, ctx.stream);
      paged_logical_fill(v_.get(), bt_.as<std::int32_t>(), r.dtype, seed_of(r.seed, Buf::v), B_, Hkv_, L_, D_, P_,
                         pps_, ctx.stream);
    } else {
      fill_random(k_.get(), r.dtype, kv_elems, seed_of(r.seed, Buf::k), 1.0f, ctx.stream);
      fill_random(v_.get(), r.dtype, kv_elems, seed_of(r.seed, Buf::v), 1.0f, ctx.stream);
    }
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

    p_.dtype = r.dtype;
    p_.q = q_.get();
    p_.out = out_.get();
    p_.k = k_.get();
    p_.v = v_.get();
    p_.block_table = paged_ ? bt_.as<std::int32_t>() : nullptr;
    p_.B = B_;
    p_.Hq = Hq_;
    p_.Hkv = Hkv_;
    p_.L = L_;
    p_.D = D_;
    p_.page_size = P_;
    p_.pages_per_seq = pps_;
    p_.splits = splits;
    p_.workspace = ws_floats ? ws_.as<float>() : nullptr;
  }

  void run() override { launch_decode_attention(p_, chunk_, ctx_.stream); }

  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
    const DType t = r_.dtype;
    const std::size_t es = element_bytes(t);
    const std::size_t D = static_cast<std::size_t>(D_), L = static_cast<std::size_t>(L_);
    const std::size_t q_elems = static_cast<std::size_t>(B_) * Hq_ * D;
    const std::vector<float> q = download_as_float(q_.get(), t, q_elems, ctx_.stream);
    const std::vector<float> out = download_as_float(out_.get(), t, q_elems, ctx_.stream);
    const int G = Hq_ / Hkv_;
    // (batch, kv head) pairs, each checked for all G of its query heads: all of them
    // when there are at most 256 query heads in all, else a spread incl. the first and
    // the last; fewer when the context is long (about 2^26 reference elements per cache).
    const std::uint64_t pairs_total = static_cast<std::uint64_t>(B_) * Hkv_;
    const std::uint64_t by_heads = std::max<std::uint64_t>(2, (256 + G - 1) / G);
    const std::uint64_t by_work = std::max<std::uint64_t>(2, (std::uint64_t{1} << 26) / (L * D));
    const auto pairs = spread_sample(pairs_total, std::min(by_heads, by_work));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D_)));
    const reference::Tolerance tol = reference::tolerance_for(t);
    std::vector<unsigned char> raw(2 * L * D * es);
    std::vector<float> ref(D);
    for (const std::uint64_t pair : pairs) {
      const std::size_t b = pair / Hkv_, h = pair % Hkv_;
      // K and V of (b, h) as [L, D], read back from the device through the layout.
      if (!paged_) {
        const std::size_t off = (b * Hkv_ + h) * L * D;
        PB_CUDA_CHECK(cudaMemcpyAsync(raw.data(), byte_ptr(k_.get(), off, es), L * D * es, cudaMemcpyDeviceToHost,
                                      ctx_.stream));
        PB_CUDA_CHECK(cudaMemcpyAsync(raw.data() + L * D * es, byte_ptr(v_.get(), off, es), L * D * es,
                                      cudaMemcpyDeviceToHost, ctx_.stream));
      } else {
        const std::size_t P = static_cast<std::size_t>(P_);
        for (std::size_t lp = 0; lp < static_cast<std::size_t>(pps_); ++lp) {
          const std::size_t page = static_cast<std::size_t>(bt_host_[b * pps_ + lp]);
          const std::size_t tokens = std::min(P, L - lp * P);
          const std::size_t off = (page * Hkv_ + h) * P * D;
          PB_CUDA_CHECK(cudaMemcpyAsync(raw.data() + lp * P * D * es, byte_ptr(k_.get(), off, es), tokens * D * es,
                                        cudaMemcpyDeviceToHost, ctx_.stream));
          PB_CUDA_CHECK(cudaMemcpyAsync(raw.data() + (L + lp * P) * D * es, byte_ptr(v_.get(), off, es),
                                        tokens * D * es, cudaMemcpyDeviceToHost, ctx_.stream));
        }
      }
      PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      const std::vector<float> kv = reference::to_float(raw.data(), t, 2 * L * D);
      const float* K = kv.data();
      const float* V = kv.data() + L * D;
      for (int g = 0; g < G; ++g) {
        const std::size_t hq = h * G + g;
        const std::size_t row = (b * Hq_ + hq) * D;
        reference::decode_attention_head(
            q.data() + row, L, D, scale, [&](std::size_t l) { return K + l * D; },
            [&](std::size_t l) { return V + l * D; }, ref.data());
        const std::vector<float> got(out.begin() + static_cast<std::ptrdiff_t>(row),
                                     out.begin() + static_cast<std::ptrdiff_t>(row + D));
        const std::vector<double> want(ref.begin(), ref.end());
        // The kernel's own error is the output rounding (rtol) plus fp32 noise far
        // below atol * RMS.
        reference::check_rows_close(got, want, D, tol,
                                    shape() + ", batch " + std::to_string(b) + ", query head " + std::to_string(hq) +
                                        " (elements are head_dim indices)");
      }
    }
  }

  std::vector<float> output_as_float() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(out_.get(), r_.dtype, static_cast<std::size_t>(B_) * Hq_ * D_, ctx_.stream);
  }
  void set_fault_injection(bool on) override { fault_ = on; }
  int splits() const override { return p_.splits; }

 private:
  std::string shape() const {
    std::ostringstream os;
    os << (paged_ ? "decode attention (paged)" : "decode attention") << " " << to_string(r_.dtype) << " B=" << B_
       << " Hq=" << Hq_ << " Hkv=" << Hkv_ << " L=" << L_ << " D=" << D_;
    if (paged_) os << " page_size=" << P_;
    os << " splits=" << p_.splits;
    return os.str();
  }

  Context& ctx_;
  OpRequest r_;
  bool paged_;
  bool fault_ = false;
  int B_ = 0, Hq_ = 0, Hkv_ = 0, L_ = 0, D_ = 0, P_ = 0, pps_ = 0;
  int chunk_ = 1;
  DeviceBuffer q_, out_, k_, v_, bt_, ws_;
  std::vector<std::int32_t> bt_host_;
  DecodeAttentionParams p_;
};

// ---- KV append ---------------------------------------------------------------

class KvAppendOp final : public PreparedOp, public AttentionOpAccess {
 public:
  KvAppendOp(Context& ctx, const OpRequest& r, bool paged) : ctx_(ctx), r_(r), paged_(paged) {
    const auto& a = r.append;
    const std::string why = kv_append_unsupported(r.dtype, static_cast<long long>(a.D), paged,
                                                  static_cast<long long>(r.page_size));
    if (!why.empty()) throw Unsupported(why);
    for (auto [v, name] : {std::pair{a.B, "batch"}, {a.S, "tokens"}, {a.Hkv, "kv heads"}, {a.D, "head_dim"}})
      require_positive(v, std::string("KV append: ") + name);
    const std::uint64_t cap = r.append_capacity == 0 ? a.S : r.append_capacity;
    if (cap < a.S)
      throw Unsupported("KV append: capacity " + std::to_string(cap) + " is smaller than the " + std::to_string(a.S) +
                        " tokens appended");
    B_ = to_int(a.B, "batch");
    S_ = to_int(a.S, "tokens");
    Hkv_ = to_int(a.Hkv, "kv heads");
    D_ = to_int(a.D, "head_dim");
    cap_ = to_int(cap, "capacity");
    pos_ = cap_ - S_;
    const std::size_t es = element_bytes(r.dtype);
    new_elems_ = static_cast<std::size_t>(B_) * S_ * Hkv_ * D_;
    if (paged_) {
      P_ = to_int(r.page_size, "page size");
      pps_ = to_int(pages_per_sequence(cap, r.page_size), "pages per sequence");
      cache_elems_ = static_cast<std::size_t>(B_) * pps_ * Hkv_ * P_ * D_;
    } else {
      cache_elems_ = static_cast<std::size_t>(B_) * Hkv_ * cap_ * D_;
    }
    const std::uint64_t bytes =
        2 * new_elems_ * es + 2 * cache_elems_ * es + (paged_ ? static_cast<std::uint64_t>(B_) * pps_ * 4 : 0);
    require_memory(ctx, bytes, "KV append " + shape());

    k_new_ = DeviceBuffer(new_elems_ * es);
    v_new_ = DeviceBuffer(new_elems_ * es);
    k_cache_ = DeviceBuffer(cache_elems_ * es);
    v_cache_ = DeviceBuffer(cache_elems_ * es);
    fill_random(k_new_.get(), r.dtype, new_elems_, seed_of(r.seed, Buf::k_new), 1.0f, ctx.stream);
    fill_random(v_new_.get(), r.dtype, new_elems_, seed_of(r.seed, Buf::v_new), 1.0f, ctx.stream);
    fill_random(k_cache_.get(), r.dtype, cache_elems_, seed_of(r.seed, Buf::k), 1.0f, ctx.stream);
    fill_random(v_cache_.get(), r.dtype, cache_elems_, seed_of(r.seed, Buf::v), 1.0f, ctx.stream);
    if (paged_) {
      bt_host_ = scattered_block_table(static_cast<std::uint64_t>(B_), static_cast<std::uint64_t>(pps_),
                                       seed_of(r.seed, Buf::block_table));
      bt_ = DeviceBuffer(bt_host_.size() * sizeof(std::int32_t));
      upload(bt_.get(), bt_host_.data(), bt_.bytes(), ctx.stream);
    }
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

    p_.dtype = r.dtype;
    p_.k_new = k_new_.get();
    p_.v_new = v_new_.get();
    p_.k_cache = k_cache_.get();
    p_.v_cache = v_cache_.get();
    p_.block_table = paged_ ? bt_.as<std::int32_t>() : nullptr;
    p_.B = B_;
    p_.S = S_;
    p_.Hkv = Hkv_;
    p_.D = D_;
    p_.capacity = cap_;
    p_.pos = pos_;
    p_.page_size = P_;
    p_.pages_per_seq = pps_;
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
        const std::uint64_t cache_seed = seed_of(r_.seed, which == 0 ? Buf::k : Buf::v);
        const std::vector<std::uint16_t> fresh = download_u16(byte_ptr(src_new, new_off, es), S_ * Hkv_ * D, ctx_.stream);
        // slots: host copy of positions [lo, end) of every head of sequence b, [h][t - lo][D] or per page.
        const int end = paged_ ? pps_ * P_ : cap_;
        std::vector<std::uint16_t> got(static_cast<std::size_t>(Hkv_) * (end - lo) * D);
        std::vector<std::size_t> flat(static_cast<std::size_t>(Hkv_) * (end - lo));  // cache element index of each slot
        if (!paged_) {
          PB_CUDA_CHECK(cudaMemcpy2DAsync(got.data(), (end - lo) * D * es, byte_ptr(cache, cache_offset(b, 0, lo), es),
                                          static_cast<std::size_t>(cap_) * D * es, (end - lo) * D * es, Hkv_,
                                          cudaMemcpyDeviceToHost, ctx_.stream));
        } else {
          for (int h = 0; h < Hkv_; ++h)
            for (int t = lo; t < end;) {
              const int n = std::min(end - t, P_ - t % P_);  // slots of t's page from t on
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
    const std::size_t P = static_cast<std::size_t>(P_);
    const std::size_t page = static_cast<std::size_t>(bt_host_[b * pps_ + t / P]);
    return ((page * Hkv_ + h) * P + t % P) * D;
  }
  std::string shape() const {
    std::ostringstream os;
    os << (paged_ ? "KV append (paged)" : "KV append") << " " << to_string(r_.dtype) << " B=" << B_ << " S=" << S_
       << " Hkv=" << Hkv_ << " D=" << D_ << " capacity=" << cap_;
    if (paged_) os << " page_size=" << P_;
    return os.str();
  }

  Context& ctx_;
  OpRequest r_;
  bool paged_;
  bool fault_ = false;
  int B_ = 0, S_ = 0, Hkv_ = 0, D_ = 0, cap_ = 0, pos_ = 0, P_ = 0, pps_ = 0;
  std::size_t new_elems_ = 0, cache_elems_ = 0;
  DeviceBuffer k_new_, v_new_, k_cache_, v_cache_, bt_;
  std::vector<std::int32_t> bt_host_;
  KvAppendParams p_;
};

// ---- prefill attention --------------------------------------------------------

class PrefillAttentionOp final : public PreparedOp, public AttentionOpAccess {
 public:
  PrefillAttentionOp(Context& ctx, const OpRequest& r) : ctx_(ctx), r_(r), blas_(r.impl == Impl::blas) {
    const auto& a = r.prefill;
    const std::string why = prefill_attention_unsupported(r.dtype, static_cast<long long>(a.Hq),
                                                          static_cast<long long>(a.Hkv), static_cast<long long>(a.D), blas_);
    if (!why.empty()) throw Unsupported(why);
    for (auto [v, name] : {std::pair{a.B, "batch"}, {a.S, "prompt length"}})
      require_positive(v, std::string("prefill attention: ") + name);
    p_.dtype = r.dtype;
    p_.B = to_int(a.B, "batch");
    p_.S = to_int(a.S, "prompt length");
    p_.Hq = to_int(a.Hq, "query heads");
    p_.Hkv = to_int(a.Hkv, "kv heads");
    p_.D = to_int(a.D, "head_dim");
    if (p_.B > 65535) throw Unsupported("prefill attention: batch " + std::to_string(p_.B) + " exceeds 65535");
    const std::size_t es = element_bytes(r.dtype);
    q_elems_ = static_cast<std::size_t>(p_.B) * p_.S * p_.Hq * p_.D;
    kv_elems_ = static_cast<std::size_t>(p_.B) * p_.S * p_.Hkv * p_.D;
    std::uint64_t bytes = 2 * q_elems_ * es + 2 * kv_elems_ * es;
    std::uint64_t scores = 0;
    if (blas_) {
      const int max_s = prefill_blas_max_seq(ctx.device);
      if (p_.S > max_s)
        throw Unsupported("prefill attention (cuBLAS): prompt " + std::to_string(p_.S) +
                          " exceeds the softmax kernel's limit of " + std::to_string(max_s) +
                          " (one fp32 score row in shared memory)");
      scores = prefill_blas_scores_bytes(a.B, a.Hq, a.S);
      if (scores / 4 / a.B / a.Hq != a.S * a.S) throw Unsupported("prefill attention (cuBLAS): score buffer overflows");
      bytes += scores;
    }
    require_memory(ctx, bytes,
                   shape() + (blas_ ? " (of which " + std::to_string(scores) + " bytes are the fp32 scores B*Hq*S*S*4)"
                                    : std::string()));
    q_ = DeviceBuffer(q_elems_ * es);
    k_ = DeviceBuffer(kv_elems_ * es);
    v_ = DeviceBuffer(kv_elems_ * es);
    out_ = DeviceBuffer(q_elems_ * es);
    if (blas_) scores_ = DeviceBuffer(scores);
    fill_random(q_.get(), r.dtype, q_elems_, seed_of(r.seed, Buf::q), 1.0f, ctx.stream);
    fill_random(k_.get(), r.dtype, kv_elems_, seed_of(r.seed, Buf::k), 1.0f, ctx.stream);
    fill_random(v_.get(), r.dtype, kv_elems_, seed_of(r.seed, Buf::v), 1.0f, ctx.stream);
    PB_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), ctx.stream));
    // The context's cuBLAS handle is already bound to its stream and workspace
    // (cublasSetStream here would silently drop the workspace).
    if (blas_ && ctx.cublas == nullptr)
      throw std::logic_error("prefill attention (cuBLAS): the context has no cuBLAS handle");
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    p_.q = q_.get();
    p_.k = k_.get();
    p_.v = v_.get();
    p_.out = out_.get();
  }

  void run() override {
    if (blas_)
      launch_prefill_blas(p_, scores_.as<float>(), ctx_.cublas, ctx_.stream);
    else
      launch_prefill_flash(p_, ctx_.stream);
  }

  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
    const DType t = r_.dtype;
    const std::size_t es = element_bytes(t);
    const int B = p_.B, S = p_.S, Hq = p_.Hq, Hkv = p_.Hkv, G = Hq / Hkv;
    const std::size_t D = static_cast<std::size_t>(p_.D);
    // (batch, head) pairs: corners and the middle.
    std::vector<std::pair<int, int>> heads = {{0, 0}, {B - 1, Hq - 1}, {B / 2, Hq / 2}, {0, Hq - 1}, {B - 1, 0}};
    std::sort(heads.begin(), heads.end());
    heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
    // Rows around the 64-row tiles of the flash kernel (and the cuBLAS path's same rows).
    const auto rows = reference::prefill_rows_to_check(static_cast<std::uint64_t>(S), 64);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const reference::Tolerance tol = reference::tolerance_for(t);
    std::vector<float> ref(D);
    for (const auto& [b, hq] : heads) {
      const int hkv = hq / G;
      const std::size_t qrow0 = (static_cast<std::size_t>(b) * S * Hq + hq) * D;
      const std::size_t krow0 = (static_cast<std::size_t>(b) * S * Hkv + hkv) * D;
      const auto q = download_2d_as_float(byte_ptr(q_.get(), qrow0, es), t, S, D, Hq * D, ctx_.stream);
      const auto o = download_2d_as_float(byte_ptr(out_.get(), qrow0, es), t, S, D, Hq * D, ctx_.stream);
      const auto k = download_2d_as_float(byte_ptr(k_.get(), krow0, es), t, S, D, Hkv * D, ctx_.stream);
      const auto v = download_2d_as_float(byte_ptr(v_.get(), krow0, es), t, S, D, Hkv * D, ctx_.stream);
      for (const std::uint64_t row : rows) {
        const int i = static_cast<int>(row);  // row < S, which fits in int
        reference::prefill_attention_row(
            q.data() + i * D, static_cast<std::size_t>(i), D, scale, [&](std::size_t l) { return k.data() + l * D; },
            [&](std::size_t l) { return v.data() + l * D; }, ref.data());
        const std::vector<float> got(o.begin() + static_cast<std::ptrdiff_t>(i * D),
                                     o.begin() + static_cast<std::ptrdiff_t>((i + 1) * D));
        const std::vector<double> want(ref.begin(), ref.end());
        // atol scaled by the row's RMS: late rows average many keys and are small,
        // so a fixed atol would accept a kernel that drops a whole key tile.
        reference::check_rows_close(got, want, D, tol,
                                    shape() + ", batch " + std::to_string(b) + ", query head " + std::to_string(hq) +
                                        ", row " + std::to_string(i) + " (elements are head_dim indices)");
      }
    }
  }

  std::vector<float> output_as_float() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(out_.get(), r_.dtype, q_elems_, ctx_.stream);
  }
  void set_fault_injection(bool on) override { fault_ = on; }

 private:
  std::string shape() const {
    std::ostringstream os;
    os << "prefill attention (" << (blas_ ? "cuBLAS" : "flash") << ") " << to_string(r_.dtype)
       << " B=" << r_.prefill.B << " S=" << r_.prefill.S << " Hq=" << r_.prefill.Hq << " Hkv=" << r_.prefill.Hkv
       << " D=" << r_.prefill.D;
    return os.str();
  }

  Context& ctx_;
  OpRequest r_;
  bool blas_;
  bool fault_ = false;
  std::size_t q_elems_ = 0, kv_elems_ = 0;
  DeviceBuffer q_, k_, v_, out_, scores_;
  PrefillAttentionParams p_;
};

bool attention_dtype(DType t) { return t == DType::bf16 || t == DType::fp16; }

}  // namespace

bool attention_op_implemented(OpKind kind, DType dtype, Impl impl) {
  switch (kind) {
    case OpKind::decode_attention:
    case OpKind::decode_attention_paged:
    case OpKind::kv_append:
    case OpKind::kv_append_paged: return attention_dtype(dtype) && impl == Impl::own;
    case OpKind::prefill_attention: return attention_dtype(dtype);
    default: return false;
  }
}

std::unique_ptr<PreparedOp> make_attention_op(Context& ctx, const OpRequest& r) {
  if (!attention_dtype(r.dtype))
    throw Unsupported(std::string(to_string(r.kind)) + ": dtype " + std::string(to_string(r.dtype)) +
                      " is not supported on CUDA; use bf16 or fp16");
  if (r.impl == Impl::blas && r.kind != OpKind::prefill_attention)
    throw Unsupported(std::string(to_string(r.kind)) + " has no cuBLAS implementation; use impl own");
  switch (r.kind) {
    case OpKind::decode_attention: return std::make_unique<DecodeAttentionOp>(ctx, r, false);
    case OpKind::decode_attention_paged: return std::make_unique<DecodeAttentionOp>(ctx, r, true);
    case OpKind::kv_append: return std::make_unique<KvAppendOp>(ctx, r, false);
    case OpKind::kv_append_paged: return std::make_unique<KvAppendOp>(ctx, r, true);
    case OpKind::prefill_attention: return std::make_unique<PrefillAttentionOp>(ctx, r);
    default: break;
  }
  throw std::logic_error("make_attention_op: " + std::string(to_string(r.kind)) + " is not a KV-cache or attention op");
}

}  // namespace phasebench::cuda
