// The CPU backend: host memory, OpenBLAS for the linear layers, own loops for
// GEMV, decode attention and KV append, steady_clock timing with an LLC flush
// for cold-cache points, and measured ceilings (a streaming read and copy well
// beyond the last-level cache, a large SGEMM).
#include <cblas.h>
#include <dlfcn.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <sys/mman.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "backend.hpp"
#include "common/numeric.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cpu/reference.hpp"
#include "cpu/simd.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/nvtx.hpp"

namespace phasebench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// 64-byte aligned host memory.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::uint64_t bytes) : bytes_(bytes) {
    // Large buffers: 2 MiB aligned and backed by transparent huge pages where the
    // kernel allows it, so streaming is not limited by 4 KiB page walks (the same
    // for the ceilings' buffers and the operations', so comparisons stay fair).
    const std::uint64_t align = bytes >= (4ull << 20) ? (2ull << 20) : 64;
    const std::uint64_t rounded = std::max<std::uint64_t>(align, (bytes + align - 1) / align * align);
    ptr_ = std::aligned_alloc(align, rounded);
    if (!ptr_) throw Unsupported("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
    if (align > 64) madvise(ptr_, rounded, MADV_HUGEPAGE);  // advisory: failure only costs speed
  }
  ~HostBuffer() { std::free(ptr_); }
  HostBuffer(HostBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  std::uint64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::uint64_t bytes_ = 0;
};

// Parallel deterministic fill (same values as reference::fill_random).
void fill(HostBuffer& buf, DType t, std::uint64_t n, std::uint64_t seed, float scale = 1.0f) {
  const std::uint64_t e = element_bytes(t);
  const std::int64_t chunks = static_cast<std::int64_t>((n + 65535) / 65536);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::uint64_t i0 = static_cast<std::uint64_t>(c) * 65536, i1 = std::min(n, i0 + 65536);
    // reference::fill_random indexes from 0; offset the seed stream by filling a view.
    for (std::uint64_t i = i0; i < i1; ++i) {
      const float v = numeric::random_value(seed, i, scale);
      unsigned char* dst = buf.as<unsigned char>() + i * e;
      switch (t) {
        case DType::fp32: std::memcpy(dst, &v, 4); break;
        case DType::bf16: {
          const std::uint16_t b = numeric::float_to_bf16(v);
          std::memcpy(dst, &b, 2);
          break;
        }
        case DType::fp16: {
          const std::uint16_t h = numeric::float_to_fp16(v);
          std::memcpy(dst, &h, 2);
          break;
        }
        default: reference::from_float(&v, t, 1, dst);
      }
    }
  }
}

// The last-level cache this CPU uses: the largest of cpu0's caches in sysfs.
// (glibc's _SC_LEVEL3_CACHE_SIZE, only the fallback, can report a whole
// package's L3 on AMD EPYC guests: 256 MiB where a core sees a 32 MiB slice.)
std::uint64_t read_sys_cache_bytes() {
  std::uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    std::uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (s.back() == 'K') v *= 1024;
    if (s.back() == 'M') v *= 1024 * 1024;
    best = std::max(best, v);
  }
  if (best > 0) return best;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::uint64_t>(l3) : 0;
}

std::string cpuinfo_field(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        auto v = line.substr(p + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  return {};
}

std::string slugify(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (std::isalnum(static_cast<unsigned char>(ch)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

using sbgemm_fn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float, const void*,
                           blasint, const void*, blasint, float, float*, blasint);

// OpenBLAS declares cblas_sbgemm in its header even when the library was built
// without bf16 support, so look the symbol up at run time.
sbgemm_fn find_sbgemm() { return reinterpret_cast<sbgemm_fn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm")); }

// Write back and drop every cache line of [p, p + bytes) from all cache levels.
void evict_range(const void* p, std::uint64_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  const auto* c = static_cast<const char*>(p);
  for (std::uint64_t o = 0; o < bytes; o += 64) _mm_clflush(c + o);
  _mm_mfence();
#else
  (void)p;
  (void)bytes;
#endif
}

class CpuOp : public PreparedOp {
 public:
  explicit CpuOp(std::uint64_t footprint) : footprint_(footprint) {}
  std::uint64_t footprint() const { return footprint_; }
  // Cold cache for this op: its own inputs and outputs leave every cache level,
  // at a cost proportional to its footprint (a whole-LLC flush would cost
  // milliseconds per sample and dwarf microsecond operations).
  void evict() const {
    for (const auto& [p, n] : regions_) evict_range(p, n);
  }

 protected:
  void track(const void* p, std::uint64_t bytes) { regions_.emplace_back(p, bytes); }

 private:
  std::uint64_t footprint_;
  std::vector<std::pair<const void*, std::uint64_t>> regions_;
};

// Sample output positions: all when few, else a random set plus both corners.
std::vector<std::pair<std::uint64_t, std::uint64_t>> sample_positions(std::uint64_t rows, std::uint64_t cols,
                                                                      std::uint64_t max_samples, std::uint64_t seed) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> v;
  if (rows * cols <= max_samples) {
    for (std::uint64_t r = 0; r < rows; ++r)
      for (std::uint64_t c = 0; c < cols; ++c) v.emplace_back(r, c);
    return v;
  }
  std::mt19937_64 rng(seed);
  v.emplace_back(0, 0);
  v.emplace_back(rows - 1, cols - 1);
  v.emplace_back(0, cols - 1);
  v.emplace_back(rows - 1, 0);
  while (v.size() < max_samples) v.emplace_back(rng() % rows, rng() % cols);
  return v;
}

std::string shape_str(const LinearShape& s) {
  return "M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K);
}

// ---------------------------------------------------------------- linear ----
class CpuLinear final : public CpuOp {
 public:
  CpuLinear(const OpRequest& r, sbgemm_fn sbgemm)
      : CpuOp(r.footprint_bytes()), r_(r), s_(r.linear), sbgemm_(sbgemm) {
    const auto e = element_bytes(r.dtype);
    X_ = HostBuffer(mul({s_.M, s_.K, e}));
    W_ = HostBuffer(mul({s_.N, s_.K, e}));
    Y_ = HostBuffer(mul({s_.M, s_.N, e}));
    fill(X_, r.dtype, s_.M * s_.K, r.seed + 1);
    fill(W_, r.dtype, s_.N * s_.K, r.seed + 2);
    std::memset(Y_.get(), 0, Y_.bytes());
    if (r.impl == Impl::blas && r.dtype == DType::bf16) Yf_ = HostBuffer(mul({s_.M, s_.N, 4}));
    for (const HostBuffer* b : {&X_, &W_, &Y_, &Yf_})
      if (b->get()) track(b->get(), b->bytes());
  }

  void run() override {
    const auto M = static_cast<blasint>(s_.M), N = static_cast<blasint>(s_.N), K = static_cast<blasint>(s_.K);
    if (r_.impl == Impl::own) {
      cpu::decode_gemv(X_.get(), W_.get(), Y_.get(), s_.M, s_.N, s_.K, r_.dtype);
    } else if (r_.dtype == DType::fp32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X_.as<float>(), K, W_.as<float>(), K, 0.0f,
                  Y_.as<float>(), N);
    } else {
      // bf16 inputs, fp32 output from sbgemm, rounded to bf16 like a bf16 GEMM's epilogue.
      sbgemm_(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X_.get(), K, W_.get(), K, 0.0f, Yf_.as<float>(), N);
      const std::int64_t n = static_cast<std::int64_t>(s_.M * s_.N);
#pragma omp parallel for
      for (std::int64_t i = 0; i < n; ++i) Y_.as<std::uint16_t>()[i] = numeric::float_to_bf16(Yf_.as<float>()[i]);
    }
  }

  void verify() override {
    run();
    const auto e = element_bytes(r_.dtype);
    const auto pos = sample_positions(s_.M, s_.N, 2048, r_.seed);
    std::vector<float> got;
    std::vector<double> want, scale;
    for (auto [m, n] : pos) {
      const auto x = reference::to_float(X_.as<unsigned char>() + m * s_.K * e, r_.dtype, s_.K);
      const auto w = reference::to_float(W_.as<unsigned char>() + n * s_.K * e, r_.dtype, s_.K);
      double abs_sum = 0;
      want.push_back(reference::linear_element(x.data(), w.data(), s_.K, 0, 0, &abs_sum));
      scale.push_back(abs_sum);
      got.push_back(reference::to_float(Y_.as<unsigned char>() + (m * s_.N + n) * e, r_.dtype, 1)[0]);
    }
    reference::check_close(got, want, reference::tolerance_for(r_.dtype),
                           "linear (" + std::string(to_string(r_.impl)) + ", " + shape_str(s_) + ")", &scale);
  }

  std::vector<float> output_values() override { return reference::to_float(Y_.get(), r_.dtype, s_.M * s_.N); }

 private:
  OpRequest r_;
  LinearShape s_;
  sbgemm_fn sbgemm_;
  HostBuffer X_, W_, Y_, Yf_;
};

// ------------------------------------------------------ paged KV helpers ----
// A block table whose logical pages map to a random permutation of physical
// pages, so consecutive pages of a sequence are not adjacent in memory.
std::vector<std::int32_t> scattered_block_table(std::uint64_t B, std::uint64_t pages_per_seq, std::uint64_t seed) {
  std::vector<std::int32_t> bt(B * pages_per_seq);
  std::iota(bt.begin(), bt.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(bt.begin(), bt.end(), rng);
  return bt;
}

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

// ----------------------------------------------------- prefill attention ----
class CpuPrefillAttention final : public CpuOp {
 public:
  explicit CpuPrefillAttention(const OpRequest& r) : CpuOp(r.footprint_bytes()), r_(r), s_(r.prefill) {
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
    cpu::PrefillAttentionArgs a;
    a.q = q_.as<float>();
    a.k = k_.as<float>();
    a.v = v_.as<float>();
    a.out = out_.as<float>();
    a.B = s_.B;
    a.S = s_.S;
    a.Hq = s_.Hq;
    a.Hkv = s_.Hkv;
    a.D = s_.D;
    cpu::prefill_attention(a);
  }

  // Sampled (sequence, query head) pairs, and in each the rows around the
  // kernel's query blocks.
  void verify() override {
    run();
    const std::uint64_t S = s_.S, D = s_.D, G = s_.Hq / s_.Hkv;
    const auto rows = reference::prefill_rows_to_check(S, cpu::kPrefillQueryRows);
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

// ------------------------------------------------------ decode attention ----
class CpuDecodeAttention final : public CpuOp {
 public:
  explicit CpuDecodeAttention(const OpRequest& r) : CpuOp(r.footprint_bytes()), r_(r), s_(r.attention) {
    const auto e = element_bytes(r.dtype);
    paged_ = r.kind == OpKind::decode_attention_paged;
    q_ = HostBuffer(mul({s_.B, s_.Hq, s_.D, e}));
    out_ = HostBuffer(mul({s_.B, s_.Hq, s_.D, e}));
    fill(q_, r.dtype, s_.B * s_.Hq * s_.D, r.seed + 1);
    std::memset(out_.get(), 0, out_.bytes());
    const std::uint64_t n = mul({s_.B, s_.Hkv, s_.L, s_.D}, "KV-cache elements");
    // K and V are generated by logical position, so a paged and a contiguous op
    // with the same seed hold the same data.
    HostBuffer k(n * e), v(n * e);
    fill(k, r.dtype, n, r.seed + 2);
    fill(v, r.dtype, n, r.seed + 3);
    if (!paged_) {
      k_ = std::move(k);
      v_ = std::move(v);
    } else {
      P_ = r.page_size;
      pps_ = pages_per_sequence(s_.L, P_);
      bt_ = scattered_block_table(s_.B, pps_, r.seed + 4);
      const std::uint64_t pool = mul({s_.B * pps_, s_.Hkv, P_, s_.D, e}, "page pool bytes");
      k_ = HostBuffer(pool);
      v_ = HostBuffer(pool);
      std::memset(k_.get(), 0, pool);
      std::memset(v_.get(), 0, pool);
      scatter_to_pages(k.as<unsigned char>(), k_.as<unsigned char>(), bt_, s_.B, s_.Hkv, s_.L, s_.D, P_, pps_, e);
      scatter_to_pages(v.as<unsigned char>(), v_.as<unsigned char>(), bt_, s_.B, s_.Hkv, s_.L, s_.D, P_, pps_, e);
      track(bt_.data(), bt_.size() * sizeof(std::int32_t));
    }
    for (const HostBuffer* b : {&q_, &k_, &v_, &out_}) track(b->get(), b->bytes());
  }

  void run() override {
    cpu::DecodeAttentionArgs a;
    a.q = q_.get();
    a.k = k_.get();
    a.v = v_.get();
    a.out = out_.get();
    a.block_table = paged_ ? bt_.data() : nullptr;
    a.B = s_.B;
    a.Hq = s_.Hq;
    a.Hkv = s_.Hkv;
    a.L = s_.L;
    a.D = s_.D;
    a.page_size = P_;
    a.pages_per_seq = pps_;
    a.t = r_.dtype;
    cpu::decode_attention(a);
  }

  void verify() override {
    run();
    const auto e = element_bytes(r_.dtype);
    const std::uint64_t D = s_.D, group = s_.Hq / s_.Hkv;
    const auto pos = sample_positions(s_.B, s_.Hq, 64, r_.seed);
    std::vector<float> got;
    std::vector<double> want;
    std::vector<float> krow(D), vrow(D), o(D);
    for (auto [b, hq] : pos) {
      const std::uint64_t h = hq / group;
      auto addr = [&](const HostBuffer& base, std::uint64_t l) -> const unsigned char* {
        if (!paged_) return base.as<unsigned char>() + ((b * s_.Hkv + h) * s_.L + l) * D * e;
        const auto page = static_cast<std::uint64_t>(bt_[b * pps_ + l / P_]);
        return base.as<unsigned char>() + ((page * s_.Hkv + h) * P_ + l % P_) * D * e;
      };
      const auto q = reference::to_float(q_.as<unsigned char>() + (b * s_.Hq + hq) * D * e, r_.dtype, D);
      std::vector<float> kbuf, vbuf;
      reference::decode_attention_head(
          q.data(), s_.L, D, 1.0f / std::sqrt(static_cast<float>(D)),
          [&](std::uint64_t l) {
            kbuf = reference::to_float(addr(k_, l), r_.dtype, D);
            return kbuf.data();
          },
          [&](std::uint64_t l) {
            vbuf = reference::to_float(addr(v_, l), r_.dtype, D);
            return vbuf.data();
          },
          o.data());
      const auto out = reference::to_float(out_.as<unsigned char>() + (b * s_.Hq + hq) * D * e, r_.dtype, D);
      for (std::uint64_t d = 0; d < D; ++d) {
        got.push_back(out[d]);
        want.push_back(o[d]);
      }
    }
    reference::check_rows_close(got, want, D, reference::tolerance_for(r_.dtype),
                           std::string(to_string(r_.kind)) + " (B=" + std::to_string(s_.B) + " Hq=" + std::to_string(s_.Hq) +
                               " Hkv=" + std::to_string(s_.Hkv) + " L=" + std::to_string(s_.L) + " D=" + std::to_string(D) + ")");
  }

  std::vector<float> output_values() override { return reference::to_float(out_.get(), r_.dtype, s_.B * s_.Hq * s_.D); }

 private:
  OpRequest r_;
  AttentionShape s_;
  bool paged_ = false;
  std::uint64_t P_ = 0, pps_ = 0;
  std::vector<std::int32_t> bt_;
  HostBuffer q_, k_, v_, out_;
};

// ------------------------------------------------------------- KV append ----
class CpuKvAppend final : public CpuOp {
 public:
  // The bytes it touches (the new rows and their cache slots) decide cold-cache eviction, not the cache's size.
  explicit CpuKvAppend(const OpRequest& r) : CpuOp(r.cost().bytes.total()), r_(r), s_(r.append) {
    const auto e = element_bytes(r.dtype);
    paged_ = r.kind == OpKind::kv_append_paged;
    if (r.append_capacity < s_.S) throw Unsupported("KV append: cache capacity is smaller than the tokens appended");
    P_ = r.page_size;
    pps_ = pages_per_sequence(r.append_capacity, P_);
    cap_ = paged_ ? pps_ * P_ : r.append_capacity;
    pos_ = r.append_capacity - s_.S;  // append at the end of the cache
    const std::uint64_t n_new = mul({s_.B, s_.S, s_.Hkv, s_.D});
    nk_ = HostBuffer(n_new * e);
    nv_ = HostBuffer(n_new * e);
    fill(nk_, r.dtype, n_new, r.seed + 1);
    fill(nv_, r.dtype, n_new, r.seed + 2);
    const std::uint64_t cache = mul({s_.B, s_.Hkv, cap_, s_.D, e}, "KV-cache bytes");
    kc_ = HostBuffer(cache);
    vc_ = HostBuffer(cache);
    std::memset(kc_.get(), 0, cache);  // touch every page now, not inside the timed region
    std::memset(vc_.get(), 0, cache);
    if (paged_) {
      bt_ = scattered_block_table(s_.B, pps_, r.seed + 4);
      track(bt_.data(), bt_.size() * sizeof(std::int32_t));
    }
    track(nk_.get(), nk_.bytes());
    track(nv_.get(), nv_.bytes());
    for_each_slot([&](std::uint64_t, std::uint64_t dst) {
      track(kc_.as<unsigned char>() + dst, s_.D * e);
      track(vc_.as<unsigned char>() + dst, s_.D * e);
    });
  }

  // Calls fn(source byte offset, destination byte offset) for every appended row.
  template <class Fn>
  void for_each_slot(Fn&& fn) const {
    const std::uint64_t row = s_.D * element_bytes(r_.dtype);
    for (std::uint64_t b = 0; b < s_.B; ++b)
      for (std::uint64_t s = 0; s < s_.S; ++s)
        for (std::uint64_t h = 0; h < s_.Hkv; ++h) {
          const std::uint64_t p = pos_ + s;
          std::uint64_t dst;
          if (paged_) {
            const auto page = static_cast<std::uint64_t>(bt_[b * pps_ + p / P_]);
            dst = ((page * s_.Hkv + h) * P_ + p % P_) * row;
          } else {
            dst = ((b * s_.Hkv + h) * cap_ + p) * row;
          }
          fn(((b * s_.S + s) * s_.Hkv + h) * row, dst);
        }
  }

  cpu::KvAppendArgs args() const {
    cpu::KvAppendArgs a;
    a.new_k = nk_.get();
    a.new_v = nv_.get();
    a.k_cache = kc_.get();
    a.v_cache = vc_.get();
    a.block_table = paged_ ? bt_.data() : nullptr;
    a.B = s_.B;
    a.S = s_.S;
    a.Hkv = s_.Hkv;
    a.D = s_.D;
    a.pos = pos_;
    a.capacity = paged_ ? pps_ * P_ : cap_;
    a.page_size = P_;
    a.pages_per_seq = pps_;
    a.element_bytes = element_bytes(r_.dtype);
    return a;
  }

  void run() override { cpu::kv_append(args()); }

  void verify() override {
    run();
    // Every appended row must equal its input, bit for bit.
    const std::uint64_t row = s_.D * element_bytes(r_.dtype);
    for_each_slot([&](std::uint64_t src, std::uint64_t dst) {
      if (std::memcmp(kc_.as<unsigned char>() + dst, nk_.as<unsigned char>() + src, row) != 0 ||
          std::memcmp(vc_.as<unsigned char>() + dst, nv_.as<unsigned char>() + src, row) != 0)
        throw VerificationError(std::string(to_string(r_.kind)) + ": the new row at byte offset " + std::to_string(src) +
                                " was not written to its cache slot (byte offset " + std::to_string(dst) + ")");
    });
  }

 private:
  OpRequest r_;
  KvAppendShape s_;
  bool paged_ = false;
  std::uint64_t P_ = 0, pps_ = 0, cap_ = 0, pos_ = 0;
  std::vector<std::int32_t> bt_;
  HostBuffer nk_, nv_, kc_, vc_;
};

// --------------------------------------------------------------- backend ----
class CpuBackend final : public Backend {
 public:
  CpuBackend() : sbgemm_(find_sbgemm()) {
    info_.backend = "cpu";
    info_.name = cpuinfo_field("model name");
    if (info_.name.empty()) info_.name = "unknown CPU";
    info_.slug = "cpu-" + slugify(info_.name);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    info_.memory_bytes = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
    info_.cache_bytes = read_sys_cache_bytes();
    const int threads = omp_get_max_threads();
    info_.details = {{"threads", threads},
                     {"logical_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
                     {"last_level_cache_bytes", info_.cache_bytes},
                     {"memory_bytes", info_.memory_bytes},
                     {"openblas", openblas_get_config()},
                     {"openblas_threads", openblas_get_num_threads()},
                     {"bf16_gemm", sbgemm_ ? "cblas_sbgemm" : "not available in this OpenBLAS"},
                     {"spec", "no datasheet table for CPUs: only theoretical and measured ceilings"}};
    // Theoretical fp32 peak: cores x clock x FLOPs/cycle of the widest FMA unit.
    const std::string flags = cpuinfo_field("flags");
    const double mhz = std::atof(cpuinfo_field("cpu MHz").c_str());
    int flops_per_cycle = 8;  // SSE: 4-wide mul + add
    std::string isa = "SSE (4-wide mul+add)";
    if (flags.find(" avx512f") != std::string::npos) {
      flops_per_cycle = 64;
      isa = "AVX-512 (2 x 16-wide FMA)";
    } else if (flags.find(" avx2") != std::string::npos && flags.find(" fma") != std::string::npos) {
      flops_per_cycle = 32;
      isa = "AVX2 (2 x 8-wide FMA)";
    }
    info_.details["isa"] = isa;
    info_.details["cpu_mhz"] = mhz;
    if (mhz > 0) {
      const double peak = threads * mhz * 1e6 * flops_per_cycle;
      const std::string m = std::to_string(threads) + " threads x " + std::to_string(static_cast<int>(mhz)) +
                            " MHz x " + std::to_string(flops_per_cycle) + " FLOP/cycle, " + isa;
      for (DType t : {DType::fp32, DType::bf16, DType::fp16}) ceilings_.add_compute(t, {peak, CeilingSource::theoretical, m});
    }
  }

  const DeviceInfo& device() const override { return info_; }
  Ceilings ceilings() const override { return ceilings_; }

  void measure_ceilings(const std::vector<DType>& dtypes) override {
    if (measured_) return;
    measured_ = true;
    // Streaming read and copy over max(512 MiB, 8 x LLC).
    const std::uint64_t bytes = read_buffer_bytes();
    const std::uint64_t n = bytes / sizeof(float);
    HostBuffer a(bytes), b(bytes);
    fill(a, DType::fp32, n, 7);
    std::memset(b.get(), 0, bytes);
    const double read_bw = read_bandwidth(a, 12);
    double best_copy = 1e30;
    for (int rep = 0; rep < 6; ++rep) {
      auto t0 = Clock::now();
      const int T = omp_get_max_threads();
#pragma omp parallel num_threads(T)
      {
        const std::uint64_t per = (bytes / static_cast<std::uint64_t>(T) + 63) / 64 * 64;
        const std::uint64_t o = per * static_cast<std::uint64_t>(omp_get_thread_num());
        if (o < bytes) std::memcpy(b.as<char>() + o, a.as<char>() + o, std::min(per, bytes - o));
      }
      best_copy = std::min(best_copy, seconds_since(t0));
    }
    const std::string size = std::to_string(bytes >> 20) + " MiB";
    ceilings_.add_bandwidth({read_bw, CeilingSource::measured,
                             "streaming read (AVX2 XOR reduction, all threads) of " + size + ", best of 12"});
    ceilings_.add_bandwidth({2.0 * static_cast<double>(bytes) / best_copy, CeilingSource::measured,
                             "memcpy of " + size + " (bytes read + written), best of 6"});
    // SGEMM: 2048^3 (about 17 GFLOP), best of 3 after a warm-up.
    const blasint G = 2048;
    HostBuffer x(G * G * 4), w(G * G * 4), y(G * G * 4);
    fill(x, DType::fp32, G * G, 8);
    fill(w, DType::fp32, G * G, 9);
    double best_gemm = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
      auto t0 = Clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, G, G, G, 1.0f, x.as<float>(), G, w.as<float>(), G, 0.0f,
                  y.as<float>(), G);
      if (rep > 0) best_gemm = std::min(best_gemm, seconds_since(t0));
    }
    const double sgemm = 2.0 * G * G * G / best_gemm;
    ceilings_.add_compute(DType::fp32, {sgemm, CeilingSource::measured, "OpenBLAS sgemm 2048^3, best of 6"});
    for (DType t : dtypes) {
      if (t == DType::bf16 || t == DType::fp16)
        ceilings_.add_compute(t, {sgemm, CeilingSource::measured,
                                  "OpenBLAS sgemm 2048^3: the CPU backend computes " + std::string(to_string(t)) +
                                      " operations in fp32"});
    }
  }

  std::optional<double> paired_read() override {
    // Reads of 4 x LLC (at least 128 MiB: a few ms) taken in turn from a ring
    // of four, so each read finds none of its data in the caches (reading the
    // same 4 x LLC again found part of it in the L3 and measured up to 20% high).
    // Kept from the first call on; filled, so the reads touch real pages.
    const std::uint64_t chunk = std::max<std::uint64_t>(128ull << 20, 4 * info_.cache_bytes);
    if (!pair_buf_.get()) {
      pair_buf_ = HostBuffer(4 * chunk);
      fill(pair_buf_, DType::fp32, pair_buf_.bytes() / 4, 5);
    }
    const auto* p = pair_buf_.as<unsigned char>() + (pair_next_++ % 4) * chunk;
    return read_bandwidth(reinterpret_cast<const std::uint64_t*>(p), chunk, 1);
  }

  std::optional<double> remeasure_read_bandwidth() override {
    if (!measured_) return std::nullopt;
    HostBuffer a(read_buffer_bytes());
    fill(a, DType::fp32, a.bytes() / 4, 7);
    return read_bandwidth(a, 12);
  }

  bool implements(OpKind kind, DType t, Impl impl) const override {
    const bool float_types = t == DType::fp32 || t == DType::bf16 || t == DType::fp16;
    switch (kind) {
      case OpKind::linear:
        if (impl == Impl::own) return float_types;
        return t == DType::fp32 || (t == DType::bf16 && sbgemm_ != nullptr);
      case OpKind::decode_attention:
      case OpKind::decode_attention_paged:
      case OpKind::kv_append:
      case OpKind::kv_append_paged: return impl == Impl::own && float_types;
      case OpKind::prefill_attention: return impl == Impl::own && t == DType::fp32;
      default: return false;
    }
  }

  std::optional<std::string> cannot_run(const OpRequest& r) const override {
    if (!implements(r.kind, r.dtype, r.impl))
      return std::string("the CPU backend has no ") + std::string(to_string(r.impl)) + " " +
             std::string(to_string(r.kind)) + " for " + std::string(to_string(r.dtype)) +
             (r.kind == OpKind::linear && r.dtype == DType::bf16 ? " (this OpenBLAS has no cblas_sbgemm)" : "");
    if (r.kind == OpKind::linear && r.impl == Impl::own && r.linear.M > cpu::kMaxGemvBatch)
      return "the own GEMV handles batch 1 to " + std::to_string(cpu::kMaxGemvBatch) + "; use the BLAS row";
    if (r.kind == OpKind::linear && (r.linear.M > 0x7fffffff || r.linear.N > 0x7fffffff || r.linear.K > 0x7fffffff))
      return "a dimension exceeds BLAS's 32-bit integers";
    if (r.kind == OpKind::prefill_attention) {
      const auto& p = r.prefill;
      if (p.Hkv == 0 || p.Hq % p.Hkv != 0 || p.S == 0 || p.D == 0)
        return "prefill attention needs S, D > 0 and Hq a multiple of Hkv";
      if (p.S > 0x7fffffff || p.Hkv * p.D > 0x7fffffff) return "a dimension exceeds BLAS's 32-bit integers";
    }
    const long avail_pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double avail = static_cast<double>(avail_pages) * static_cast<double>(page);
    const double need = static_cast<double>(r.footprint_bytes()) * (r.kind == OpKind::decode_attention_paged ? 2.0 : 1.0);
    if (need > 0.8 * avail)
      return "needs " + fmt_gib(need) + " of memory, " + fmt_gib(avail) + " available; choose a smaller batch or length";
    return std::nullopt;
  }

  std::unique_ptr<PreparedOp> prepare(const OpRequest& r) override {
    if (auto why = cannot_run(r)) throw Unsupported(*why);
    switch (r.kind) {
      case OpKind::linear: return std::make_unique<CpuLinear>(r, sbgemm_);
      case OpKind::decode_attention:
      case OpKind::decode_attention_paged: return std::make_unique<CpuDecodeAttention>(r);
      case OpKind::kv_append:
      case OpKind::kv_append_paged: return std::make_unique<CpuKvAppend>(r);
      case OpKind::prefill_attention: return std::make_unique<CpuPrefillAttention>(r);
      default: throw Unsupported("the CPU backend does not implement " + std::string(to_string(r.kind)));
    }
  }

  Sample time(PreparedOp& op, const TimingOptions& opts) override {
    auto* cop = dynamic_cast<CpuOp*>(&op);
    // Cold cache: the op's own data leaves the caches before the sample, unless
    // its footprint exceeds 2 x LLC (then what the previous run left cached is
    // its tail, and the op starts from its head: it streams from memory anyway).
    if (opts.cold_cache) {
      if (cop && cop->footprint() < flush_bytes())
        cop->evict();
      else if (!cop)
        flush();
    }
    auto range = nvtx_range(opts.range_name);
    const auto t0 = Clock::now();
    op.run();
    return Sample{seconds_since(t0), 1};
  }

  void profile(PreparedOp& op, const std::string& range_name) override {
    auto range = nvtx_range(range_name);
    op.run();
  }

 private:
  std::uint64_t read_buffer_bytes() const { return std::max<std::uint64_t>(512ull << 20, 8 * info_.cache_bytes); }

  // Streaming read of `buf` by all threads (one contiguous chunk each, XOR-reduced,
  // never latency-bound): bytes/s, best of `reps` (this machine may be shared).
  static double read_bandwidth(const HostBuffer& buf, int reps) {
    return read_bandwidth(buf.as<std::uint64_t>(), buf.bytes(), reps);
  }
  static double read_bandwidth(const std::uint64_t* p, std::uint64_t bytes, int reps) {
    double best = 1e30;
    volatile std::uint64_t sink = 0;
    const std::uint64_t words = bytes / 8;
    for (int rep = 0; rep < reps; ++rep) {
      auto t0 = Clock::now();
      std::uint64_t x = 0;
#pragma omp parallel reduction(^ : x)
      {
        const auto T = static_cast<std::uint64_t>(omp_get_num_threads()), id = static_cast<std::uint64_t>(omp_get_thread_num());
        const std::uint64_t per = (words / T + 3) / 4 * 4, lo = std::min(words, id * per), hi = std::min(words, lo + per);
        x ^= cpu::simd::xor_reduce(p + lo, hi - lo);
      }
      best = std::min(best, seconds_since(t0));
      sink = sink ^ x;
    }
    return static_cast<double>(bytes) / best;
  }

  static std::string fmt_gib(double b) {
    std::ostringstream os;
    os.precision(3);
    os << b / (1024.0 * 1024 * 1024) << " GiB";
    return os.str();
  }
  std::uint64_t flush_bytes() const { return info_.cache_bytes ? 2 * info_.cache_bytes : (256ull << 20); }
  // For ops of another kind: evict by reading a buffer of 2 x LLC (reading leaves
  // clean lines, so the timed op does not pay for writing back the flush's data).
  void flush() {
    if (!flush_.get()) {
      flush_ = HostBuffer(flush_bytes());
      std::memset(flush_.get(), 1, flush_.bytes());
    }
    const std::int64_t n = static_cast<std::int64_t>(flush_.bytes() / 8);
    const auto* p = flush_.as<std::uint64_t>();
    std::uint64_t sum = 0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) sum += p[i];
    flush_sink_ = flush_sink_ + sum;
  }

  DeviceInfo info_;
  Ceilings ceilings_;
  bool measured_ = false;
  sbgemm_fn sbgemm_ = nullptr;
  HostBuffer flush_;
  HostBuffer pair_buf_;  // paired_read()
  std::uint64_t pair_next_ = 0;
  volatile std::uint64_t flush_sink_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace phasebench
