// The CPU operations' shared parts (cpu_op.hpp): host buffers, the random fill,
// cache eviction and verification sampling.
#include "cpu/cpu_op.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/numeric.hpp"
#include "common/paged_kv.hpp"
#include "reference/common.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cpu {

HostBuffer::HostBuffer(std::uint64_t bytes) : bytes_(bytes) {
  // Large buffers: 2 MiB aligned and backed by transparent huge pages where the
  // kernel allows it, so streaming is not limited by 4 KiB page walks (the same
  // for the ceilings' buffers and the operations', so comparisons stay fair).
  const std::uint64_t align = bytes >= (4ull << 20) ? (2ull << 20) : 64;
  const std::uint64_t rounded = std::max<std::uint64_t>(align, (bytes + align - 1) / align * align);
  ptr_ = std::aligned_alloc(align, rounded);
  if (!ptr_) throw Unsupported("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  if (align > 64) madvise(ptr_, rounded, MADV_HUGEPAGE);  // advisory: failure only costs speed
}

HostBuffer::~HostBuffer() { std::free(ptr_); }

HostBuffer::HostBuffer(HostBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

namespace {

// One chunk of the fill, per element type, so the loop has no branch and vectorises.
template <class Store>
void fill_chunk(unsigned char* dst, std::uint64_t i0, std::uint64_t i1, std::uint64_t seed, float scale, Store store) {
  for (std::uint64_t i = i0; i < i1; ++i) store(dst, i, numeric::random_value(seed, i, scale));
}

}  // namespace

void fill(HostBuffer& buf, DType t, std::uint64_t n, std::uint64_t seed, float scale) {
  const std::int64_t chunks = static_cast<std::int64_t>((n + 65535) / 65536);
  auto* dst = buf.as<unsigned char>();
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::uint64_t i0 = static_cast<std::uint64_t>(c) * 65536, i1 = std::min(n, i0 + 65536);
    switch (t) {
      case DType::fp32:
        fill_chunk(dst, i0, i1, seed, scale, [](unsigned char* d, std::uint64_t i, float v) { reinterpret_cast<float*>(d)[i] = v; });
        break;
      case DType::bf16:
        fill_chunk(dst, i0, i1, seed, scale, [](unsigned char* d, std::uint64_t i, float v) {
          reinterpret_cast<std::uint16_t*>(d)[i] = numeric::float_to_bf16(v);
        });
        break;
      case DType::fp16:
        fill_chunk(dst, i0, i1, seed, scale, [](unsigned char* d, std::uint64_t i, float v) {
          reinterpret_cast<std::uint16_t*>(d)[i] = numeric::float_to_fp16(v);
        });
        break;
      default: {
        const std::uint64_t e = element_bytes(t);
        fill_chunk(dst, i0, i1, seed, scale, [t, e](unsigned char* d, std::uint64_t i, float v) { reference::from_float(&v, t, 1, d + i * e); });
      }
    }
  }
}

std::shared_ptr<const HostBuffer> FilledCache::get(DType t, std::uint64_t n, std::uint64_t seed, float scale) {
  const std::uint64_t bytes = n * element_bytes(t);
  if (buf_ && t == t_ && n == n_ && seed == seed_ && scale == scale_) return buf_;
  auto b = std::make_shared<HostBuffer>(bytes);
  fill(*b, t, n, seed, scale);
  if (bytes < kMinBytes) return b;
  buf_.reset();  // the previous point's op is gone: its memory goes back first
  buf_ = std::move(b);
  t_ = t;
  n_ = n;
  seed_ = seed;
  scale_ = scale;
  return buf_;
}

#if defined(__x86_64__) || defined(__i386__)
namespace {

// clflushopt (Skylake and later, Zen): the same eviction as clflush but not
// ordered against other flushes, so they overlap: 470 MB take 0.02 s instead of
// 1.3 s with clflush on a Xeon VM, which made eviction most of a large point's
// sampling time.
bool has_clflushopt() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23)) != 0;
}

__attribute__((target("clflushopt"))) void evict_with_clflushopt(const char* c, std::uint64_t bytes) {
  for (std::uint64_t o = 0; o < bytes; o += 64) _mm_clflushopt(const_cast<char*>(c + o));  // the intrinsic takes void*; nothing is written
}

}  // namespace
#endif

void evict_range(const void* p, std::uint64_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool opt = has_clflushopt();
  const auto* c = static_cast<const char*>(p);
  if (opt)
    evict_with_clflushopt(c, bytes);
  else
    for (std::uint64_t o = 0; o < bytes; o += 64) _mm_clflush(c + o);
  _mm_mfence();  // every flush done before the timed region starts
#else
  (void)p;
  (void)bytes;
#endif
}

void CpuOp::evict() const {
  for (const auto& [p, n] : regions_) evict_range(p, n);
}

BlockTable::BlockTable(const OpRequest& r, std::uint64_t page, std::uint64_t B, std::uint64_t tokens)
    : page_size(page),
      pages_per_seq(pages_per_sequence(tokens, page_size)),
      host(scattered_block_table(B, pages_per_seq, r.seed + 4)) {}

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

}  // namespace phasebench::cpu
