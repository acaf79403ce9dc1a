// cuBLASLt linear layer. Row-major Y[M,N] = X[M,K] W^T is, read column-major
// (cuBLASLt's convention), Y^T (N x M, ld N) = W (stored K x N, ld K)^T times
// X^T (stored K x M, ld K): A = W with TRANSA = T, B = X with TRANSB = N,
// m = N, n = M, k = K. That is the "TN" layout fp8 and FP4 require, so every type uses it.
//
// nvfp4 and mxfp4 run as cuBLASLt's block-scaled matmul: A and B are CUDA_R_4F_E2M1
// (two values a byte), each with a tensor of block scales along K
// (CUBLASLT_MATMUL_DESC_A/B_SCALE_MODE VEC16_UE4M3 for nvfp4, VEC32_UE8M0 for mxfp4,
// CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER the tensors, in cuBLAS's tiled layout:
// linear_verify.hpp), D bf16; nvfp4's two fp32 per-tensor scales are folded into
// alpha. W's scales go with A, X's with B.
#include "cuda/linear_cublaslt.hpp"

#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cuda/cuda_op.hpp"
#include "cuda/linear_verify.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench::cuda {

namespace {

cudaDataType_t storage_type(DType t) {
  switch (t) {
    case DType::fp32:
    case DType::tf32: return CUDA_R_32F;
    case DType::fp16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::fp8: return CUDA_R_8F_E4M3;
    case DType::nvfp4:
    case DType::mxfp4: return CUDA_R_4F_E2M1;
    case DType::int8:
    case DType::fp6: break;
  }
  throw Unsupported("cuBLASLt linear: " + std::string(to_string(t)) + " is not supported");
}

cublasComputeType_t compute_type(DType t) {
  return t == DType::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

class CublasLtLinearOp final : public PreparedOp {
 public:
  CublasLtLinearOp(Context& ctx, const OpRequest& r)
      : ctx_(ctx),
        shape_(LinearShape::of(r.shape)),
        type_(r.dtype),
        operands_(make_linear_operands(shape_, r.dtype, linear_output_type(r.dtype), r.seed, ctx.stream)),
        matmul_(ctx, r.dtype, shape_, operands_.X.get(), operands_.W.get(), operands_.Y.get()) {}
  void run() override { matmul_.run(); }
  void verify() override {
    run();
    verify_linear(shape_, type_, linear_output_type(type_), operands_.view(), ctx_.stream, "cuBLASLt linear " + matmul_.describe());
  }
  std::vector<float> output_values() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(operands_.Y.get(), linear_output_type(type_), shape_.M * shape_.N, ctx_.stream);
  }

 private:
  Context& ctx_;
  LinearShape shape_;
  DType type_;
  LinearOperands operands_;
  CublasLtLinear matmul_;
};

// The block-scaled 4-bit types: X and W with their block scales (and nvfp4's tensor
// scales, in alpha), filled on the host from the seed, Y bf16.
class CublasLtBlockScaledOp final : public PreparedOp {
 public:
  CublasLtBlockScaledOp(Context& ctx, const OpRequest& r)
      : ctx_(ctx),
        shape_(LinearShape::of(r.shape)),
        operands_(make_block_scaled_operands(shape_, r.dtype, r.seed, ctx.stream)),
        scales_{operands_.X_scales.get(), operands_.W_scales.get(), operands_.x_tensor_scale * operands_.w_tensor_scale},
        matmul_(ctx, r.dtype, shape_, operands_.X.get(), operands_.W.get(), operands_.Y.get(), &scales_) {}
  void run() override { matmul_.run(); }
  void verify() override {
    run();
    verify_linear_block_scaled(shape_, operands_, ctx_.stream, "cuBLASLt linear " + matmul_.describe());
  }
  std::vector<float> output_values() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(operands_.Y.get(), linear_output_type(operands_.type), shape_.M * shape_.N, ctx_.stream);
  }

 private:
  Context& ctx_;
  LinearShape shape_;
  BlockScaledOperands operands_;
  BlockScales scales_;
  CublasLtLinear matmul_;
};

// The bytes the block-scaled types allocate beyond the declared footprint: their
// scale tensors' padding to whole 128 x 4 tiles (matrix_bytes counts the scales alone).
std::uint64_t scale_padding_bytes(const OpRequest& r) {
  const auto bs = block_scaling(r.dtype);
  if (!bs) return 0;
  const LinearShape s = LinearShape::of(r.shape);
  const std::uint64_t cols = (s.K + bs->block - 1) / bs->block;
  return block_scale_tensor_bytes(s.M, cols) + block_scale_tensor_bytes(s.N, cols) - (s.M + s.N) * cols;
}

}  // namespace

std::optional<std::string> cublaslt_linear_unsupported(DType t, const LinearShape& s, int cc_major, int cc_minor) {
  if (t == DType::int8) return "cuBLASLt linear: int8 is not benchmarked on the CUDA backend";
  if (s.M == 0 || s.N == 0 || s.K == 0) return "cuBLASLt linear: M, N and K must be positive";
  const std::uint64_t limit = (1ull << 31) - 1;  // cuBLASLt takes 64-bit sizes, but leading dimensions fit in int here
  if (s.M > limit || s.N > limit || s.K > limit) return "cuBLASLt linear: a dimension exceeds 2^31 - 1";
  if (const auto bs = block_scaling(t)) {
    const std::string name(to_string(t));
    if (cc_major * 10 + cc_minor < 100)
      return name + " GEMMs (cuBLASLt's block-scaled matmul) need compute capability 10.0 or newer; this device is " +
             std::to_string(cc_major) + "." + std::to_string(cc_minor);
    if (s.K % 32 != 0)
      return "cuBLASLt " + name + " matmuls need K to be a multiple of 32 (16-byte aligned rows of 4-bit X and W, " +
             "whole blocks of " + std::to_string(bs->block) + "); got K = " + std::to_string(s.K);
    if (s.N % 8 != 0)
      return "cuBLASLt " + name + " matmuls need N to be a multiple of 8 (16-byte aligned bf16 rows of Y); got N = " +
             std::to_string(s.N);
  }
  if (t == DType::fp8) {
    if (cc_major * 10 + cc_minor < 89)
      return "fp8 (e4m3) matmuls need compute capability 8.9 or newer; this device is " + std::to_string(cc_major) + "." +
             std::to_string(cc_minor);
    if (s.K % 16 != 0 || s.N % 16 != 0)
      return "cuBLASLt fp8 matmuls need K and N to be multiples of 16 (16-byte aligned columns); got N = " +
             std::to_string(s.N) + ", K = " + std::to_string(s.K);
  }
  return std::nullopt;
}

CublasLtLinear::CublasLtLinear(Context& ctx, DType t, const LinearShape& s, const void* X, const void* W, void* Y,
                               const BlockScales* scales)
    : ctx_(ctx), X_(X), W_(W), Y_(Y) {
  try {
    configure(t, s, scales);
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void CublasLtLinear::configure(DType t, const LinearShape& s, const BlockScales* scales) {
  Context& ctx = ctx_;
  if (auto why = cublaslt_linear_unsupported(t, s, ctx.cc_major, ctx.cc_minor)) throw Unsupported(*why);
  const auto bs = block_scaling(t);
  if (bs && !(scales && scales->X_scales && scales->W_scales))
    throw std::logic_error("CublasLtLinear: " + std::string(to_string(t)) + " needs its block scales");
  const cudaDataType_t in = storage_type(t), out = storage_type(linear_output_type(t));
  PB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, compute_type(t), CUDA_R_32F));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
  if (t == DType::fp8) {
    // Per-tensor scales of 1: the data is generated in fp8's range already.
    unit_scale_ = DeviceBuffer(sizeof(float));
    const float one = 1.0f;
    upload(unit_scale_.get(), &one, sizeof one, ctx.stream);
    const void* scale = unit_scale_.get();
    PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale));
    PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof scale));
  }
  std::string scale_mode;
  if (bs) {
    // Block scales along K for both operands (A = W, B = X), one mode for both; the
    // scale pointers are the scale tensors; alpha carries nvfp4's tensor scales.
    const std::int32_t mode = t == DType::nvfp4 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3
                                                : CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    scale_mode = t == DType::nvfp4 ? "VEC16_UE4M3" : "VEC32_UE8M0";
    PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
    PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
    const void* a_scale = scales->W_scales;
    const void* b_scale = scales->X_scales;
    PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
    PB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
    alpha_ = scales->alpha;
  }
  PB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, in, s.K, s.N, static_cast<std::int64_t>(s.K)));
  PB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, in, s.K, s.M, static_cast<std::int64_t>(s.K)));
  PB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, out, s.N, s.M, static_cast<std::int64_t>(s.N)));

  cublasLtMatmulPreference_t pref = nullptr;
  PB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t workspace = ctx.workspace.bytes();
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                           sizeof workspace);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt, op_, a_, b_, d_, d_, pref, 1, &algo_, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::ostringstream shape;
  shape << to_string(t) << " M=" << s.M << " N=" << s.N << " K=" << s.K;
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0))
    throw Unsupported("cublasLtMatmulAlgoGetHeuristic found no algorithm for " + shape.str());
  PB_CUBLAS_CHECK(st);

  int algo_id = -1;
  std::size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo_.algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &written);
  std::ostringstream os;
  os << shape.str() << " (cublasLtMatmul TN, heuristic algo " << algo_id << ", workspace " << algo_.workspaceSize
     << " B, compute " << (t == DType::tf32 ? "32F_FAST_TF32" : "32F");
  if (bs) os << ", block scales " << scale_mode << ", alpha " << alpha_;
  os << ")";
  description_ = os.str();
}

CublasLtLinear::~CublasLtLinear() { release(); }

void CublasLtLinear::release() {
  // Destroy calls only fail on invalid handles; nothing to do about it here.
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  d_ = b_ = a_ = nullptr;
  op_ = nullptr;
}

void CublasLtLinear::run() {
  const float beta = 0.0f;
  PB_CUBLAS_CHECK(cublasLtMatmul(ctx_.cublaslt, op_, &alpha_, W_, a_, X_, b_, &beta, Y_, d_, Y_, d_, &algo_.algo,
                                 ctx_.workspace.get(), ctx_.workspace.bytes(), ctx_.stream));
}

}  // namespace phasebench::cuda

// The vendor library's linear layer (kind linear, impl blas): every dtype but
// int8; fp8 (e4m3) from compute capability 8.9; nvfp4 and mxfp4 taken on every
// device, and refused below compute capability 10.0 with the reason (a skipped
// point), their scale tensors' padding as scratch. Its workspace is the context's.
PHASEBENCH_CUDA_OPS(linear_cublaslt) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kLinear, Impl::blas,
                [](DType t, const Context& ctx) {
                  if (t == DType::fp8) return ctx.cc_major * 10 + ctx.cc_minor >= 89;
                  if (block_scaling(t)) return true;
                  return t == DType::fp32 || t == DType::tf32 || t == DType::bf16 || t == DType::fp16;
                },
                {},
                limits_plan(
                    [](const OpRequest& r, const Context& ctx) {
                      return cublaslt_linear_unsupported(r.dtype, LinearShape::of(r.shape), ctx.cc_major, ctx.cc_minor);
                    },
                    [](const OpRequest& r, const Context&) { return scale_padding_bytes(r); }),
                [](Context& ctx, const OpRequest& r, const OpPlan&) -> std::unique_ptr<PreparedOp> {
                  if (block_scaling(r.dtype)) return std::make_unique<CublasLtBlockScaledOp>(ctx, r);
                  return std::make_unique<CublasLtLinearOp>(ctx, r);
                }});
}
