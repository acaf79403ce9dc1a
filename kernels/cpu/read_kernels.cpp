// The streaming-read kernels of the CPU backend's read ceiling (read_kernels.hpp):
// one template over streams per thread, unrolling and software prefetch, here so
// that they are compiled for this machine's instruction set like the other kernels.
#include "cpu/read_kernels.hpp"

#include <omp.h>

#include <algorithm>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace phasebench::cpu::read {

namespace {

// XOR of p[0..words): S streams of whole steps each, read in lockstep, then the
// remainder; U 32-byte loads per stream per step, a prefetch PF bytes ahead.
template <int S, int U, int PF>
std::uint64_t xor_streams(const std::uint64_t* p, std::uint64_t words) {
  std::uint64_t r = 0;
  const std::uint64_t per = words / S / (4 * U) * (4 * U);  // each stream's words, whole steps
#if defined(__AVX2__)
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (std::uint64_t i = 0; i < per; i += 4 * U) {
    for (int s = 0; s < S; ++s) {
      const std::uint64_t* q = p + static_cast<std::uint64_t>(s) * per + i;
      if constexpr (PF > 0) {
        // One prefetch per 64-byte line the step reads (a step is U x 32 bytes).
        for (int l = 0; l < (U + 1) / 2; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(q) + PF + 64 * l, _MM_HINT_T0);
      }
      for (int u = 0; u < U; ++u)
        acc[(s * U + u) & 3] =
            _mm256_xor_si256(acc[(s * U + u) & 3], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 4 * u)));
    }
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_xor_si256(_mm256_xor_si256(acc[0], acc[1]), _mm256_xor_si256(acc[2], acc[3])));
  r = lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
#else
  std::uint64_t a[4] = {0, 0, 0, 0};
  for (std::uint64_t i = 0; i < per; i += 4 * U)
    for (int s = 0; s < S; ++s) {
      const std::uint64_t* q = p + static_cast<std::uint64_t>(s) * per + i;
      if constexpr (PF > 0) __builtin_prefetch(reinterpret_cast<const char*>(q) + PF);
      for (int u = 0; u < 4 * U; ++u) a[u & 3] ^= q[u];
    }
  r = a[0] ^ a[1] ^ a[2] ^ a[3];
#endif
  for (std::uint64_t i = per * S; i < words; ++i) r ^= p[i];
  return r;
}

// Blocks of the dynamic variants: large enough for every stream to run long
// (8 streams of 256 KiB), small enough that a descheduled thread's share is
// taken over (512 MiB is 256 blocks).
constexpr std::uint64_t kBlockBytes = 2ull << 20;

template <int S, int U, int PF>
Kernel make(std::uint64_t block_bytes) {
  return Kernel{S, U, PF, block_bytes, &xor_streams<S, U, PF>};
}

}  // namespace

const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel> all = [] {
    std::vector<Kernel> v;
    for (std::uint64_t b : {std::uint64_t{0}, kBlockBytes}) {
      for (const auto& k : {make<1, 4, 0>(b), make<1, 8, 0>(b), make<1, 4, 512>(b), make<1, 8, 2048>(b),
                            make<2, 4, 0>(b), make<2, 4, 512>(b), make<2, 4, 2048>(b), make<4, 2, 0>(b),
                            make<4, 4, 512>(b), make<4, 4, 2048>(b), make<8, 2, 0>(b), make<8, 2, 512>(b)})
        v.push_back(k);
    }
    return v;
  }();
  return all;
}

std::uint64_t read_all(const Kernel& k, const std::uint64_t* p, std::uint64_t words) {
  std::uint64_t x = 0;
  if (k.block_bytes == 0) {
#pragma omp parallel reduction(^ : x)
    {
      const auto T = static_cast<std::uint64_t>(omp_get_num_threads()), id = static_cast<std::uint64_t>(omp_get_thread_num());
      // Shares of ceil(words / T) rounded up to whole 32-byte vectors; the last may be short.
      const std::uint64_t per = ((words + T - 1) / T + 3) / 4 * 4, lo = std::min(words, id * per),
                          hi = std::min(words, lo + per);
      x ^= k.fn(p + lo, hi - lo);
    }
    return x;
  }
  const std::uint64_t bw = k.block_bytes / 8, blocks = (words + bw - 1) / bw;
#pragma omp parallel for schedule(dynamic, 1) reduction(^ : x)
  for (std::uint64_t b = 0; b < blocks; ++b) x ^= k.fn(p + b * bw, std::min(bw, words - b * bw));
  return x;
}

}  // namespace phasebench::cpu::read
