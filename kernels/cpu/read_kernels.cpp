// The streaming-read kernels of the CPU backend's read ceiling (read_kernels.hpp):
// one template over streams per thread, unrolling and software prefetch, here so
// that they are compiled for this machine's instruction set like the other kernels.
#include "cpu/read_kernels.hpp"

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

template <int S, int U, int PF>
Kernel make() {
  return Kernel{S, U, PF, &xor_streams<S, U, PF>};
}

}  // namespace

const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel> all = {
      make<1, 4, 0>(),   make<1, 8, 0>(),    make<1, 4, 512>(), make<1, 8, 2048>(), make<2, 4, 0>(),
      make<2, 4, 512>(), make<2, 4, 2048>(), make<4, 2, 0>(),   make<4, 4, 512>(),  make<4, 4, 2048>(),
      make<8, 2, 0>(),   make<8, 2, 512>(),
  };
  return all;
}

}  // namespace phasebench::cpu::read
