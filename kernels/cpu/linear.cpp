// Decode GEMV on the CPU: Y[M,N] = X[M,K] W^T for small M (decode batch).
// Memory-bound at small M: the threads split W's rows so each weight row is
// streamed from memory exactly once; the M dot products against it then hit L1/L2.
// Also the linear operation's CPU implementations: this GEMV (own) and OpenBLAS
// (blas: sgemm, or sbgemm for bf16), verified against reference::linear_element.
#include <omp.h>

#include <array>
#include <cstring>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/linear.hpp"
#include "cpu/cpu_op.hpp"
#include "reference/common.hpp"
#include "reference/linear.hpp"
#include "cpu/simd.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

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
  if (M == 0 || M > kMaxGemvBatch)
    throw Unsupported("CPU decode GEMV handles batch 1 to " + std::to_string(kMaxGemvBatch));
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

namespace {

// The linear operation on the CPU: X, W and Y in host memory, run by our GEMV or by OpenBLAS.
class CpuLinear final : public CpuOp {
 public:
  CpuLinear(const OpRequest& r, CpuEnv& env)
      : CpuOp(r.footprint_bytes()), r_(r), s_(LinearShape::of(r.shape)), sbgemm_(env.sbgemm) {
    const auto e = element_bytes(r.dtype);
    X_ = HostBuffer(mul({s_.M, s_.K, e}));
    Y_ = HostBuffer(mul({s_.M, s_.N, e}));
    fill(X_, r.dtype, s_.M * s_.K, r.seed + 1);
    // The weights, read only: shared with the previous point of the same layer.
    W_ = env.filled->get(r.dtype, mul({s_.N, s_.K}), r.seed + 2);
    std::memset(Y_.get(), 0, Y_.bytes());
    if (r.impl == Impl::blas && r.dtype == DType::bf16) Yf_ = HostBuffer(mul({s_.M, s_.N, 4}));
    for (const HostBuffer* b : std::initializer_list<const HostBuffer*>{&X_, W_.get(), &Y_, &Yf_})
      if (b->get()) track(b->get(), b->bytes());
  }

  void run() override {
    const auto M = static_cast<blasint>(s_.M), N = static_cast<blasint>(s_.N), K = static_cast<blasint>(s_.K);
    if (r_.impl == Impl::own) {
      decode_gemv(X_.get(), W_->get(), Y_.get(), s_.M, s_.N, s_.K, r_.dtype);
    } else if (r_.dtype == DType::fp32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X_.as<float>(), K, W_->as<float>(), K, 0.0f,
                  Y_.as<float>(), N);
    } else {
      // bf16 inputs, fp32 output from sbgemm, rounded to bf16 like a bf16 GEMM's epilogue.
      sbgemm_(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X_.get(), K, W_->get(), K, 0.0f, Yf_.as<float>(), N);
      const std::int64_t n = static_cast<std::int64_t>(s_.M * s_.N);
#pragma omp parallel for
      for (std::int64_t i = 0; i < n; ++i) Y_.as<std::uint16_t>()[i] = numeric::float_to_bf16(Yf_.as<float>()[i]);
    }
  }

  void verify() override {
    run();
    const auto e = element_bytes(r_.dtype);
    std::vector<float> got;
    std::vector<double> want, scale;
    for (auto [m, n] : sample_positions(s_.M, s_.N, 2048, r_.seed)) {
      const auto x = reference::to_float(X_.as<unsigned char>() + m * s_.K * e, r_.dtype, s_.K);
      const auto w = reference::to_float(W_->as<unsigned char>() + n * s_.K * e, r_.dtype, s_.K);
      double abs_sum = 0;
      want.push_back(reference::linear_element(x.data(), w.data(), s_.K, 0, 0, &abs_sum));
      scale.push_back(abs_sum);
      got.push_back(reference::to_float(Y_.as<unsigned char>() + (m * s_.N + n) * e, r_.dtype, 1)[0]);
    }
    reference::check_close(got, want, reference::tolerance_for(r_.dtype),
                           "linear (" + std::string(to_string(r_.impl)) + ", M=" + std::to_string(s_.M) +
                               " N=" + std::to_string(s_.N) + " K=" + std::to_string(s_.K) + ")",
                           &scale);
  }

  std::vector<float> output_values() override { return reference::to_float(Y_.get(), r_.dtype, s_.M * s_.N); }

 private:
  OpRequest r_;
  LinearShape s_;
  sbgemm_fn sbgemm_;
  HostBuffer X_, Y_, Yf_;
  std::shared_ptr<const HostBuffer> W_;
};

bool float_type(DType t) { return t == DType::fp32 || t == DType::bf16 || t == DType::fp16; }

std::optional<std::string> blas_dims(const OpRequest& r, const CpuEnv&) {
  const auto s = LinearShape::of(r.shape);
  if (s.M > 0x7fffffff || s.N > 0x7fffffff || s.K > 0x7fffffff) return "a dimension exceeds BLAS's 32-bit integers";
  return std::nullopt;
}

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(linear) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  auto prepare = [](CpuEnv& env, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
    return std::make_unique<CpuLinear>(r, env);
  };
  registry.add({kLinear, Impl::own, [](DType t, const CpuEnv&) { return float_type(t); },
                [](const OpRequest& r) { return LinearShape::of(r.shape).M <= kMaxGemvBatch; },
                [](const OpRequest& r, const CpuEnv&) -> std::optional<std::string> {
                  const auto M = LinearShape::of(r.shape).M;
                  if (M == 0 || M > kMaxGemvBatch)
                    return "the own GEMV handles batch 1 to " + std::to_string(kMaxGemvBatch) + "; use the BLAS row";
                  return std::nullopt;
                },
                {}, prepare});
  registry.add({kLinear, Impl::blas,
                [](DType t, const CpuEnv& env) { return t == DType::fp32 || (t == DType::bf16 && env.sbgemm); }, {},
                blas_dims,
                [](const OpRequest& r, const CpuEnv&) -> std::uint64_t {  // bf16: sbgemm's fp32 output
                  const auto s = LinearShape::of(r.shape);
                  return r.dtype == DType::bf16 ? mul({s.M, s.N, 4}) : 0;
                },
                prepare});
}
