// Weight-only int4 decode GEMV on the CPU: Y[M,N] = X[M,K] W^T with W in the
// packed int4 layout of ops/linear_int4.hpp, w = (q - z) * s per group of G.
// Per row and group: sum_k w_k x_k = s * (sum_k q_k x_k - z * sum_k x_k), so the
// group's q are widened to floats once (into L1) and dotted with each of the M
// rows of X, whose per-group sums are computed once per call. Threads split W's
// rows so every packed byte is streamed from memory once. With AVX-512 the
// widening, the dequantization and the FMAs stay in registers (row_avx512<M>).
#include <omp.h>

#include <array>
#include <cstring>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/linear_int4.hpp"
#include "cpu/cpu_op.hpp"
#include "reference/common.hpp"
#include "reference/linear_int4.hpp"
#include "cpu/simd.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear_int4.hpp"

namespace phasebench::cpu {

namespace {

constexpr std::uint64_t kMaxGroup = 256;

// The G/2 packed bytes of one group as G floats 0..15, in k order.
inline void widen_group(const std::uint8_t* q, float* out, std::uint64_t G) {
  std::uint64_t k = 0;
#ifdef PB_CPU_AVX2
  const __m128i low = _mm_set1_epi8(0x0F);
  for (; k + 32 <= G; k += 32) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k / 2));
    const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
    // Even k in the low nibbles, odd k in the high ones: interleave back to k order.
    const __m128i a = _mm_unpacklo_epi8(lo, hi), c = _mm_unpackhi_epi8(lo, hi);
    _mm256_storeu_ps(out + k, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a)));
    _mm256_storeu_ps(out + k + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8))));
    _mm256_storeu_ps(out + k + 16, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c)));
    _mm256_storeu_ps(out + k + 24, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c, 8))));
  }
#endif
  for (; k < G; k += 2) {
    out[k] = static_cast<float>(q[k / 2] & 0xF);
    out[k + 1] = static_cast<float>(q[k / 2] >> 4);
  }
}

#ifdef __AVX512F__
// AVX-512: 16 packed bytes widen to 16 int32 lanes in one instruction; the low
// nibbles are the even k, the high ones the odd k, so X is stored split the
// same way (xe/xo: per 32-weight chunk, its 16 even and 16 odd elements) and
// every FMA pairs contiguous vectors. M is a template argument so the
// accumulators live in registers; small M keeps several per row (even and odd
// k, two chunks in flight) so the FMA latency is hidden. Two ways to apply the
// scale and zero point (row_for picks by M):
// Fold: the q (as floats) multiply into the rows of X; a group's sums take its
//   scale in one vector FMA at its end and its zero point as s * z * sum(x).
// otherwise: each weight dequantized once, (q - z) * s as one FMA, shared by the M rows.
template <int M, bool Fold>
void row_avx512(const std::uint8_t* qrow, const std::uint16_t* scales, const std::uint8_t* zeros, std::uint64_t n,
                const float* xe, const float* xo, const float* xsum, std::uint64_t K, std::uint64_t G, float* out) {
  constexpr int S = M <= 4 ? 2 : 1;  // chunks in flight, each with its own accumulators
  constexpr bool split = M <= 8;     // even and odd k in separate accumulators
  const std::uint64_t groups = K / G, half = K / 2;
  const __m512i low = _mm512_set1_epi32(0xF);
  const __mmask16 all = 0xFFFF;  // the maskz forms avoid GCC 12's false -Wmaybe-uninitialized on the plain ones
  __m512 ae[M][S], ao[M][S], total[M];
  float zterm[M];
  auto clear = [&] {
    for (int m = 0; m < M; ++m)
      for (int u = 0; u < S; ++u) ae[m][u] = ao[m][u] = _mm512_setzero_ps();
  };
  auto sum_of = [&](int m) {
    __m512 t = split ? _mm512_add_ps(ae[m][0], ao[m][0]) : ae[m][0];
    for (int u = 1; u < S; ++u) t = _mm512_add_ps(t, _mm512_add_ps(ae[m][u], ao[m][u]));
    return t;
  };
  clear();
  for (int m = 0; m < M; ++m) {
    total[m] = _mm512_setzero_ps();
    zterm[m] = 0.f;
  }
  for (std::uint64_t g = 0; g < groups; ++g) {
    const std::uint64_t gi = n * groups + g;
    const float s = numeric::bf16_to_float(scales[gi]);
    const float z = static_cast<float>(numeric::nibble(zeros, gi));
    const __m512 vs = _mm512_set1_ps(s), vzs = _mm512_set1_ps(-z * s);
    if constexpr (Fold) clear();
    auto chunk = [&](std::uint64_t c, int u) {
      const __m512i b = _mm512_maskz_cvtepu8_epi32(all, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qrow + 16 * c)));
      __m512 we = _mm512_maskz_cvtepi32_ps(all, _mm512_and_si512(b, low));
      __m512 wo = _mm512_maskz_cvtepi32_ps(all, _mm512_maskz_srli_epi32(all, b, 4));
      if constexpr (!Fold) {
        we = _mm512_fmadd_ps(we, vs, vzs);
        wo = _mm512_fmadd_ps(wo, vs, vzs);
      }
      for (int m = 0; m < M; ++m) {
        ae[m][u] = _mm512_fmadd_ps(we, _mm512_loadu_ps(xe + m * half + 16 * c), ae[m][u]);
        if constexpr (split)
          ao[m][u] = _mm512_fmadd_ps(wo, _mm512_loadu_ps(xo + m * half + 16 * c), ao[m][u]);
        else
          ae[m][u] = _mm512_fmadd_ps(wo, _mm512_loadu_ps(xo + m * half + 16 * c), ae[m][u]);
      }
    };
    std::uint64_t c = g * G / 32;
    const std::uint64_t end = (g + 1) * G / 32;
    for (; c + S <= end; c += S)
      for (int u = 0; u < S; ++u) chunk(c + static_cast<std::uint64_t>(u), u);
    for (; c < end; ++c) chunk(c, 0);
    if constexpr (Fold)
      for (int m = 0; m < M; ++m) {
        total[m] = _mm512_fmadd_ps(sum_of(m), vs, total[m]);
        zterm[m] += s * z * xsum[static_cast<std::uint64_t>(m) * groups + g];
      }
  }
  alignas(64) float lanes[16];
  for (int m = 0; m < M; ++m) {
    _mm512_store_ps(lanes, Fold ? total[m] : sum_of(m));
    out[m] = simd::hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))) - zterm[m];
  }
}

using RowFn = void (*)(const std::uint8_t*, const std::uint16_t*, const std::uint8_t*, std::uint64_t, const float*,
                       const float*, const float*, std::uint64_t, std::uint64_t, float*);

// Batches of 1 and 2: fold the scale per group (fewest instructions per weight);
// 3 and more: dequantize each weight once and share it across the rows (measured
// faster there on the development VM).
RowFn row_for(std::uint64_t M) {
  static constexpr RowFn fns[kMaxGemvBatch] = {
      row_avx512<1, true>,   row_avx512<2, true>,   row_avx512<3, false>,  row_avx512<4, false>,
      row_avx512<5, false>,  row_avx512<6, false>,  row_avx512<7, false>,  row_avx512<8, false>,
      row_avx512<9, false>,  row_avx512<10, false>, row_avx512<11, false>, row_avx512<12, false>,
      row_avx512<13, false>, row_avx512<14, false>, row_avx512<15, false>, row_avx512<16, false>};
  return fns[M - 1];
}
#endif

}  // namespace

void decode_gemv_int4(const std::uint16_t* X, const std::uint8_t* q, const std::uint16_t* scales,
                      const std::uint8_t* zeros, std::uint16_t* Y, std::uint64_t M, std::uint64_t N, std::uint64_t K,
                      std::uint64_t G) {
  if (M == 0 || M > kMaxGemvBatch)
    throw Unsupported("CPU int4 GEMV handles batch 1 to " + std::to_string(kMaxGemvBatch));
  if (G == 0 || G > kMaxGroup || G % 32 != 0 || K % G != 0)
    throw Unsupported("CPU int4 GEMV needs a group size of 32 to 256 that divides K");
  const std::uint64_t groups = K / G;
  // X is tiny: decode it to fp32 once, with its per-group sums.
  std::vector<float> Xf(M * K), xsum(M * groups, 0.0f);
  for (std::uint64_t i = 0; i < M * K; ++i) Xf[i] = numeric::bf16_to_float(X[i]);
  for (std::uint64_t m = 0; m < M; ++m)
    for (std::uint64_t k = 0; k < K; ++k) xsum[m * groups + k / G] += Xf[m * K + k];
#ifdef __AVX512F__
  // X split into even and odd k per 32-weight chunk, as the packed bytes hold them.
  std::vector<float> xe(M * K / 2), xo(M * K / 2);
  for (std::uint64_t m = 0; m < M; ++m)
    for (std::uint64_t k = 0; k < K; k += 2) {
      xe[m * (K / 2) + k / 2] = Xf[m * K + k];
      xo[m * (K / 2) + k / 2] = Xf[m * K + k + 1];
    }
  const RowFn row = row_for(M);
#pragma omp parallel
  {
    std::array<float, kMaxGemvBatch> out{};
#pragma omp for schedule(dynamic, 16)
    for (std::uint64_t n = 0; n < N; ++n) {
      row(q + n * (K / 2), scales, zeros, n, xe.data(), xo.data(), xsum.data(), K, G, out.data());
      for (std::uint64_t m = 0; m < M; ++m) Y[m * N + n] = numeric::float_to_bf16(out[m]);
    }
  }
#else
#pragma omp parallel
  {
    alignas(32) std::array<float, kMaxGroup> wq{};
    std::array<float, kMaxGemvBatch> acc{};
#pragma omp for schedule(dynamic, 16)
    for (std::uint64_t n = 0; n < N; ++n) {
      acc.fill(0.0f);
      const std::uint8_t* qrow = q + n * (K / 2);
      for (std::uint64_t g = 0; g < groups; ++g) {
        const std::uint64_t gi = n * groups + g;
        const float s = numeric::bf16_to_float(scales[gi]);
        const float z = static_cast<float>(numeric::nibble(zeros, gi));
        widen_group(qrow + g * (G / 2), wq.data(), G);
        for (std::uint64_t m = 0; m < M; ++m)
          acc[m] += s * (simd::dot(wq.data(), Xf.data() + m * K + g * G, G) - z * xsum[m * groups + g]);
      }
      for (std::uint64_t m = 0; m < M; ++m) Y[m * N + n] = numeric::float_to_bf16(acc[m]);
    }
  }
#endif
}

namespace {

// The int4 linear operation on the CPU: packed weights, scales and zeros, bf16 X and Y.
class CpuLinearInt4 final : public CpuOp {
 public:
  explicit CpuLinearInt4(const OpRequest& r)
      : CpuOp(r.footprint_bytes()), r_(r), s_(LinearShape::of(r.shape)), G_(r.options.as<LinearInt4Options>().group) {
    const Int4Layout l{s_.N, s_.K, G_};
    X_ = HostBuffer(mul({s_.M, s_.K, 2}));
    Q_ = HostBuffer(l.q_bytes());
    S_ = HostBuffer(l.scale_bytes());
    Z_ = HostBuffer(l.zero_bytes());
    Y_ = HostBuffer(mul({s_.M, s_.N, 2}));
    fill(X_, DType::bf16, s_.M * s_.K, r.seed + 1);
    reference::fill_int4(Q_.as<std::uint8_t>(), S_.as<std::uint16_t>(), Z_.as<std::uint8_t>(), s_.N, s_.K, G_, r.seed + 2);
    std::memset(Y_.get(), 0, Y_.bytes());
    for (const HostBuffer* b : {&X_, &Q_, &S_, &Z_, &Y_}) track(b->get(), b->bytes());
  }

  void run() override {
    decode_gemv_int4(X_.as<std::uint16_t>(), Q_.as<std::uint8_t>(), S_.as<std::uint16_t>(), Z_.as<std::uint8_t>(),
                     Y_.as<std::uint16_t>(), s_.M, s_.N, s_.K, G_);
  }

  void verify() override {
    run();
    const auto x = reference::to_float(X_.get(), DType::bf16, s_.M * s_.K);
    const auto* y = Y_.as<std::uint16_t>();
    reference::check_int4_linear(
        sample_positions(s_.M, s_.N, 2048, r_.seed), x.data(), Q_.as<std::uint8_t>(), S_.as<std::uint16_t>(),
        Z_.as<std::uint8_t>(), s_.K, G_,
        [&](std::uint64_t m, std::uint64_t n) { return numeric::bf16_to_float(y[m * s_.N + n]); },
        "int4 linear (M=" + std::to_string(s_.M) + " N=" + std::to_string(s_.N) + " K=" + std::to_string(s_.K) +
            " G=" + std::to_string(G_) + ")");
  }

  std::vector<float> output_values() override { return reference::to_float(Y_.get(), DType::bf16, s_.M * s_.N); }

 private:
  OpRequest r_;
  LinearShape s_;
  std::uint64_t G_;
  HostBuffer X_, Q_, S_, Z_, Y_;
};

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(linear_int4) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  registry.add({kLinearInt4, Impl::own, [](DType t, const CpuEnv&) { return t == DType::bf16; }, {},
                [](const OpRequest& r, const CpuEnv&) -> std::optional<std::string> {
                  const auto s = LinearShape::of(r.shape);
                  const auto G = r.options.as<LinearInt4Options>().group;
                  if (s.M == 0 || s.M > kMaxGemvBatch)
                    return "the int4 GEMV handles batch 1 to " + std::to_string(kMaxGemvBatch);
                  if (G % 32 != 0 || G > 256 || s.K % G != 0) return "the int4 GEMV needs a group of 32 to 256 dividing K";
                  return std::nullopt;
                },
                {}, [](CpuEnv&, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
                  return std::make_unique<CpuLinearInt4>(r);
                }});
}
