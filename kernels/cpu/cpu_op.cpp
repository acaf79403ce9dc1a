// The CPU operations' shared parts (cpu_op.hpp): host buffers, the random fill,
// cache eviction and verification sampling.
#include "cpu/cpu_op.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/numeric.hpp"
#include "cpu/reference.hpp"
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

void fill(HostBuffer& buf, DType t, std::uint64_t n, std::uint64_t seed, float scale) {
  const std::uint64_t e = element_bytes(t);
  const std::int64_t chunks = static_cast<std::int64_t>((n + 65535) / 65536);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::uint64_t i0 = static_cast<std::uint64_t>(c) * 65536, i1 = std::min(n, i0 + 65536);
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

void CpuOp::evict() const {
  for (const auto& [p, n] : regions_) evict_range(p, n);
}

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
