// KV append on the CPU: copy each new token's K and V rows (D contiguous
// elements) into the cache, contiguous or paged. Pure data movement.
// Also the KV append operations' CPU implementations (contiguous and paged):
// every appended row must equal its input, bit for bit.
#include <cstdint>
#include <cstring>

#include "cpu/kv_append.hpp"
#include "cpu/simd.hpp"
#include "phasebench/error.hpp"
#include "common/paged_kv.hpp"
#include "cpu/cpu_op.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/ops/kv_append.hpp"

namespace phasebench::cpu {

namespace {

// One row into the cache. The rows land one per (sequence, head), each in lines
// of its own, so a plain store first reads every destination line from memory
// (read for ownership) and doubles the traffic; streaming stores write whole
// lines without reading them. Plain memcpy where rows are not whole 32-byte
// vectors at aligned addresses.
inline void copy_row(unsigned char* dst, const unsigned char* src, std::uint64_t bytes) {
#ifdef PB_CPU_AVX2
  if (bytes % 32 == 0 && reinterpret_cast<std::uintptr_t>(dst) % 32 == 0) {
    for (std::uint64_t o = 0; o < bytes; o += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + o),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o)));
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

// Streaming stores are weakly ordered: fence them before the append returns, so
// they are complete (and inside the timed region) when it does.
inline void fence_stores() {
#ifdef PB_CPU_AVX2
  _mm_sfence();
#endif
}

}  // namespace

void kv_append(const KvAppendArgs& a) {
  if (a.pos + a.S > a.capacity) throw Unsupported("KV append past the end of the cache");
  const std::uint64_t row_bytes = a.D * a.element_bytes;
  const std::int64_t rows = static_cast<std::int64_t>(a.B * a.S * a.Hkv);
  const bool paged = a.block_table != nullptr;
  const auto* nk = static_cast<const unsigned char*>(a.new_k);
  const auto* nv = static_cast<const unsigned char*>(a.new_v);
  auto* kc = static_cast<unsigned char*>(a.k_cache);
  auto* vc = static_cast<unsigned char*>(a.v_cache);
// Small appends (a few KiB) are faster on one thread than a parallel region's fork/join.
#pragma omp parallel if (static_cast<std::uint64_t>(rows) * row_bytes > (256u << 10))
  {
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint64_t ur = static_cast<std::uint64_t>(r);
      const std::uint64_t h = ur % a.Hkv, s = (ur / a.Hkv) % a.S, b = ur / (a.Hkv * a.S);
      const std::uint64_t p = a.pos + s;
      std::uint64_t dst_row;
      if (paged) {
        const auto page = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + p / a.page_size]);
        dst_row = (page * a.Hkv + h) * a.page_size + p % a.page_size;
      } else {
        dst_row = (b * a.Hkv + h) * a.capacity + p;
      }
      copy_row(kc + dst_row * row_bytes, nk + ur * row_bytes, row_bytes);
      copy_row(vc + dst_row * row_bytes, nv + ur * row_bytes, row_bytes);
    }
    fence_stores();  // each thread its own stores
  }
}

namespace {

class CpuKvAppend final : public CpuOp {
 public:
  // The bytes it touches (the new rows and their cache slots) decide cold-cache eviction, not the cache's size.
  explicit CpuKvAppend(const OpRequest& r)
      : CpuOp(r.cost().bytes.total()), r_(r), s_(KvAppendShape::of(r.shape)), paged_(r.kind == kKvAppendPaged) {
    const auto e = element_bytes(r.dtype);
    const auto capacity = r.options.as<KvAppendOptions>().capacity;
    if (paged_) pages_ = BlockTable(r, r.options.as<KvAppendOptions>().page_size, s_.B, capacity);
    cap_ = paged_ ? pages_.pages_per_seq * pages_.page_size : capacity;
    pos_ = capacity - s_.S;  // append at the end of the cache
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
      track(pages_.host.data(), pages_.host.size() * sizeof(std::int32_t));
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
            const auto page = static_cast<std::uint64_t>(pages_.host[b * pages_.pages_per_seq + p / pages_.page_size]);
            dst = ((page * s_.Hkv + h) * pages_.page_size + p % pages_.page_size) * row;
          } else {
            dst = ((b * s_.Hkv + h) * cap_ + p) * row;
          }
          fn(((b * s_.S + s) * s_.Hkv + h) * row, dst);
        }
  }

  void run() override {
    kv_append({.new_k = nk_.get(), .new_v = nv_.get(), .k_cache = kc_.get(), .v_cache = vc_.get(),
               .block_table = pages_.table(), .B = s_.B, .S = s_.S, .Hkv = s_.Hkv, .D = s_.D, .pos = pos_,
               .capacity = cap_, .page_size = pages_.page_size, .pages_per_seq = pages_.pages_per_seq,
               .element_bytes = element_bytes(r_.dtype)});
  }

  void verify() override {
    run();
    const std::uint64_t row = s_.D * element_bytes(r_.dtype);
    for_each_slot([&](std::uint64_t src, std::uint64_t dst) {
      if (std::memcmp(kc_.as<unsigned char>() + dst, nk_.as<unsigned char>() + src, row) != 0 ||
          std::memcmp(vc_.as<unsigned char>() + dst, nv_.as<unsigned char>() + src, row) != 0)
        throw VerificationError(r_.kind + ": the new row at byte offset " + std::to_string(src) +
                                " was not written to its cache slot (byte offset " + std::to_string(dst) + ")");
    });
  }

 private:
  OpRequest r_;
  KvAppendShape s_;
  bool paged_ = false;
  std::uint64_t cap_ = 0, pos_ = 0;
  BlockTable pages_;  // paged only
  HostBuffer nk_, nv_, kc_, vc_;
};

bool float_type(DType t) { return t == DType::fp32 || t == DType::bf16 || t == DType::fp16; }

std::optional<std::string> shape_limits(const OpRequest& r, const CpuEnv&) {
  if (r.options.as<KvAppendOptions>().capacity < r.shape["S"]) return "KV append: cache capacity is smaller than the tokens appended";
  return std::nullopt;
}

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(kv_append) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  auto prepare = [](CpuEnv&, const OpRequest& r) -> std::unique_ptr<PreparedOp> { return std::make_unique<CpuKvAppend>(r); };
  auto types = [](DType t, const CpuEnv&) { return float_type(t); };
  registry.add({kKvAppend, Impl::own, types, {}, shape_limits, {}, prepare});
  registry.add({kKvAppendPaged, Impl::own, types, {}, shape_limits, {}, prepare});
}

