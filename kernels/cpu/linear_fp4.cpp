// Weight-only FP4 decode GEMV on the CPU: Y[M,N] = X[M,K] W^T with W in the packed
// layout of ops/linear_fp4.hpp (e2m1 values, an e8m0 scale per 32 (mxfp4) or an
// e4m3 scale per 16 and an fp32 tensor scale (nvfp4)).
// Threads split W's rows, so every packed byte is streamed from memory once. A
// row is widened a chunk of kChunk weights at a time into floats in L1 (e2m1 *
// block scale, exact in fp32): with AVX2 eight nibbles at once, the e2m1
// magnitudes looked up by one permute of an 8-float table and the sign bit
// moved into place; then the chunk is dotted with the M rows of X (four at a
// time, each widened weight loaded once for four FMAs). The tensor scale
// multiplies each output once.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/cpu_op.hpp"
#include "cpu/linear_fp4.hpp"
#include "cpu/simd.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "reference/common.hpp"
#include "reference/linear_fp4.hpp"

namespace phasebench::cpu {

namespace {

constexpr std::uint64_t kChunk = 1024;  // weights widened at a time: 4 KiB of floats

inline float block_scale(DType format, std::uint8_t code) {
  return format == DType::nvfp4 ? numeric::fp8e4m3_to_float(code) : numeric::e8m0_to_float(code);
}

// Weights [k0, k0 + n) of one row (packed bytes `row`, the row's block scales
// `scales`), n a multiple of the block, as floats e2m1 * block scale.
void widen(const std::uint8_t* row, const std::uint8_t* scales, DType format, std::uint64_t block, std::uint64_t k0,
           std::uint64_t n, float* out) {
  for (std::uint64_t b = k0; b < k0 + n; b += block) {
    const float s = block_scale(format, scales[b / block]);
    std::uint64_t k = b;
#ifdef PB_CPU_AVX2
    const __m256 table = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256 vs = _mm256_set1_ps(s);
    for (; k < b + block; k += 8) {
      std::uint32_t word;
      std::memcpy(&word, row + k / 2, 4);  // weights k .. k+7, k in the low nibble of its byte
      const __m256i code = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts);
      const __m256 mag = _mm256_permutevar8x32_ps(table, code);  // the low 3 bits index the table
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(8)), 28);
      _mm256_storeu_ps(out + (k - k0), _mm256_mul_ps(_mm256_xor_ps(mag, _mm256_castsi256_ps(sign)), vs));
    }
#endif
    for (; k < b + block; ++k) out[k - k0] = numeric::fp4e2m1_to_float(numeric::nibble(row, k)) * s;
  }
}

}  // namespace

void decode_gemv_fp4(const std::uint16_t* X, const Fp4Layout& l, const std::uint8_t* values,
                     const std::uint8_t* scales, float tensor_scale, std::uint16_t* Y, std::uint64_t M) {
  if (M == 0 || M > kMaxGemvBatch)
    throw Unsupported("CPU FP4 GEMV handles batch 1 to " + std::to_string(kMaxGemvBatch));
  const std::uint64_t N = l.N, K = l.K, B = l.block();
  if (K % B != 0) throw Unsupported("CPU FP4 GEMV needs K a multiple of the format's block");
  // X is tiny: decode it to fp32 once.
  std::vector<float> Xf(M * K);
  for (std::uint64_t i = 0; i < M * K; ++i) Xf[i] = numeric::bf16_to_float(X[i]);
#pragma omp parallel
  {
    alignas(32) std::array<float, kChunk> w{};
    std::array<float, kMaxGemvBatch> acc{};
#pragma omp for schedule(dynamic, 16)
    for (std::uint64_t n = 0; n < N; ++n) {
      acc.fill(0.0f);
      const std::uint8_t* row = values + n * (K / 2);
      const std::uint8_t* srow = scales + n * (K / B);
      for (std::uint64_t k0 = 0; k0 < K; k0 += kChunk) {
        const std::uint64_t len = std::min(kChunk, K - k0);  // a multiple of the block (kChunk is)
        widen(row, srow, l.format, B, k0, len, w.data());
        std::uint64_t m = 0;
        for (; m + 4 <= M; m += 4) {
          float r[4];
          simd::dot4(w.data(), Xf.data() + m * K + k0, Xf.data() + (m + 1) * K + k0, Xf.data() + (m + 2) * K + k0,
                     Xf.data() + (m + 3) * K + k0, len, r);
          for (int j = 0; j < 4; ++j) acc[m + static_cast<std::uint64_t>(j)] += r[j];
        }
        for (; m < M; ++m) acc[m] += simd::dot(w.data(), Xf.data() + m * K + k0, len);
      }
      for (std::uint64_t m = 0; m < M; ++m) Y[m * N + n] = numeric::float_to_bf16(acc[m] * tensor_scale);
    }
  }
}

namespace {

// The FP4 linear operation on the CPU: packed values, block scales and the tensor
// scale as the reference fills them, bf16 X and Y.
class CpuLinearFp4 final : public CpuOp {
 public:
  explicit CpuLinearFp4(const OpRequest& r)
      : CpuOp(r.footprint_bytes()),
        r_(r),
        s_(LinearShape::of(r.shape)),
        l_{r.options.as<LinearFp4Options>().format, s_.N, s_.K} {
    X_ = HostBuffer(mul({s_.M, s_.K, 2}));
    V_ = HostBuffer(l_.value_bytes());
    S_ = HostBuffer(l_.scale_bytes());
    Y_ = HostBuffer(mul({s_.M, s_.N, 2}));
    fill(X_, DType::bf16, s_.M * s_.K, r.seed + 1);
    reference::fill_fp4(l_, V_.as<std::uint8_t>(), S_.as<std::uint8_t>(), &tensor_scale_, r.seed + 2);
    std::memset(Y_.get(), 0, Y_.bytes());
    for (const HostBuffer* b : {&X_, &V_, &S_, &Y_}) track(b->get(), b->bytes());
  }

  void run() override {
    decode_gemv_fp4(X_.as<std::uint16_t>(), l_, V_.as<std::uint8_t>(), S_.as<std::uint8_t>(), tensor_scale_,
                    Y_.as<std::uint16_t>(), s_.M);
  }

  void verify() override {
    run();
    const auto x = reference::to_float(X_.get(), DType::bf16, s_.M * s_.K);
    const auto* y = Y_.as<std::uint16_t>();
    reference::check_fp4_linear(
        sample_positions(s_.M, s_.N, 2048, r_.seed), x.data(), l_, V_.as<std::uint8_t>(), S_.as<std::uint8_t>(),
        tensor_scale_, [&](std::uint64_t m, std::uint64_t n) { return numeric::bf16_to_float(y[m * s_.N + n]); },
        std::string(to_string(l_.format)) + " linear (M=" + std::to_string(s_.M) + " N=" + std::to_string(s_.N) +
            " K=" + std::to_string(s_.K) + ")");
  }

  std::vector<float> output_values() override { return reference::to_float(Y_.get(), DType::bf16, s_.M * s_.N); }

 private:
  OpRequest r_;
  LinearShape s_;
  Fp4Layout l_;
  float tensor_scale_ = 1.0f;
  HostBuffer X_, V_, S_, Y_;
};

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(linear_fp4) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  registry.add({kLinearFp4, Impl::own, [](DType t, const CpuEnv&) { return t == DType::bf16; }, {},
                [](const OpRequest& r, const CpuEnv&) -> std::optional<std::string> {
                  const auto s = LinearShape::of(r.shape);
                  const auto format = r.options.as<LinearFp4Options>().format;
                  if (s.M == 0 || s.M > kMaxGemvBatch)
                    return "the FP4 GEMV handles batch 1 to " + std::to_string(kMaxGemvBatch);
                  if (format != DType::mxfp4 && format != DType::nvfp4) return "the FP4 GEMV takes mxfp4 or nvfp4";
                  if (s.K % block_scaling(format)->block != 0)
                    return "the FP4 GEMV needs K a multiple of the format's block";
                  return std::nullopt;
                },
                {}, [](CpuEnv&, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
                  return std::make_unique<CpuLinearFp4>(r);
                }});
}
