// Tests of pb_emu's cuBLAS and cuBLASLt (kernels/cuda_emu/cublas.cpp): results against
// hand loops for the types and layouts phasebench uses, every argument check's status
// and message, and stream ordering (work runs when its stream is waited for; graphs replay it).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/numeric.hpp"

namespace {

namespace num = phasebench::numeric;

std::size_t type_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 1;
  }
}

// One element of type `t` at `p`, as float.
float load(const unsigned char* p, cudaDataType t) {
  std::uint16_t h = 0;
  float f = 0;
  switch (t) {
    case CUDA_R_32F: std::memcpy(&f, p, 4); return f;
    case CUDA_R_16F: std::memcpy(&h, p, 2); return num::fp16_to_float(h);
    case CUDA_R_16BF: std::memcpy(&h, p, 2); return num::bf16_to_float(h);
    default: return num::fp8e4m3_to_float(*p);
  }
}
void save(unsigned char* p, cudaDataType t, float v) {
  std::uint16_t h = 0;
  switch (t) {
    case CUDA_R_32F: std::memcpy(p, &v, 4); return;
    case CUDA_R_16F: h = num::float_to_fp16(v); std::memcpy(p, &h, 2); return;
    case CUDA_R_16BF: h = num::float_to_bf16(v); std::memcpy(p, &h, 2); return;
    default: *p = num::float_to_fp8e4m3(v); return;
  }
}
float quantize(float v, cudaDataType t) {
  unsigned char b[4];
  save(b, t, v);
  return load(b, t);
}

// A batch of column-major matrices as stored on the device: its logical values,
// and the bytes (exactly as many as the last element needs, so that an
// over-read is an error), with `pad` between columns and between matrices.
struct Stored {
  cudaDataType type = CUDA_R_32F;
  std::int64_t rows = 0, cols = 0, ld = 0, stride = 0;
  int batch = 1;
  std::vector<float> v;  // (b, r, c) at (b * cols + c) * rows + r

  Stored(cudaDataType t, std::int64_t r, std::int64_t c, std::int64_t ld_, int batch_ = 1, std::int64_t stride_ = -1)
      : type(t), rows(r), cols(c), ld(ld_), stride(stride_ < 0 ? ld_ * c : stride_), batch(batch_),
        v(static_cast<std::size_t>(r * c * batch_)) {}
  float& at(int b, std::int64_t r, std::int64_t c) { return v[static_cast<std::size_t>((b * cols + c) * rows + r)]; }
  float at(int b, std::int64_t r, std::int64_t c) const { return v[static_cast<std::size_t>((b * cols + c) * rows + r)]; }
  std::size_t offset(int b, std::int64_t r, std::int64_t c) const {
    return static_cast<std::size_t>(b * stride + c * ld + r) * type_size(type);
  }
  std::size_t bytes() const {
    return rows == 0 || cols == 0 ? 0 : offset(batch - 1, rows - 1, cols - 1) + type_size(type);
  }
  // Random values, rounded to the type (`integers`: small integers, which every
  // product and sum here represents exactly).
  void fill(std::uint64_t seed, bool integers, float scale = 1.0f) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float x = integers ? static_cast<float>(static_cast<int>(num::mix64(seed * 7919 + i) % 9) - 4)
                               : num::random_value(seed, i, scale);
      v[i] = quantize(x, type);
    }
    if (stride == 0)  // one matrix in memory, every batch's
      for (std::size_t i = static_cast<std::size_t>(rows * cols); i < v.size(); ++i)
        v[i] = v[i % static_cast<std::size_t>(rows * cols)];
  }
  std::vector<unsigned char> encode(float pad) const {
    std::vector<unsigned char> out(bytes());
    for (std::size_t i = 0; i < out.size(); i += type_size(type)) save(out.data() + i, type, pad);
    for (int b = 0; b < batch; ++b)
      for (std::int64_t c = 0; c < cols; ++c)
        for (std::int64_t r = 0; r < rows; ++r) save(out.data() + offset(b, r, c), type, at(b, r, c));
    return out;
  }
  float read(const unsigned char* base, int b, std::int64_t r, std::int64_t c) const {
    return load(base + offset(b, r, c), type);
  }
};

// Device memory for a test, freed at the end of the scope.
struct Dev {
  void* p = nullptr;
  std::size_t n = 0;
  explicit Dev(std::size_t bytes) : n(bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  Dev(const Stored& s, float pad) : Dev(s.bytes()) { upload(s.encode(pad)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void upload(const std::vector<unsigned char>& h) {
    ASSERT_EQ(h.size(), n);
    ASSERT_EQ(cudaMemcpy(p, h.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  // The emulation's device memory is host memory: what a kernel would see now,
  // without the synchronisation a copy implies.
  std::vector<unsigned char> peek() const {
    const auto* b = static_cast<const unsigned char*>(p);
    return std::vector<unsigned char>(b, b + n);
  }
};

// D = alpha op(A) op(B) + beta C in double, with the fp8 scales.
std::vector<double> reference(const Stored& A, bool ta, const Stored& B, bool tb, const Stored* C, double alpha,
                              double beta, std::int64_t m, std::int64_t n, std::int64_t k, int batch) {
  std::vector<double> out(static_cast<std::size_t>(m * n * batch));
  for (int b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t i = 0; i < m; ++i) {
        double s = 0;
        for (std::int64_t l = 0; l < k; ++l)
          s += static_cast<double>(ta ? A.at(b, l, i) : A.at(b, i, l)) * (tb ? B.at(b, j, l) : B.at(b, l, j));
        double r = alpha * s;
        if (C && beta != 0) r += beta * C->at(b, i, j);
        out[static_cast<std::size_t>((b * n + j) * m + i)] = r;
      }
  return out;
}

std::string last_message(cublasStatus_t s) { return cublasGetStatusString(s); }

// ---- cuBLASLt harness -------------------------------------------------------------

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() { EXPECT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS); }
  ~LtHandle() { cublasLtDestroy(h); }
};

cublasLtMatrixLayout_t make_layout(const Stored& s) {
  cublasLtMatrixLayout_t l = nullptr;
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, s.type, static_cast<std::uint64_t>(s.rows),
                                       static_cast<std::uint64_t>(s.cols), s.ld),
            CUBLAS_STATUS_SUCCESS);
  if (s.batch > 1) {
    const std::int32_t count = s.batch;
    const std::int64_t stride = s.stride;
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
              CUBLAS_STATUS_SUCCESS);
  }
  return l;
}

// A matmul's descriptors (C and D share a layout unless told otherwise).
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;

  LtDescs(cublasComputeType_t compute, cublasOperation_t ta, cublasOperation_t tb, const Stored& A, const Stored& B,
          const Stored& C, const Stored& D) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), CUBLAS_STATUS_SUCCESS);
    a = make_layout(A);
    b = make_layout(B);
    c = make_layout(C);
    d = make_layout(D);
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const std::uint64_t ws = 32 << 20;
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
              CUBLAS_STATUS_SUCCESS);
  }
  ~LtDescs() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;

  cublasStatus_t heuristic(cublasLtHandle_t h, cublasLtMatmulHeuristicResult_t& r, int& found) const {
    found = -1;
    return cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, d, pref, 1, &r, &found);
  }
};

// Runs one matmul through heuristic, cublasLtMatmul and a stream sync, and
// checks D against the double reference, rounded to D's type, within `rel`
// (relative to the largest term's magnitude) and the padding around D untouched.
void check_lt(cublasComputeType_t compute, cublasOperation_t ta, cublasOperation_t tb, Stored A, Stored B, Stored D,
              float alpha, float beta, double rel, std::uint64_t seed) {
  const bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
  const std::int64_t m = D.rows, n = D.cols, k = tA ? A.rows : A.cols;
  A.fill(seed, false);
  B.fill(seed + 1, false);
  D.fill(seed + 2, false);  // C = D: beta reads it
  LtHandle lt;
  LtDescs descs(compute, ta, tb, A, B, D, D);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  ASSERT_EQ(descs.heuristic(lt.h, r, found), CUBLAS_STATUS_SUCCESS) << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  ASSERT_EQ(found, 1);
  EXPECT_EQ(r.state, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(r.workspaceSize, 0u);
  Dev a(A, NAN), b(B, NAN), d(D, 777.0f);  // NaN padding: reading it would show in D
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const cublasStatus_t st = cublasLtMatmul(lt.h, descs.op, &alpha, a.p, descs.a, b.p, descs.b, &beta, d.p, descs.d, d.p,
                                           descs.d, &r.algo, nullptr, 0, s);
  ASSERT_EQ(st, CUBLAS_STATUS_SUCCESS) << last_message(st);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
  const auto got = d.download();
  const auto ref = reference(A, tA, B, tB, &D, alpha, beta, m, n, k, D.batch);
  int bad = 0;
  for (int bi = 0; bi < D.batch; ++bi)
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t i = 0; i < m; ++i) {
        const double want = ref[static_cast<std::size_t>((bi * n + j) * m + i)];
        const double tol = rel * (std::fabs(want) + std::sqrt(static_cast<double>(k)) * std::fabs(alpha) +
                                  std::fabs(beta)) + 1e-6;
        const float g = D.read(got.data(), bi, i, j);
        if (!(std::fabs(g - want) <= tol) && ++bad <= 5)
          ADD_FAILURE() << "D[" << bi << "](" << i << "," << j << ") = " << g << ", want " << want << " +- " << tol;
      }
      for (std::int64_t i = m; i < D.ld && (j + 1 < n || bi + 1 < D.batch); ++i)
        if (D.read(got.data(), bi, i, j) != quantize(777.0f, D.type) && ++bad <= 5)
          ADD_FAILURE() << "padding of D written at row " << i;
    }
  EXPECT_EQ(bad, 0);
}

// ---- results ----------------------------------------------------------------------------

// phasebench's linear layer layout: A = W (K x N stored, TRANSA = T), B = X (K x M), D = Y^T.
TEST(EmuCublasLt, Bf16TnAsTheLinearLayerCallsIt) {
  const int M = 24, N = 40, K = 64;
  check_lt(CUBLAS_COMPUTE_32F, CUBLAS_OP_T, CUBLAS_OP_N, Stored(CUDA_R_16BF, K, N, K), Stored(CUDA_R_16BF, K, M, K),
           Stored(CUDA_R_16BF, N, M, N), 1.0f, 0.0f, 1.0 / 128, 11);
}

TEST(EmuCublasLt, Bf16EveryTransposeWithOddLeadingDimensions) {
  const int m = 13, n = 7, k = 9;
  for (auto ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (auto tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      SCOPED_TRACE(std::string("transa ") + (ta == CUBLAS_OP_N ? "N" : "T") + ", transb " + (tb == CUBLAS_OP_N ? "N" : "T"));
      const std::int64_t ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
      const std::int64_t br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
      check_lt(CUBLAS_COMPUTE_32F, ta, tb, Stored(CUDA_R_16BF, ar, ac, ar + 3), Stored(CUDA_R_16BF, br, bc, br + 5),
               Stored(CUDA_R_32F, m, n, m + 1), 0.75f, 0.5f, 1e-5, 21);
    }
}

TEST(EmuCublasLt, Fp16ToFp16AndToFp32) {
  check_lt(CUBLAS_COMPUTE_32F, CUBLAS_OP_T, CUBLAS_OP_N, Stored(CUDA_R_16F, 48, 16, 48), Stored(CUDA_R_16F, 48, 8, 48),
           Stored(CUDA_R_16F, 16, 8, 16), 1.0f, 0.0f, 1.0 / 1024, 31);
  check_lt(CUBLAS_COMPUTE_32F, CUBLAS_OP_N, CUBLAS_OP_T, Stored(CUDA_R_16F, 16, 48, 17), Stored(CUDA_R_16F, 8, 48, 9),
           Stored(CUDA_R_32F, 16, 8, 16), 2.0f, -1.0f, 1e-5, 32);
}

TEST(EmuCublasLt, Fp32AndTf32) {
  check_lt(CUBLAS_COMPUTE_32F, CUBLAS_OP_T, CUBLAS_OP_N, Stored(CUDA_R_32F, 40, 12, 40), Stored(CUDA_R_32F, 40, 10, 40),
           Stored(CUDA_R_32F, 12, 10, 12), 1.0f, 0.0f, 1e-5, 41);
  // tf32 keeps 10 mantissa bits: the inputs lose up to 2^-11 relative each.
  check_lt(CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_OP_T, CUBLAS_OP_N, Stored(CUDA_R_32F, 40, 12, 40),
           Stored(CUDA_R_32F, 40, 10, 40), Stored(CUDA_R_32F, 12, 10, 12), 1.0f, 0.0f, 2.0 / 1024, 42);
}

TEST(EmuCublasLt, BatchedWithABroadcastOperand) {
  const int m = 6, n = 5, k = 4, batch = 3;
  // A's stride 0: every batch multiplies the same A.
  check_lt(CUBLAS_COMPUTE_32F, CUBLAS_OP_N, CUBLAS_OP_N, Stored(CUDA_R_16BF, m, k, m, batch, 0),
           Stored(CUDA_R_16BF, k, n, k + 1, batch, (k + 1) * n + 3), Stored(CUDA_R_32F, m, n, m, batch, m * n + 2), 1.0f,
           0.0f, 1e-5, 51);
}

// Runs a 1 x 3 x 1 fp32 matmul D = A B with A = 1 and B = `b` under `compute`; returns D.
std::vector<float> one_by_three(cublasComputeType_t compute, const float (&bv)[3]) {
  Stored A(CUDA_R_32F, 1, 1, 1), B(CUDA_R_32F, 1, 3, 1), D(CUDA_R_32F, 1, 3, 1);
  A.v = {1.0f};
  B.v.assign(bv, bv + 3);
  LtHandle lt;
  LtDescs descs(compute, CUBLAS_OP_T, CUBLAS_OP_N, A, B, D, D);
  Dev a(A, 0), b(B, 0), d(D, 0);
  const float alpha = 1, beta = 0;
  EXPECT_EQ(cublasLtMatmul(lt.h, descs.op, &alpha, a.p, descs.a, b.p, descs.b, &beta, d.p, descs.d, d.p, descs.d,
                           nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = d.download();
  std::vector<float> out(3);
  std::memcpy(out.data(), h.data(), 12);
  return out;
}

TEST(EmuCublasLt, Tf32RoundsInputsToNearestEven) {
  const float u = std::ldexp(1.0f, -11);  // half a tf32 ulp at 1
  const float b[3] = {1 + u / 2, 1 + u, 1 + 3 * u};
  const auto fp32 = one_by_three(CUBLAS_COMPUTE_32F, b);
  EXPECT_EQ(fp32[0], b[0]);
  EXPECT_EQ(fp32[1], b[1]);
  EXPECT_EQ(fp32[2], b[2]);
  const auto tf32 = one_by_three(CUBLAS_COMPUTE_32F_FAST_TF32, b);
  EXPECT_EQ(tf32[0], 1.0f);          // below half an ulp: down
  EXPECT_EQ(tf32[1], 1.0f);          // a tie, to the even mantissa (0)
  EXPECT_EQ(tf32[2], 1.0f + 4 * u);  // a tie between mantissas 1 and 2: to 2
}

bool has_fp8() {
  cudaDeviceProp p{};
  EXPECT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  return p.major * 10 + p.minor >= 89;
}

// An fp8 (e4m3) TN matmul with per-tensor scales, bf16 out: D = alpha sA sB A^T B.
struct Fp8Case {
  int m = 32, n = 16, k = 64;
  Stored A{CUDA_R_8F_E4M3, 64, 32, 64}, B{CUDA_R_8F_E4M3, 64, 16, 64}, D{CUDA_R_16BF, 32, 16, 32};
  float sa = 0.5f, sb = 4.0f, alpha = 1.5f, beta = 0.0f;
  LtHandle lt;
  std::unique_ptr<LtDescs> descs;
  std::unique_ptr<Dev> a, b, d, scales;
  Fp8Case(cublasOperation_t ta = CUBLAS_OP_T, cublasOperation_t tb = CUBLAS_OP_N) {
    A.fill(61, false, 8.0f);
    B.fill(62, false, 8.0f);
    descs = std::make_unique<LtDescs>(CUBLAS_COMPUTE_32F, ta, tb, A, B, D, D);
    a = std::make_unique<Dev>(A, 0.0f);
    b = std::make_unique<Dev>(B, 0.0f);
    d = std::make_unique<Dev>(D, 0.0f);
    scales = std::make_unique<Dev>(2 * sizeof(float));
    const float sv[2] = {sa, sb};
    std::vector<unsigned char> bytes(8);
    std::memcpy(bytes.data(), sv, 8);
    scales->upload(bytes);
    const void* pa = scales->p;
    const void* pb = static_cast<float*>(scales->p) + 1;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(descs->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(descs->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb),
              CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t matmul(const cublasLtMatmulAlgo_t* algo) {
    return cublasLtMatmul(lt.h, descs->op, &alpha, a->p, descs->a, b->p, descs->b, &beta, d->p, descs->d, d->p,
                          descs->d, algo, nullptr, 0, nullptr);
  }
};

TEST(EmuCublasLt, Fp8WithScalesMatchesAHandLoop) {
  if (!has_fp8()) GTEST_SKIP() << "the emulated device has no fp8 (PB_EMU_TARGET below 8.9)";
  Fp8Case c;
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  ASSERT_EQ(c.descs->heuristic(c.lt.h, r, found), CUBLAS_STATUS_SUCCESS) << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  ASSERT_EQ(found, 1);
  ASSERT_EQ(c.matmul(&r.algo), CUBLAS_STATUS_SUCCESS) << last_message(CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = c.d->download();
  int bad = 0;
  for (int j = 0; j < c.n; ++j)
    for (int i = 0; i < c.m; ++i) {
      double s = 0;
      for (int l = 0; l < c.k; ++l)
        s += static_cast<double>(c.A.at(0, l, i)) * c.B.at(0, l, j);  // values already e4m3
      const double want = s * c.sa * c.sb * c.alpha;
      const float g = c.D.read(got.data(), 0, i, j);
      if (!(std::fabs(g - want) <= std::fabs(want) / 128 + 1e-3) && ++bad <= 5)
        ADD_FAILURE() << "D(" << i << "," << j << ") = " << g << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
  // The scales are applied: with 1s the result differs by sa * sb = 2.
  EXPECT_NE(c.D.read(got.data(), 0, 0, 0), 0.0f);
}

TEST(EmuCublasLt, Fp8NeedsComputeCapability89) {
  Fp8Case c;
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  if (has_fp8()) {
    EXPECT_EQ(c.descs->heuristic(c.lt.h, r, found), CUBLAS_STATUS_SUCCESS);
    return;
  }
  EXPECT_EQ(c.descs->heuristic(c.lt.h, r, found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  EXPECT_EQ(c.matmul(nullptr), CUBLAS_STATUS_ARCH_MISMATCH);
  EXPECT_NE(last_message(CUBLAS_STATUS_ARCH_MISMATCH).find("compute capability 8.9"), std::string::npos);
}

TEST(EmuCublasLt, Fp8OnlyInTheTnLayout) {
  if (!has_fp8()) GTEST_SKIP() << "the emulated device has no fp8 (PB_EMU_TARGET below 8.9)";
  Fp8Case c(CUBLAS_OP_N, CUBLAS_OP_N);  // A 64 x 32 read as op(A) = A: m = 64 != D's 32 -> use a consistent shape
  Stored A(CUDA_R_8F_E4M3, 32, 64, 32);
  cublasLtMatrixLayout_t a = make_layout(A);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt.h, c.descs->op, a, c.descs->b, c.descs->d, c.descs->d, c.descs->pref, 1,
                                           &r, &found),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("\"TN\" layout"), std::string::npos)
      << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  Dev da(A, 0);
  const float alpha = 1, beta = 0;
  EXPECT_EQ(cublasLtMatmul(c.lt.h, c.descs->op, &alpha, da.p, a, c.b->p, c.descs->b, &beta, c.d->p, c.descs->d, c.d->p,
                           c.descs->d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayoutDestroy(a);
}

TEST(EmuCublasLt, Fp8NeedsSixteenByteAlignedColumns) {
  if (!has_fp8()) GTEST_SKIP() << "the emulated device has no fp8 (PB_EMU_TARGET below 8.9)";
  Fp8Case c;
  Stored A(CUDA_R_8F_E4M3, 64, 32, 72 + 1);  // ld 73 bytes
  cublasLtMatrixLayout_t a = make_layout(A);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt.h, c.descs->op, a, c.descs->b, c.descs->d, c.descs->d, c.descs->pref, 1,
                                           &r, &found),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("16-byte aligned"), std::string::npos);
  cublasLtMatrixLayoutDestroy(a);
}

TEST(EmuCublasLt, Fp8HeuristicHonoursTheAlignmentPreference) {
  if (!has_fp8()) GTEST_SKIP() << "the emulated device has no fp8 (PB_EMU_TARGET below 8.9)";
  Fp8Case c;
  const std::uint32_t four = 4;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(c.descs->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &four,
                                                 sizeof four),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(c.descs->heuristic(c.lt.h, r, found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("MIN_ALIGNMENT_B_BYTES"), std::string::npos);
}

// ---- cuBLASLt's block-scaled FP4 matmul (NVFP4, MXFP4) -------------------------------------

bool has_fp4() {
  cudaDeviceProp p{};
  EXPECT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  return p.major * 10 + p.minor >= 100;
}
#define PB_SKIP_WITHOUT_FP4() \
  if (!has_fp4()) GTEST_SKIP() << "the emulated device has no block-scaled FP4 (PB_EMU_TARGET below 10.0; b200 has it)"

// Scales in the tiled layout cuBLAS documents ("1D Block Scaling Factors Layout"),
// written here in storage order: 128 x 4 tiles of 512 bytes, the tiles of one group
// of 128 rows adjacent along k; in a tile 32 lines of 16 bytes, line i holding rows
// i, i + 32, i + 64 and i + 96, 4 blocks each. `rowmajor` is rows x blocks; padding 0.
std::vector<std::uint8_t> tiled_scales(const std::vector<std::uint8_t>& rowmajor, std::int64_t rows, std::int64_t blocks) {
  std::vector<std::uint8_t> out;
  for (std::int64_t tr = 0; tr < (rows + 127) / 128; ++tr)
    for (std::int64_t tc = 0; tc < (blocks + 3) / 4; ++tc)
      for (std::int64_t line = 0; line < 32; ++line)
        for (std::int64_t quarter = 0; quarter < 4; ++quarter)
          for (std::int64_t c = 0; c < 4; ++c) {
            const std::int64_t r = tr * 128 + quarter * 32 + line, b = tc * 4 + c;
            out.push_back(r < rows && b < blocks ? rowmajor[static_cast<std::size_t>(r * blocks + b)] : 0);
          }
  return out;
}

// A block-scaled FP4 matmul as phasebench's linear layer calls it ("TN": A stored
// k x m, B k x n, D m x n bf16): random non-zero e2m1 values and random scales in a
// small range (UE4M3 0.25 to 3.75 for VEC16, UE8M0 2^-3 to 2^3 for VEC32), on the device
// in the tiled layout, with every descriptor set as cuBLASLt wants it. A test spoils one piece.
struct Fp4Case {
  int mode, block;
  std::int64_t m, n, k, lda, ldb;
  float alpha = 0.46875f, beta = 0.0f;  // 0.75 x 0.625: nvfp4's two tensor scales, as the linear layer folds them
  std::vector<std::uint8_t> a, b;    // packed, column-major (ld lda, ldb), the low nibble first
  std::vector<std::uint8_t> sa, sb;  // scales, row-major: m x k / block, n x k / block
  LtHandle lt;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  std::unique_ptr<Dev> da, db, dsa, dsb, dd;

  Fp4Case(int mode_, std::int64_t m_, std::int64_t n_, std::int64_t k_, std::int64_t lda_ = 0, std::int64_t ldb_ = 0,
          cublasOperation_t ta = CUBLAS_OP_T, cublasOperation_t tb = CUBLAS_OP_N)
      : mode(mode_), block(mode_ == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 ? 16 : 32), m(m_), n(n_), k(k_),
        lda(lda_ ? lda_ : k_), ldb(ldb_ ? ldb_ : k_) {
    a = values(lda * m, 101);
    b = values(ldb * n, 102);
    sa = scales(m * blocks(), 103);
    sb = scales(n * blocks(), 104);
    EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), CUBLAS_STATUS_SUCCESS);
    set_modes(mode, mode);
    const bool tA = ta != CUBLAS_OP_N;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_4F_E2M1, static_cast<std::uint64_t>(tA ? k : m),
                                         static_cast<std::uint64_t>(tA ? m : k), lda),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_4F_E2M1, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n), ldb),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, static_cast<std::uint64_t>(m), static_cast<std::uint64_t>(n), m),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    da = std::make_unique<Dev>(a.size());
    db = std::make_unique<Dev>(b.size());
    dsa = std::make_unique<Dev>(tiled_scales(sa, m, blocks()).size());
    dsb = std::make_unique<Dev>(tiled_scales(sb, n, blocks()).size());
    dd = std::make_unique<Dev>(static_cast<std::size_t>(m * n * 2));
    upload();
    set_pointers(dsa->p, dsb->p);
  }
  ~Fp4Case() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
  }
  Fp4Case(const Fp4Case&) = delete;
  Fp4Case& operator=(const Fp4Case&) = delete;

  std::int64_t blocks() const { return k / block; }
  static std::vector<std::uint8_t> values(std::int64_t count, std::uint64_t seed) {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(count / 2));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::uint64_t h = num::mix64(seed * 7919 + i);
      const unsigned lo = (1 + h % 7) | ((h >> 8) & 1) << 3, hi = (1 + (h >> 16) % 7) | ((h >> 24) & 1) << 3;
      v[i] = static_cast<std::uint8_t>(lo | hi << 4);
    }
    return v;
  }
  std::vector<std::uint8_t> scales(std::int64_t count, std::uint64_t seed) const {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::uint64_t h = num::mix64(seed * 104729 + i);
      v[i] = block == 16 ? static_cast<std::uint8_t>((5 + h % 4) << 3 | ((h >> 8) & 7)) : static_cast<std::uint8_t>(124 + h % 7);
    }
    return v;
  }
  double scale(std::uint8_t v) const { return block == 16 ? num::fp8e4m3_to_float(v) : num::e8m0_to_float(v); }
  static double value(const std::vector<std::uint8_t>& packed, std::int64_t i) {
    return num::fp4e2m1_to_float((packed[static_cast<std::size_t>(i / 2)] >> (i % 2 ? 4 : 0)) & 0xfu);
  }
  void upload() {
    da->upload(a);
    db->upload(b);
    dsa->upload(tiled_scales(sa, m, blocks()));
    dsb->upload(tiled_scales(sb, n, blocks()));
  }
  void set_modes(int ma, int mb) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb), CUBLAS_STATUS_SUCCESS);
  }
  void set_pointers(const void* pa, const void* pb) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb),
              CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t heuristic(cublasLtMatmulHeuristicResult_t& r, int& found) const {
    found = -1;
    return cublasLtMatmulAlgoGetHeuristic(lt.h, op, la, lb, ld, ld, pref, 1, &r, &found);
  }
  cublasStatus_t matmul(const cublasLtMatmulAlgo_t* algo, const void* A = nullptr) {
    return cublasLtMatmul(lt.h, op, &alpha, A ? A : da->p, la, db->p, lb, &beta, dd->p, ld, dd->p, ld, algo, nullptr, 0,
                          nullptr);
  }
  // D(i, j) = alpha sum_l a(l, i) sa(i, l / block) b(l, j) sb(j, l / block), in double.
  double want(std::int64_t i, std::int64_t j) const {
    double s = 0;
    for (std::int64_t l = 0; l < k; ++l)
      s += value(a, i * lda + l) * scale(sa[static_cast<std::size_t>(i * blocks() + l / block)]) * value(b, j * ldb + l) *
           scale(sb[static_cast<std::size_t>(j * blocks() + l / block)]);
    return alpha * s;
  }
  // Runs through the heuristic and the matmul; every element of D against want()
  // within bf16's rounding. Returns the number of elements off.
  int check() {
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    EXPECT_EQ(heuristic(r, found), CUBLAS_STATUS_SUCCESS) << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(found, 1);
    const cublasStatus_t st = matmul(found == 1 ? &r.algo : nullptr);
    EXPECT_EQ(st, CUBLAS_STATUS_SUCCESS) << last_message(st);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = dd->download();
    int bad = 0;
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t i = 0; i < m; ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, got.data() + 2 * (j * m + i), 2);
        const double g = num::bf16_to_float(h), w = want(i, j);
        if (!(std::fabs(g - w) <= std::fabs(w) / 128 + 1e-6) && ++bad <= 5)
          ADD_FAILURE() << "D(" << i << "," << j << ") = " << g << ", want " << w;
      }
    return bad;
  }
};

constexpr int kVec16 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
constexpr int kVec32 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;

TEST(EmuCublasLtFp4, TheTestsTiledLayoutIsTheDocumentedFormula) {
  // The documented offset: tile (r / 128, c / 4) of ceil(blocks / 4) per tile row, 512
  // bytes each; (r % 32) * 16 + (r % 128) / 32 * 4 + c % 4 inside it. Two probes by hand:
  // row 130, block 5 of 6 -> tile 1 * 2 + 1, line 2, quarter 0, byte 1: 1536 + 32 + 1;
  // row 45, block 2 -> tile 0, line 13, quarter 1, byte 2: 208 + 4 + 2.
  std::vector<std::uint8_t> rowmajor(200 * 6, 0);
  rowmajor[130 * 6 + 5] = 7;
  rowmajor[45 * 6 + 2] = 9;
  const auto t = tiled_scales(rowmajor, 200, 6);
  ASSERT_EQ(t.size(), 256u * 8u);
  EXPECT_EQ(t[1569], 7);
  EXPECT_EQ(t[214], 9);
  EXPECT_EQ(std::count(t.begin(), t.end(), 0), static_cast<std::ptrdiff_t>(t.size() - 2));
}

TEST(EmuCublasLtFp4, NvfpAndMxfpMatchAHandLoopOnTailHeavyShapes) {
  PB_SKIP_WITHOUT_FP4();
  // m (the linear layer's N) not a multiple of 128, n (its M) odd, k a multiple of 32
  // but not of 128: partial tiles in both scale tensors, along k too.
  for (int mode : {kVec16, kVec32})
    for (auto [m, n, k] : {std::array<std::int64_t, 3>{200, 37, 96}, {136, 130, 160}, {8, 1, 32}}) {
      SCOPED_TRACE((mode == kVec16 ? "VEC16_UE4M3 " : "VEC32_UE8M0 ") + std::to_string(m) + "x" + std::to_string(n) +
                   "x" + std::to_string(k));
      Fp4Case c(mode, m, n, k);
      EXPECT_EQ(c.check(), 0);
    }
}

TEST(EmuCublasLtFp4, EachScaleLandsWhereTheDocumentedLayoutPutsIt) {
  PB_SKIP_WITHOUT_FP4();
  // Every value 1 and every scale 1, but A's scale of row 130, block 5 (2.0) and B's
  // of column 3, block 0 (4.0): D is k everywhere but row 130 (k + 16) and column 3
  // (k + 3 * 16), and their crossing.
  Fp4Case c(kVec16, 200, 5, 96);
  std::fill(c.a.begin(), c.a.end(), 0x22);  // e2m1 1.0 twice
  std::fill(c.b.begin(), c.b.end(), 0x22);
  std::fill(c.sa.begin(), c.sa.end(), 0x38);  // e4m3 1.0
  std::fill(c.sb.begin(), c.sb.end(), 0x38);
  c.sa[130 * 6 + 5] = 0x40;  // 2.0
  c.sb[3 * 6 + 0] = 0x48;    // 4.0
  c.alpha = 1.0f;
  c.upload();
  const auto tiled = tiled_scales(c.sa, 200, 6);
  ASSERT_EQ(tiled[1569], 0x40);  // where the documented formula puts it (above)
  EXPECT_EQ(c.check(), 0);
  const auto got = c.dd->download();
  auto d = [&](std::int64_t i, std::int64_t j) {
    std::uint16_t h = 0;
    std::memcpy(&h, got.data() + 2 * (j * 200 + i), 2);
    return num::bf16_to_float(h);
  };
  EXPECT_EQ(d(0, 0), 96.0f);
  EXPECT_EQ(d(130, 0), 112.0f);
  EXPECT_EQ(d(0, 3), 144.0f);
  EXPECT_EQ(d(130, 3), 4 * 16 + 4.0f * 16 + 2.0f * 16);  // blocks 1-4, block 0 (B's 4), block 5 (A's 2)
  EXPECT_EQ(d(129, 3), 144.0f);
}

TEST(EmuCublasLtFp4, NeedsComputeCapability100) {
  Fp4Case c(kVec16, 64, 8, 64);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  if (has_fp4()) {
    EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_SUCCESS) << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
    return;
  }
  EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  EXPECT_EQ(c.matmul(nullptr), CUBLAS_STATUS_ARCH_MISMATCH);
  EXPECT_NE(last_message(CUBLAS_STATUS_ARCH_MISMATCH).find("compute capability 10.0"), std::string::npos)
      << last_message(CUBLAS_STATUS_ARCH_MISMATCH);
}

TEST(EmuCublasLtFp4, OnlyInTheTnLayout) {
  PB_SKIP_WITHOUT_FP4();
  Fp4Case c(kVec16, 64, 8, 64, 64, 64, CUBLAS_OP_N, CUBLAS_OP_N);  // A m x k: consistent, but "NN"
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("\"TN\" layout"), std::string::npos)
      << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(c.matmul(nullptr), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST(EmuCublasLtFp4, NeedsItsBlockScalesAndTheirTensors) {
  PB_SKIP_WITHOUT_FP4();
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  {  // No scale mode: FP4 has no per-tensor form.
    Fp4Case c(kVec16, 64, 8, 64);
    c.set_modes(CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
    EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("FP4 matmuls need block scales"), std::string::npos);
    c.set_modes(kVec16, kVec32);  // one mode for both
    EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("B_SCALE_MODE VEC32_UE8M0"), std::string::npos)
        << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // A mode without its tensor.
    Fp4Case c(kVec32, 64, 8, 64);
    c.set_pointers(nullptr, c.dsb->p);
    EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_SUCCESS);  // the heuristic reads no pointer
    EXPECT_EQ(c.matmul(&r.algo), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE)
                  .find("A_SCALE_MODE is VEC32_UE8M0 but CUBLASLT_MATMUL_DESC_A_SCALE_POINTER is not set"),
              std::string::npos)
        << last_message(CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // A misaligned tensor, and one cut to the scales without the tiles' padding.
    Fp4Case c(kVec16, 200, 37, 96);
    Dev wide(c.dsa->n + 32);
    c.set_pointers(static_cast<unsigned char*>(wide.p) + 8, c.dsb->p);
    EXPECT_EQ(c.matmul(nullptr), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("16-byte aligned"), std::string::npos);
    Dev cut(static_cast<std::size_t>(200 * 6));
    c.set_pointers(cut.p, c.dsb->p);
    EXPECT_EQ(c.matmul(nullptr), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("A scale tensor"), std::string::npos)
        << last_message(CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("past the end of its allocation"), std::string::npos);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

TEST(EmuCublasLtFp4, NeedsAlignedColumnsAndWholeBlocks) {
  PB_SKIP_WITHOUT_FP4();
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  {  // ld 112 values: 56 bytes, not a multiple of 16.
    Fp4Case c(kVec16, 64, 8, 96, 112);
    EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("16-byte aligned columns; Adesc has ld 112"),
              std::string::npos)
        << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // k = 48: a whole number of NVFP4's blocks of 16 (and read at ld 64), not of MXFP4's 32.
    Fp4Case nv(kVec16, 64, 9, 48, 64, 64);
    EXPECT_EQ(nv.check(), 0);
    Fp4Case mx(kVec32, 64, 9, 48, 64, 64);
    EXPECT_EQ(mx.heuristic(r, found), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("multiple of the block (32 for VEC32_UE8M0); k = 48"),
              std::string::npos)
        << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // A matrix off a 16-byte boundary, and an alignment preference below 16.
    Fp4Case c(kVec16, 64, 8, 64);
    Dev wide(c.da->n + 32);
    EXPECT_EQ(c.matmul(nullptr, static_cast<unsigned char*>(wide.p) + 8), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("FP4 matmuls need 16-byte aligned matrices; A"),
              std::string::npos);
    const std::uint32_t eight = 8;
    ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &eight, sizeof eight),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(c.heuristic(r, found), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("no FP4 algorithm"), std::string::npos);
  }
}

TEST(EmuCublasLtFp4, BlockScaleModesBelongToFp4Alone) {
  // bf16 A and B with block scales: refused, whatever the device.
  Stored A(CUDA_R_16BF, 16, 8, 16), B(CUDA_R_16BF, 16, 4, 16), D(CUDA_R_16BF, 8, 4, 8);
  LtHandle lt;
  LtDescs descs(CUBLAS_COMPUTE_32F, CUBLAS_OP_T, CUBLAS_OP_N, A, B, D, D);
  const std::int32_t vec16 = kVec16, vec128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, bogus = 99;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec16, sizeof vec16),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(descs.heuristic(lt.h, r, found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("block scales are emulated for FP4"), std::string::npos)
      << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  // Modes the emulation does not have, and no mode at all.
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec128, sizeof vec128),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("VEC128_32F"), std::string::npos);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bogus, sizeof bogus),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_D_SCALE_MODE, &vec16, sizeof vec16),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

// ---- cuBLASLt argument checks ------------------------------------------------------------------

// A bf16 TN problem (m = 8, n = 4, k = 16) whose pieces a test can spoil.
struct Bf16Case {
  Stored A{CUDA_R_16BF, 16, 8, 16}, B{CUDA_R_16BF, 16, 4, 16}, D{CUDA_R_16BF, 8, 4, 8};
  LtHandle lt;
  LtDescs descs{CUBLAS_COMPUTE_32F, CUBLAS_OP_T, CUBLAS_OP_N, A, B, D, D};
  Dev a{A, 0}, b{B, 0}, d{D, 0};
  float alpha = 1, beta = 0;
  cublasStatus_t matmul(const cublasLtMatmulAlgo_t* algo, cublasLtMatrixLayout_t bl = nullptr, const void* bp = nullptr) {
    return cublasLtMatmul(lt.h, descs.op, &alpha, a.p, descs.a, bp ? bp : b.p, bl ? bl : descs.b, &beta, d.p, descs.d,
                          d.p, descs.d, algo, nullptr, 0, nullptr);
  }
};

TEST(EmuCublasLt, LeadingDimensionBelowRowsIsInvalid) {
  Bf16Case c;
  Stored B(CUDA_R_16BF, 16, 4, 16);
  cublasLtMatrixLayout_t bad = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&bad, CUDA_R_16BF, 16, 4, 15), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt.h, c.descs.op, c.descs.a, bad, c.descs.d, c.descs.d, c.descs.pref, 1, &r,
                                           &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(found, 0);
  EXPECT_EQ(c.matmul(nullptr, bad), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("Bdesc: ld 15 is less than max(1, rows = 16)"),
            std::string::npos)
      << last_message(CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatrixLayoutDestroy(bad);
}

TEST(EmuCublasLt, MatrixRunningPastItsAllocationIsInvalid) {
  Bf16Case c;
  Dev small(c.B.bytes() - 16);
  EXPECT_EQ(c.matmul(nullptr, nullptr, small.p), CUBLAS_STATUS_INVALID_VALUE);
  const std::string msg = last_message(CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(msg.rfind("pb_emu: cublasLtMatmul: B [", 0), 0u) << msg;
  EXPECT_NE(msg.find("runs 16 bytes past the end of its allocation"), std::string::npos) << msg;
  // Host memory is not device memory either.
  std::vector<unsigned char> host(c.B.bytes());
  EXPECT_EQ(c.matmul(nullptr, nullptr, host.data()), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("is not in any device allocation"), std::string::npos);
}

TEST(EmuCublasLt, AlgoFromAnotherProblemIsRefused) {
  Bf16Case c;
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  ASSERT_EQ(c.descs.heuristic(c.lt.h, r, found), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.matmul(&r.algo), CUBLAS_STATUS_SUCCESS);
  int id = -1;
  std::size_t written = 0;
  EXPECT_EQ(cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof id);
  EXPECT_GE(id, 0);
  // The same algo on a problem with half the k.
  Stored A(CUDA_R_16BF, 8, 8, 8), B(CUDA_R_16BF, 8, 4, 8);
  LtDescs other(CUBLAS_COMPUTE_32F, CUBLAS_OP_T, CUBLAS_OP_N, A, B, c.D, c.D);
  const cublasStatus_t st = cublasLtMatmul(c.lt.h, other.op, &c.alpha, c.a.p, other.a, c.b.p, other.b, &c.beta, c.d.p,
                                           other.d, c.d.p, other.d, &r.algo, nullptr, 0, nullptr);
  EXPECT_EQ(st, CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(st).find("for a different problem"), std::string::npos) << last_message(st);
  // An algo nobody filled in.
  cublasLtMatmulAlgo_t zero{};
  EXPECT_EQ(c.matmul(&zero), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(EmuCublasLt, NullOrDestroyedHandleIsNotInitialized) {
  Bf16Case c;
  EXPECT_EQ(cublasLtMatmul(nullptr, c.descs.op, &c.alpha, c.a.p, c.descs.a, c.b.p, c.descs.b, &c.beta, c.d.p, c.descs.d,
                           c.d.p, c.descs.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_INITIALIZED).find("cublasLtMatmul: the handle is null"), std::string::npos);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(c.descs.heuristic(nullptr, r, found), CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtHandle_t gone = nullptr;
  ASSERT_EQ(cublasLtCreate(&gone), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtDestroy(gone), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.descs.heuristic(gone, r, found), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(EmuCublasLt, InconsistentShapesBatchesAndTypes) {
  Bf16Case c;
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  // op(B) must be k x n = 16 x 4.
  Stored B(CUDA_R_16BF, 12, 4, 16);
  cublasLtMatrixLayout_t b = make_layout(B);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt.h, c.descs.op, c.descs.a, b, c.descs.d, c.descs.d, c.descs.pref, 1, &r,
                                           &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("inconsistent shapes"), std::string::npos);
  cublasLtMatrixLayoutDestroy(b);
  // Batch counts must agree.
  Stored B3(CUDA_R_16BF, 16, 4, 16, 3);
  b = make_layout(B3);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt.h, c.descs.op, c.descs.a, b, c.descs.d, c.descs.d, c.descs.pref, 1, &r,
                                           &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("batch counts differ"), std::string::npos);
  cublasLtMatrixLayoutDestroy(b);
  // bf16 inputs with an fp16 output: no such kernel.
  Stored D(CUDA_R_16F, 8, 4, 8);
  cublasLtMatrixLayout_t d = make_layout(D);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt.h, c.descs.op, c.descs.a, c.descs.b, d, d, c.descs.pref, 1, &r, &found),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("not a supported combination"), std::string::npos);
  // tf32 compute with bf16 inputs: also none.
  cublasLtMatmulDesc_t tf32 = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&tf32, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t t = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(tf32, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt.h, tf32, c.descs.a, c.descs.b, c.descs.d, c.descs.d, c.descs.pref, 1, &r,
                                           &found),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulDescDestroy(tf32);
  cublasLtMatrixLayoutDestroy(d);
}

TEST(EmuCublasLt, DescriptorOptionsOutsideTheEmulationAreRefused) {
  Bf16Case c;
  const std::uint32_t relu = CUBLASLT_EPILOGUE_RELU, bogus = 12345, def = CUBLASLT_EPILOGUE_DEFAULT;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(c.descs.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("CUBLASLT_MATMUL_DESC_EPILOGUE"), std::string::npos);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(c.descs.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &bogus, sizeof bogus),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(c.descs.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &def, sizeof def),
            CUBLAS_STATUS_SUCCESS);
  const std::int32_t device = CUBLASLT_POINTER_MODE_DEVICE;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(c.descs.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device, sizeof device),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const std::int32_t row = CUBLASLT_ORDER_ROW;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(c.descs.a, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // A wrong size for an attribute, and the refused values left nothing behind.
  const std::int64_t wide = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(c.descs.op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
            CUBLAS_STATUS_INVALID_VALUE);
  std::uint32_t epi = 0;
  std::size_t written = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(c.descs.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(epi, static_cast<std::uint32_t>(CUBLASLT_EPILOGUE_DEFAULT));
  // Scale pointers belong to fp8 matrices.
  const void* scale = c.d.p;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(c.descs.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.matmul(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("scale"), std::string::npos);
}

// ---- cublasGemmStridedBatchedEx -------------------------------------------------------------

struct BlasHandle {
  cublasHandle_t h = nullptr;
  BlasHandle() { EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS); }
  ~BlasHandle() { cublasDestroy(h); }
};

// Small integers throughout, so every result is exact.
void check_strided(cublasOperation_t ta, cublasOperation_t tb, cudaDataType ab, cudaDataType cd, int m, int n, int k,
                   int batch, float alpha, float beta) {
  const bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
  const int ar = tA ? k : m, ac = tA ? m : k, br = tB ? n : k, bc = tB ? k : n;
  Stored A(ab, ar, ac, ar + 2, batch, static_cast<std::int64_t>(ar + 2) * ac + 5);
  Stored B(ab, br, bc, br + 1, batch, static_cast<std::int64_t>(br + 1) * bc + 3);
  Stored C(cd, m, n, m + 3, batch, static_cast<std::int64_t>(m + 3) * n + 1);
  A.fill(71, true);
  B.fill(72, true);
  C.fill(73, true);
  Dev a(A, NAN), b(B, NAN), c(C, 777.0f);
  BlasHandle h;
  const cublasStatus_t st = cublasGemmStridedBatchedEx(
      h.h, ta, tb, m, n, k, &alpha, a.p, ab, static_cast<int>(A.ld), A.stride, b.p, ab, static_cast<int>(B.ld), B.stride,
      &beta, c.p, cd, static_cast<int>(C.ld), C.stride, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  ASSERT_EQ(st, CUBLAS_STATUS_SUCCESS) << last_message(st);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = c.download();
  const auto ref = reference(A, tA, B, tB, &C, alpha, beta, m, n, k, batch);
  int bad = 0;
  for (int bi = 0; bi < batch; ++bi)
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        const float want = quantize(static_cast<float>(ref[static_cast<std::size_t>((bi * n + j) * m + i)]), cd);
        const float g = C.read(got.data(), bi, i, j);
        if (g != want && ++bad <= 5)
          ADD_FAILURE() << "C[" << bi << "](" << i << "," << j << ") = " << g << ", want " << want;
      }
      for (int i = m; i < C.ld && (j + 1 < n || bi + 1 < batch); ++i)
        if (C.read(got.data(), bi, i, j) != quantize(777.0f, C.type) && ++bad <= 5)
          ADD_FAILURE() << "padding of C written at row " << i;
    }
  EXPECT_EQ(bad, 0);
}

TEST(EmuCublasGemmEx, EveryTransposeOddLeadingDimensionsAndStridesFp32Out) {
  for (auto ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (auto tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      SCOPED_TRACE(std::string("transa ") + (ta == CUBLAS_OP_N ? "N" : "T") + ", transb " + (tb == CUBLAS_OP_N ? "N" : "T"));
      check_strided(ta, tb, CUDA_R_16BF, CUDA_R_32F, 13, 7, 9, 3, 1.0f, 0.0f);
    }
}

TEST(EmuCublasGemmEx, SixteenBitOutputWithAlphaAndBeta) {
  check_strided(CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_16F, CUDA_R_16F, 11, 5, 6, 2, 2.0f, -1.0f);
  check_strided(CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_16BF, CUDA_R_16BF, 4, 9, 3, 4, 0.5f, 3.0f);
}

TEST(EmuCublasGemmEx, KZeroScalesC) {
  check_strided(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_32F, 3, 4, 0, 2, 1.0f, 2.0f);
}

// The prefill attention's P V product: P is read as 16-bit elements, ld 2S, out of
// an fp32 score buffer sized exactly (the last column ends inside it).
TEST(EmuCublasGemmEx, PrefillPvReadsPWithLd2SOutOfAnFp32Buffer) {
  const int S = 5, D = 8, Hq = 2, Hkv = 1, B = 2;
  const long long SS = static_cast<long long>(S) * S;
  std::vector<std::uint16_t> v(static_cast<std::size_t>(B) * S * Hkv * D), p(static_cast<std::size_t>(B) * Hq * SS * 2);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = num::float_to_bf16(static_cast<float>(static_cast<int>(i % 7) - 3));
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = (i / S) % 2 == 0 ? num::float_to_bf16(static_cast<float>(static_cast<int>(i % 5) - 2))
                            : num::float_to_bf16(NAN);  // the other half of each fp32 row: never read
  Dev dv(v.size() * 2), dp(p.size() * 2), dout(static_cast<std::size_t>(B) * S * Hq * D * 2);
  {
    std::vector<unsigned char> bytes(v.size() * 2);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    dv.upload(bytes);
    bytes.resize(p.size() * 2);
    std::memcpy(bytes.data(), p.data(), bytes.size());
    dp.upload(bytes);
  }
  BlasHandle h;
  const float one = 1, zero = 0;
  const auto* V = static_cast<const std::uint16_t*>(dv.p);
  const auto* P = static_cast<const std::uint16_t*>(dp.p);
  auto* out = static_cast<std::uint16_t*>(dout.p);
  for (int hq = 0; hq < Hq; ++hq) {
    const cublasStatus_t st = cublasGemmStridedBatchedEx(
        h.h, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &one, V + static_cast<std::size_t>(hq / (Hq / Hkv)) * D, CUDA_R_16BF, Hkv * D,
        static_cast<long long>(S) * Hkv * D, P + static_cast<std::size_t>(hq) * SS * 2, CUDA_R_16BF, 2 * S,
        static_cast<long long>(Hq) * SS * 2, &zero, out + static_cast<std::size_t>(hq) * D, CUDA_R_16BF, Hq * D,
        static_cast<long long>(S) * Hq * D, B, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    ASSERT_EQ(st, CUBLAS_STATUS_SUCCESS) << last_message(st);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = dout.download();
  for (int b = 0; b < B; ++b)
    for (int hq = 0; hq < Hq; ++hq)
      for (int q = 0; q < S; ++q)
        for (int d = 0; d < D; ++d) {
          float want = 0;
          for (int key = 0; key < S; ++key)
            want += num::bf16_to_float(p[static_cast<std::size_t>(((b * Hq + hq) * S + q) * 2 * S + key)]) *
                    num::bf16_to_float(v[static_cast<std::size_t>((b * S + key) * Hkv * D + d)]);
          std::uint16_t g;
          std::memcpy(&g, got.data() + 2 * (((static_cast<std::size_t>(b) * S + q) * Hq + hq) * D + d), 2);
          EXPECT_EQ(num::bf16_to_float(g), want) << "b " << b << " head " << hq << " query " << q << " dim " << d;
        }
}

// A valid bf16 -> fp32 problem (m = 4, n = 3, k = 5, batch 2) for the argument checks.
struct StridedCase {
  BlasHandle h;
  Dev a{2 * 4 * 5 * 2}, b{2 * 5 * 3 * 2}, c{2 * 4 * 3 * 4};
  float alpha = 1, beta = 0;
  cublasStatus_t call(cublasOperation_t ta, int m, int lda, long long sa, int ldb, int ldc, cudaDataType ct = CUDA_R_32F,
                      cublasHandle_t handle = nullptr, cublasComputeType_t compute = CUBLAS_COMPUTE_32F,
                      cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT, const void* alpha_ptr = nullptr) {
    return cublasGemmStridedBatchedEx(handle ? handle : h.h, ta, CUBLAS_OP_N, m, 3, 5, alpha_ptr ? alpha_ptr : &alpha,
                                      a.p, CUDA_R_16BF, lda, sa, b.p, CUDA_R_16BF, ldb, 15, &beta, c.p, ct, ldc, 12, 2,
                                      compute, algo);
  }
};

TEST(EmuCublasGemmEx, ArgumentRules) {
  StridedCase c;
  ASSERT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4), CUBLAS_STATUS_SUCCESS) << last_message(CUBLAS_STATUS_INVALID_VALUE);
  struct Bad {
    cublasOperation_t ta;
    int m, lda, ldb, ldc;
    const char* says;
  };
  const Bad bad[] = {
      {CUBLAS_OP_N, 4, 3, 5, 4, "lda = 3 is less than max(1, m = 4)"},
      {CUBLAS_OP_T, 4, 4, 5, 4, "lda = 4 is less than max(1, k = 5)"},  // transposed: A is k x m
      {CUBLAS_OP_N, 4, 4, 4, 4, "ldb = 4 is less than max(1, k = 5)"},
      {CUBLAS_OP_N, 4, 4, 5, 3, "ldc = 3 is less than max(1, m = 4)"},
      {CUBLAS_OP_N, -1, 4, 5, 4, "none may be negative"},
      {static_cast<cublasOperation_t>(7), 4, 4, 5, 4, "use CUBLAS_OP_N"},
  };
  for (const Bad& x : bad) {
    EXPECT_EQ(c.call(x.ta, x.m, x.lda, 20, x.ldb, x.ldc), CUBLAS_STATUS_INVALID_VALUE) << x.says;
    const std::string msg = last_message(CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(msg.rfind("pb_emu: cublasGemmStridedBatchedEx: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(x.says), std::string::npos) << msg;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(EmuCublasGemmEx, EveryBatchMustLieInItsAllocation) {
  StridedCase c;
  // A stride one element too long: batch 1 runs 2 bytes past A's 80.
  EXPECT_EQ(c.call(CUBLAS_OP_N, 4, 4, 21, 5, 4), CUBLAS_STATUS_INVALID_VALUE);
  const std::string msg = last_message(CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(msg.find("A of batch 1 ["), std::string::npos) << msg;
  EXPECT_NE(msg.find("runs 2 bytes past the end"), std::string::npos) << msg;
}

TEST(EmuCublasGemmEx, UnsupportedTypesAlgosAndHandles) {
  StridedCase c;
  EXPECT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4, CUDA_R_16F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(last_message(CUBLAS_STATUS_NOT_SUPPORTED).find("A CUDA_R_16BF, B CUDA_R_16BF, C CUDA_R_16F"),
            std::string::npos)
      << last_message(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4, CUDA_R_32F, nullptr, CUBLAS_COMPUTE_32F_FAST_TF32),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4, CUDA_R_32F, nullptr, CUBLAS_COMPUTE_16F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4, CUDA_R_32F, nullptr, CUBLAS_COMPUTE_32F, static_cast<cublasGemmAlgo_t>(42)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // No handle, a destroyed one.
  EXPECT_EQ(cublasGemmStridedBatchedEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 5, &c.alpha, c.a.p, CUDA_R_16BF, 4, 20,
                                       c.b.p, CUDA_R_16BF, 5, 15, &c.beta, c.c.p, CUDA_R_32F, 4, 12, 2,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_INITIALIZED);
  cublasHandle_t gone = nullptr;
  ASSERT_EQ(cublasCreate(&gone), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasDestroy(gone), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4, CUDA_R_32F, gone), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  // A device pointer as alpha while the pointer mode is host.
  EXPECT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4, CUDA_R_32F, nullptr, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, c.c.p),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("pointer mode is host"), std::string::npos);
}

// In device pointer mode alpha is read when the work runs, not when it is queued.
TEST(EmuCublasGemmEx, DevicePointerModeReadsAlphaWhenRunning) {
  Stored A(CUDA_R_32F, 1, 1, 1), B(CUDA_R_32F, 1, 1, 1), C(CUDA_R_32F, 1, 1, 1);
  A.v = {3};
  B.v = {5};
  Dev a(A, 0), b(B, 0), c(C, 0), scalars(8);
  const float ab[2] = {1, 0};
  std::vector<unsigned char> bytes(8);
  std::memcpy(bytes.data(), ab, 8);
  scalars.upload(bytes);
  BlasHandle h;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cublasSetStream(h.h, s), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetPointerMode(h.h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  const float* alpha = static_cast<const float*>(scalars.p);
  ASSERT_EQ(cublasGemmStridedBatchedEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, alpha, a.p, CUDA_R_32F, 1, 1, b.p,
                                       CUDA_R_32F, 1, 1, alpha + 1, c.p, CUDA_R_32F, 1, 1, 1, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  static_cast<float*>(scalars.p)[0] = 2;  // the emulation's device memory is host memory
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  float got = 0;
  std::memcpy(&got, c.download().data(), 4);
  EXPECT_EQ(got, 30.0f);
  cudaStreamDestroy(s);
}

TEST(EmuCublasGemmEx, Tf32MathModeRoundsFp32Inputs) {
  Stored A(CUDA_R_32F, 1, 1, 1), B(CUDA_R_32F, 1, 1, 1), C(CUDA_R_32F, 1, 1, 1);
  A.v = {1.0f + std::ldexp(1.0f, -12)};  // not a tf32 value: rounds to 1
  B.v = {1.0f};
  Dev a(A, 0), b(B, 0), c(C, 0);
  BlasHandle h;
  const float one = 1, zero = 0;
  auto run = [&]() {
    EXPECT_EQ(cublasGemmStridedBatchedEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.p, CUDA_R_32F, 1, 1, b.p,
                                         CUDA_R_32F, 1, 1, &zero, c.p, CUDA_R_32F, 1, 1, 1, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    float got = 0;
    std::memcpy(&got, c.download().data(), 4);
    return got;
  };
  EXPECT_EQ(run(), A.v[0]);
  ASSERT_EQ(cublasSetMathMode(h.h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(run(), 1.0f);
}

// The message belongs to the status it was recorded with; another status reads
// the library's generic sentence.
TEST(EmuCublasGemmEx, StatusStringIsTheLastFailuresMessage) {
  StridedCase c;
  ASSERT_EQ(c.call(CUBLAS_OP_N, 4, 3, 20, 5, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(last_message(CUBLAS_STATUS_INVALID_VALUE).rfind("pb_emu: cublasGemmStridedBatchedEx: lda = 3", 0), 0u);
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "the functionality requested is not supported");
  EXPECT_STREQ(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE), cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE));
}

// ---- grouped batched GEMM ---------------------------------------------------------------

// Groups of different shapes, transposes, leading dimensions, alpha and beta, and
// sizes (2, 1 and 0 problems), every problem its own matrices; small integers, so
// every result is exact. The pointer arrays are device memory, as the library requires.
struct GroupedCase {
  struct Group {
    cublasOperation_t ta, tb;
    int m, n, k, size;
    float alpha, beta;
  };
  std::vector<Group> groups;
  cudaDataType type;
  std::vector<std::unique_ptr<Stored>> A, B, C;
  std::vector<std::unique_ptr<Dev>> a, b, c;
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  std::unique_ptr<Dev> ptrs;
  int problems = 0;
  static constexpr int kAllGroups = -1000;  // call(): pass group_count = the number of groups

  GroupedCase(cudaDataType t, std::vector<Group> g) : groups(std::move(g)), type(t) {
    std::vector<const void*> pa, pb, pc;
    int seed = 0;
    for (const auto& x : groups) {
      const bool tA = x.ta != CUBLAS_OP_N, tB = x.tb != CUBLAS_OP_N;
      const int ar = tA ? x.k : x.m, ac = tA ? x.m : x.k, br = tB ? x.n : x.k, bc = tB ? x.k : x.n;
      ta.push_back(x.ta);
      tb.push_back(x.tb);
      m.push_back(x.m);
      n.push_back(x.n);
      k.push_back(x.k);
      lda.push_back(ar + 1);
      ldb.push_back(br + 2);
      ldc.push_back(x.m + 3);
      size.push_back(x.size);
      alpha.push_back(x.alpha);
      beta.push_back(x.beta);
      for (int j = 0; j < x.size; ++j, ++problems) {
        A.push_back(std::make_unique<Stored>(t, ar, ac, ar + 1));
        B.push_back(std::make_unique<Stored>(t, br, bc, br + 2));
        C.push_back(std::make_unique<Stored>(t, x.m, x.n, x.m + 3));
        A.back()->fill(200 + seed, true);
        B.back()->fill(300 + seed, true);
        C.back()->fill(400 + seed++, true);
        a.push_back(std::make_unique<Dev>(*A.back(), NAN));
        b.push_back(std::make_unique<Dev>(*B.back(), NAN));
        c.push_back(std::make_unique<Dev>(*C.back(), 777.0f));
        pa.push_back(a.back()->p);
        pb.push_back(b.back()->p);
        pc.push_back(c.back()->p);
      }
    }
    std::vector<const void*> all(pa);
    all.insert(all.end(), pb.begin(), pb.end());
    all.insert(all.end(), pc.begin(), pc.end());
    ptrs = std::make_unique<Dev>(all.size() * sizeof(void*));
    std::vector<unsigned char> bytes(all.size() * sizeof(void*));
    std::memcpy(bytes.data(), all.data(), bytes.size());
    ptrs->upload(bytes);
  }
  void* const* arrays() const { return static_cast<void* const*>(ptrs->p); }
  cublasStatus_t call(cublasHandle_t h, cublasComputeType_t compute = CUBLAS_COMPUTE_32F, cudaDataType ctype = CUDA_R_32F,
                      int count = kAllGroups, void* const* A_arr = nullptr) {
    const auto* p = arrays();
    return cublasGemmGroupedBatchedEx(h, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
                                      A_arr ? A_arr : p, type, lda.data(), p + problems, type, ldb.data(), beta.data(),
                                      p + 2 * problems, ctype == CUDA_R_32F ? type : ctype, ldc.data(),
                                      count == kAllGroups ? static_cast<int>(groups.size()) : count, size.data(), compute);
  }
  void check() const {
    int problem = 0, bad = 0;
    for (std::size_t g = 0; g < groups.size(); ++g)
      for (int j = 0; j < groups[g].size; ++j, ++problem) {
        const auto& x = groups[g];
        const auto ref = reference(*A[problem], x.ta != CUBLAS_OP_N, *B[problem], x.tb != CUBLAS_OP_N, C[problem].get(),
                                   x.alpha, x.beta, x.m, x.n, x.k, 1);
        const auto got = c[problem]->download();
        for (int col = 0; col < x.n; ++col)
          for (int row = 0; row < x.m; ++row) {
            const float want = quantize(static_cast<float>(ref[static_cast<std::size_t>(col * x.m + row)]), type);
            const float v = C[problem]->read(got.data(), 0, row, col);
            if (v != want && ++bad <= 5)
              ADD_FAILURE() << "group " << g << " problem " << problem << " C(" << row << "," << col << ") = " << v
                            << ", want " << want;
          }
      }
    EXPECT_EQ(bad, 0);
  }
};

std::vector<GroupedCase::Group> three_groups() {
  return {{CUBLAS_OP_T, CUBLAS_OP_N, 5, 3, 7, 2, 1.0f, 0.0f},
          {CUBLAS_OP_N, CUBLAS_OP_T, 4, 6, 2, 1, 2.0f, -1.0f},
          {CUBLAS_OP_T, CUBLAS_OP_N, 3, 3, 3, 0, 1.0f, 0.0f}};
}

TEST(EmuCublasGrouped, EveryGroupItsOwnShapeTransposeAndScalars) {
  for (cudaDataType t : {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F}) {
    SCOPED_TRACE(t);
    GroupedCase g(t, three_groups());
    BlasHandle h;
    const cublasStatus_t st = g.call(h.h);
    ASSERT_EQ(st, CUBLAS_STATUS_SUCCESS) << last_message(st);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    g.check();
  }
}

TEST(EmuCublasGrouped, ArgumentRules) {
  BlasHandle h;
  GroupedCase g(CUDA_R_16BF, three_groups());
  auto expect = [&](cublasStatus_t got, cublasStatus_t want, const char* says) {
    EXPECT_EQ(got, want) << says;
    const std::string msg = last_message(want);
    EXPECT_EQ(msg.rfind("pb_emu: cublasGemmGroupedBatchedEx: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
  };
  expect(g.call(h.h, CUBLAS_COMPUTE_32F, CUDA_R_32F, -1 - 1), CUBLAS_STATUS_INVALID_VALUE, "group_count = -2 is negative");
  EXPECT_EQ(g.call(h.h, CUBLAS_COMPUTE_32F, CUDA_R_32F, 0), CUBLAS_STATUS_SUCCESS);  // no groups: nothing to do
  g.lda[1] = 3;  // group 1: A is m x k = 4 x 2, ld 3 < 4
  expect(g.call(h.h), CUBLAS_STATUS_INVALID_VALUE, "group 1: lda = 3 is less than max(1, m = 4)");
  g.lda[1] = 5;
  g.size[2] = -1;
  expect(g.call(h.h), CUBLAS_STATUS_INVALID_VALUE, "group 2: m = 3, n = 3, k = 3, group_size = -1: none may be negative");
  g.size[2] = 0;
  g.ta[0] = static_cast<cublasOperation_t>(9);
  expect(g.call(h.h), CUBLAS_STATUS_INVALID_VALUE, "group 0: transa 9");
  g.ta[0] = CUBLAS_OP_T;
  // A, B and C of one type; compute types beyond 32F are not emulated.
  expect(g.call(h.h, CUBLAS_COMPUTE_32F, CUDA_R_16F), CUBLAS_STATUS_NOT_SUPPORTED, "C CUDA_R_16F");
  expect(g.call(h.h, CUBLAS_COMPUTE_16F), CUBLAS_STATUS_NOT_SUPPORTED, "is not emulated");
  // The pointer arrays must be device memory.
  std::vector<void*> host_ptrs(3, g.a[0]->p);
  expect(g.call(h.h, CUBLAS_COMPUTE_32F, CUDA_R_32F, GroupedCase::kAllGroups, host_ptrs.data()), CUBLAS_STATUS_INVALID_VALUE, "Aarray");
  // Null host arrays; device pointer mode is not emulated.
  EXPECT_EQ(cublasGemmGroupedBatchedEx(h.h, nullptr, g.tb.data(), g.m.data(), g.n.data(), g.k.data(), g.alpha.data(),
                                       g.arrays(), CUDA_R_16BF, g.lda.data(), g.arrays() + 3, CUDA_R_16BF,
                                       g.ldb.data(), g.beta.data(), g.arrays() + 6, CUDA_R_16BF, g.ldc.data(), 3,
                                       g.size.data(), CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("transa_array is null"), std::string::npos);
  ASSERT_EQ(cublasSetPointerMode(h.h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  expect(g.call(h.h), CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_POINTER_MODE_DEVICE");
  ASSERT_EQ(cublasSetPointerMode(h.h, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGemmGroupedBatchedEx(nullptr, g.ta.data(), g.tb.data(), g.m.data(), g.n.data(), g.k.data(),
                                       g.alpha.data(), g.arrays(), CUDA_R_16BF, g.lda.data(), g.arrays() + 3,
                                       CUDA_R_16BF, g.ldb.data(), g.beta.data(), g.arrays() + 6, CUDA_R_16BF,
                                       g.ldc.data(), 3, g.size.data(), CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_NOT_INITIALIZED);
  // After all the refusals the valid call still runs, and nothing was written before.
  ASSERT_EQ(g.call(h.h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  g.check();
}

// A problem's matrix running past its allocation is an illegal address when the
// work runs (the pointers are only read then). Sticky, hence the child process.
// ---- cublasGemmBatchedEx (pointer arrays) --------------------------------------------------

// Three problems, each on matrices of its own allocation (no common stride), as
// the prefill attention's cuBLAS path calls it: 16-bit inputs, fp32 or 16-bit out.
void check_pointer_batched(cublasOperation_t ta, cublasOperation_t tb, cudaDataType ab, cudaDataType cd, int m, int n,
                           int k, float alpha, float beta) {
  const bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
  const int ar = tA ? k : m, ac = tA ? m : k, br = tB ? n : k, bc = tB ? k : n;
  constexpr int kProblems = 3;
  std::vector<std::unique_ptr<Stored>> A, B, C;
  std::vector<std::unique_ptr<Dev>> a, b, c;
  std::vector<const void*> ptrs(3 * kProblems);
  for (int i = 0; i < kProblems; ++i) {
    A.push_back(std::make_unique<Stored>(ab, ar, ac, ar + 1));
    B.push_back(std::make_unique<Stored>(ab, br, bc, br + 2));
    C.push_back(std::make_unique<Stored>(cd, m, n, m + 3));
    A.back()->fill(500 + i, true);
    B.back()->fill(600 + i, true);
    C.back()->fill(700 + i, true);
    a.push_back(std::make_unique<Dev>(*A.back(), NAN));
    b.push_back(std::make_unique<Dev>(*B.back(), NAN));
    c.push_back(std::make_unique<Dev>(*C.back(), 777.0f));
    // Problem order reversed against allocation order: no stride could describe it.
    ptrs[static_cast<std::size_t>(kProblems - 1 - i)] = a.back()->p;
    ptrs[static_cast<std::size_t>(2 * kProblems - 1 - i)] = b.back()->p;
    ptrs[static_cast<std::size_t>(3 * kProblems - 1 - i)] = c.back()->p;
  }
  Dev arrays(ptrs.size() * sizeof(void*));
  std::vector<unsigned char> bytes(arrays.n);
  std::memcpy(bytes.data(), ptrs.data(), bytes.size());
  arrays.upload(bytes);
  const auto* p = static_cast<const void* const*>(arrays.p);
  BlasHandle h;
  const cublasStatus_t st =
      cublasGemmBatchedEx(h.h, ta, tb, m, n, k, &alpha, p, ab, static_cast<int>(A[0]->ld), p + kProblems, ab,
                          static_cast<int>(B[0]->ld), &beta, const_cast<void* const*>(p + 2 * kProblems), cd,
                          static_cast<int>(C[0]->ld), kProblems, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  ASSERT_EQ(st, CUBLAS_STATUS_SUCCESS) << last_message(st);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int bad = 0;
  for (std::size_t i = 0; i < kProblems; ++i) {
    const auto ref = reference(*A[i], tA, *B[i], tB, C[i].get(), alpha, beta, m, n, k, 1);
    const auto got = c[i]->download();
    for (int j = 0; j < n; ++j) {
      for (int r = 0; r < m; ++r) {
        const float want = quantize(static_cast<float>(ref[static_cast<std::size_t>(j * m + r)]), cd);
        const float g = C[i]->read(got.data(), 0, r, j);
        if (g != want && ++bad <= 5)
          ADD_FAILURE() << "problem (allocation) " << i << " C(" << r << "," << j << ") = " << g << ", want " << want;
      }
      for (int r = m; r < C[i]->ld && j + 1 < n; ++r)
        if (C[i]->read(got.data(), 0, r, j) != quantize(777.0f, cd) && ++bad <= 5)
          ADD_FAILURE() << "padding of C written at row " << r;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(EmuCublasBatched, PointerArraysLikeThePrefillCublasPath) {
  check_pointer_batched(CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_32F, 7, 5, 6, 1.0f, 0.0f);
  check_pointer_batched(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16F, CUDA_R_16F, 6, 7, 5, 1.0f, 0.0f);
  check_pointer_batched(CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_32F, CUDA_R_32F, 4, 3, 9, 2.0f, -1.0f);
}

TEST(EmuCublasBatched, ArgumentRules) {
  BlasHandle h;
  Dev m(4 * 4 * 4), arrays(3 * sizeof(void*));
  const void* ptrs[3] = {m.p, m.p, m.p};
  std::vector<unsigned char> bytes(sizeof ptrs);
  std::memcpy(bytes.data(), ptrs, sizeof ptrs);
  arrays.upload(bytes);
  const auto* p = static_cast<const void* const*>(arrays.p);
  const float one = 1, zero = 0;
  // lda below the rows, as the strided call refuses it.
  EXPECT_EQ(cublasGemmBatchedEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, CUDA_R_32F, 3, p + 1, CUDA_R_32F, 4,
                                &zero, const_cast<void* const*>(p + 2), CUDA_R_32F, 4, 1, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(last_message(CUBLAS_STATUS_INVALID_VALUE).rfind("pb_emu: cublasGemmBatchedEx: lda = 3", 0), 0u);
  // Pointer arrays shorter than the batch (2 problems, 1 pointer left in Carray's allocation).
  EXPECT_EQ(cublasGemmBatchedEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, CUDA_R_32F, 4, p + 1, CUDA_R_32F, 4,
                                &zero, const_cast<void* const*>(p + 2), CUDA_R_32F, 4, 2, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("Carray"), std::string::npos);
  // The one problem, square and in range, runs.
  EXPECT_EQ(cublasGemmBatchedEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, CUDA_R_32F, 4, p + 1, CUDA_R_32F, 4,
                                &zero, const_cast<void* const*>(p + 2), CUDA_R_32F, 4, 1, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(EmuCublasGroupedDeathTest, AProblemPastItsAllocationFailsWhenItRuns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        BlasHandle h;
        GroupedCase g(CUDA_R_32F, three_groups());
        g.k[0] = 8;  // group 0's A (k x m) now needs one more row than allocated
        g.lda[0] = 9;
        g.ldb[0] = 10;
        if (g.call(h.h) != CUBLAS_STATUS_SUCCESS) std::exit(2);
        const cudaError_t e = cudaDeviceSynchronize();
        std::fprintf(stderr, "%s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
        std::exit(e == cudaErrorIllegalAddress ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "cublasGemmGroupedBatchedEx \\(group 0, problem 0\\) \\(running on its stream\\): A");
}

// ---- handles ------------------------------------------------------------------------------

TEST(EmuCublasHandles, VersionsNamesAndWorkspace) {
  int major = 0, minor = -1, patch = -1;
  EXPECT_EQ(cublasGetProperty(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGetProperty(MINOR_VERSION, &minor), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGetProperty(PATCH_LEVEL, &patch), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(major, CUBLAS_VER_MAJOR);
  EXPECT_EQ(major * 10000 + minor * 100 + patch, CUBLAS_VERSION);
  EXPECT_EQ(cublasLtGetVersion(), static_cast<std::size_t>(CUBLAS_VERSION));
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_ARCH_MISMATCH), "CUBLAS_STATUS_ARCH_MISMATCH");
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "the operation completed successfully");

  BlasHandle h;
  cudaStream_t s = nullptr, got = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cublasGetStream(h.h, &got), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, nullptr);  // the legacy stream until set
  EXPECT_EQ(cublasSetStream(h.h, s), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGetStream(h.h, &got), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, s);
  Dev ws(1 << 20);
  EXPECT_EQ(cublasSetWorkspace(h.h, ws.p, ws.n), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetWorkspace(h.h, static_cast<char*>(ws.p) + 16, 4096), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("not aligned to 256 bytes"), std::string::npos);
  EXPECT_EQ(cublasSetWorkspace(h.h, ws.p, ws.n + 256), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(last_message(CUBLAS_STATUS_INVALID_VALUE).find("workspace"), std::string::npos);
  cudaStreamDestroy(s);
}

// ---- streams and graphs --------------------------------------------------------------------------

TEST(EmuCublasStream, LtResultAppearsOnlyWhenTheStreamIsSynchronised) {
  Bf16Case c;
  c.A.fill(81, true);
  c.B.fill(82, true);
  c.a.upload(c.A.encode(0));
  c.b.upload(c.B.encode(0));
  ASSERT_EQ(cudaMemset(c.d.p, 0, c.d.n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cublasLtMatmul(c.lt.h, c.descs.op, &c.alpha, c.a.p, c.descs.a, c.b.p, c.descs.b, &c.beta, c.d.p, c.descs.d,
                           c.d.p, c.descs.d, nullptr, nullptr, 0, s),
            CUBLAS_STATUS_SUCCESS);
  const auto before = c.d.peek();
  EXPECT_EQ(before, std::vector<unsigned char>(c.d.n, 0)) << "the matmul ran before anything waited for its stream";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const auto after = c.d.peek();
  const auto ref = reference(c.A, true, c.B, false, nullptr, 1, 0, 8, 4, 16, 1);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 8; ++i) EXPECT_EQ(c.D.read(after.data(), 0, i, j), ref[static_cast<std::size_t>(j * 8 + i)]);
  cudaStreamDestroy(s);
}

TEST(EmuCublasStream, GemmExRunsOnTheHandlesStream) {
  StridedCase c;
  std::vector<unsigned char> ones(c.a.n);
  for (std::size_t i = 0; i < ones.size(); i += 2) {
    const std::uint16_t one = num::float_to_bf16(1.0f);
    std::memcpy(ones.data() + i, &one, 2);
  }
  c.a.upload(ones);
  c.b.upload(std::vector<unsigned char>(ones.begin(), ones.begin() + static_cast<std::ptrdiff_t>(c.b.n)));
  ASSERT_EQ(cudaMemset(c.c.p, 0, c.c.n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cublasSetStream(c.h.h, s), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(c.call(CUBLAS_OP_N, 4, 4, 20, 5, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.c.peek(), std::vector<unsigned char>(c.c.n, 0));
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const auto after = c.c.peek();
  std::vector<float> f(after.size() / 4);
  std::memcpy(f.data(), after.data(), after.size());
  for (float x : f) EXPECT_EQ(x, 5.0f);  // k = 5 ones
  cudaStreamDestroy(s);
}

TEST(EmuCublasStream, CapturedLtMatmulReplaysWithTheInputsOfTheMoment) {
  Bf16Case c;
  c.A.fill(91, true);
  c.B.fill(92, true);
  c.a.upload(c.A.encode(0));
  c.b.upload(c.B.encode(0));
  ASSERT_EQ(cudaMemset(c.d.p, 0, c.d.n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  ASSERT_EQ(c.descs.heuristic(c.lt.h, r, found), CUBLAS_STATUS_SUCCESS);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cublasLtMatmul(c.lt.h, c.descs.op, &c.alpha, c.a.p, c.descs.a, c.b.p, c.descs.b, &c.beta, c.d.p, c.descs.d,
                           c.d.p, c.descs.d, &r.algo, nullptr, 0, s),
            CUBLAS_STATUS_SUCCESS);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(c.d.peek(), std::vector<unsigned char>(c.d.n, 0)) << "capturing ran the matmul";

  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("replay " + std::to_string(round));
    if (round == 1) {  // new inputs: the replay reads memory when it runs
      c.A.fill(93, true);
      c.a.upload(c.A.encode(0));
    }
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto got = c.d.download();
    const auto ref = reference(c.A, true, c.B, false, nullptr, 1, 0, 8, 4, 16, 1);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 8; ++i) EXPECT_EQ(c.D.read(got.data(), 0, i, j), ref[static_cast<std::size_t>(j * 8 + i)]);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}


// A graph replayed after one of its matrices was freed: the work finds out when
// it runs and fails the context, as an illegal address does on a GPU. Sticky
// errors last for the process, hence the child process.
TEST(EmuCublasStreamDeathTest, ReplayAfterFreeIsAnIllegalAddress) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Bf16Case c;
        cudaStream_t s = nullptr;
        void* b = nullptr;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&b, c.b.n) != cudaSuccess ||
            cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess ||
            cublasLtMatmul(c.lt.h, c.descs.op, &c.alpha, c.a.p, c.descs.a, b, c.descs.b, &c.beta, c.d.p, c.descs.d,
                           c.d.p, c.descs.d, nullptr, nullptr, 0, s) != CUBLAS_STATUS_SUCCESS ||
            cudaStreamEndCapture(s, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess ||
            cudaFree(b) != cudaSuccess || cudaGraphLaunch(exec, s) != cudaSuccess)
          std::exit(2);
        const cudaError_t e = cudaStreamSynchronize(s);
        std::fprintf(stderr, "%s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
        std::exit(e == cudaErrorIllegalAddress ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "cublasLtMatmul \\(running on its stream\\): B .* is not in any device allocation");
}

}  // namespace
