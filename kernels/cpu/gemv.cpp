// Decode GEMV on the CPU: Y[M,N] = X[M,K] W^T for small M (decode batch).
// Memory-bound at small M: the threads split W's rows so each weight row is
// streamed from memory exactly once; the M dot products against it then hit L1/L2.
#include <omp.h>

#include <array>
#include <cstring>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cpu/simd.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cpu {

namespace {

// Rows n0..n1 of W against M rows of X (already fp32). X rows go four at a time
// so each weight vector, once loaded, feeds four FMAs; W is streamed from memory
// once and re-read from cache at most ceil(M/4) times.
template <class WT>
void rows(const float* Xf, const WT* W, float* acc_out, std::uint64_t M, std::uint64_t n0, std::uint64_t n1,
          std::uint64_t K) {
  const std::uint64_t nr = n1 - n0;
  for (std::uint64_t n = n0; n < n1; ++n) {
    const WT* w = W + n * K;
    std::uint64_t m = 0;
    for (; m + 4 <= M; m += 4) {
      const float* x0 = Xf + m * K;
      float r[4];
      simd::dot4(w, x0, x0 + K, x0 + 2 * K, x0 + 3 * K, K, r);
      for (int i = 0; i < 4; ++i) acc_out[(m + static_cast<std::uint64_t>(i)) * nr + (n - n0)] = r[i];
    }
    if (M - m == 1) {
      acc_out[m * nr + (n - n0)] = simd::dot(w, Xf + m * K, K);
    } else if (m < M) {
      // Two or three rows left: one pass over the weight row with the last row
      // repeated, so W is not re-read from cache per row.
      const float* x[4];
      for (std::uint64_t i = 0; i < 4; ++i) x[i] = Xf + std::min(m + i, M - 1) * K;
      float r[4];
      simd::dot4(w, x[0], x[1], x[2], x[3], K, r);
      for (std::uint64_t i = 0; m + i < M; ++i) acc_out[(m + i) * nr + (n - n0)] = r[i];
    }
  }
}

// fp16 weights have no cheap widening on AVX2 without F16C plumbing; they take
// the portable path (the CPU backend's fp16 is for completeness, not speed).
void rows_fp16(const float* Xf, const std::uint16_t* W, float* acc_out, std::uint64_t M, std::uint64_t n0,
               std::uint64_t n1, std::uint64_t K) {
  const std::uint64_t nr = n1 - n0;
  std::vector<float> wf(K);
  for (std::uint64_t n = n0; n < n1; ++n) {
    for (std::uint64_t k = 0; k < K; ++k) wf[k] = numeric::fp16_to_float(W[n * K + k]);
    for (std::uint64_t m = 0; m < M; ++m) acc_out[m * nr + (n - n0)] = simd::dot(wf.data(), Xf + m * K, K);
  }
}

}  // namespace

void decode_gemv(const void* X, const void* W, void* Y, std::uint64_t M, std::uint64_t N, std::uint64_t K, DType t) {
  if (M == 0 || M > kMaxGemvBatch) throw Unsupported("CPU decode GEMV handles batch 1 to 16");
  // X is tiny (M x K): decode it to fp32 once, shared by all threads.
  std::vector<float> Xf(M * K);
  if (t == DType::fp32) {
    std::memcpy(Xf.data(), X, M * K * sizeof(float));
  } else if (t == DType::bf16) {
    for (std::uint64_t i = 0; i < M * K; ++i) Xf[i] = numeric::bf16_to_float(static_cast<const std::uint16_t*>(X)[i]);
  } else if (t == DType::fp16) {
    for (std::uint64_t i = 0; i < M * K; ++i) Xf[i] = numeric::fp16_to_float(static_cast<const std::uint16_t*>(X)[i]);
  } else {
    throw Unsupported("CPU decode GEMV supports fp32, bf16 and fp16");
  }
  // Blocks of rows, handed out dynamically; each block writes its own slice of Y.
  constexpr std::uint64_t kRowsPerBlock = 64;
  const std::uint64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
#pragma omp parallel
  {
    std::array<float, kMaxGemvBatch * kRowsPerBlock> acc{};
#pragma omp for schedule(dynamic, 4)
    for (std::uint64_t blk = 0; blk < blocks; ++blk) {
      const std::uint64_t n0 = blk * kRowsPerBlock, n1 = std::min(N, n0 + kRowsPerBlock), nr = n1 - n0;
      if (t == DType::fp32)
        rows(Xf.data(), static_cast<const float*>(W), acc.data(), M, n0, n1, K);
      else if (t == DType::bf16)
        rows(Xf.data(), static_cast<const std::uint16_t*>(W), acc.data(), M, n0, n1, K);
      else
        rows_fp16(Xf.data(), static_cast<const std::uint16_t*>(W), acc.data(), M, n0, n1, K);
      for (std::uint64_t m = 0; m < M; ++m)
        for (std::uint64_t j = 0; j < nr; ++j) {
          const float v = acc[m * nr + j];
          const std::uint64_t o = m * N + n0 + j;
          if (t == DType::fp32)
            static_cast<float*>(Y)[o] = v;
          else if (t == DType::bf16)
            static_cast<std::uint16_t*>(Y)[o] = numeric::float_to_bf16(v);
          else
            static_cast<std::uint16_t*>(Y)[o] = numeric::float_to_fp16(v);
        }
    }
  }
}

}  // namespace phasebench::cpu
