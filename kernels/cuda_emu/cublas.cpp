// pb_emu: cuBLAS and cuBLASLt for the functional CUDA emulation. Handles and argument
// checks follow the real libraries (same statuses, plus a sentence saying why); the
// arithmetic is a float reference GEMM (OpenBLAS sgemm) queued as stream work, and for
// cuBLASLt's block-scaled FP4 matmul (NVFP4, MXFP4) the operands dequantised exactly
// from their e2m1 values and tiled block scales and multiplied in double (dgemm).
#include <cblas.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../common/numeric.hpp"
#include "runtime_internal.hpp"

// The libraries' opaque handle types.
struct cublasContext {
  cudaStream_t stream = nullptr;  // the legacy stream until cublasSetStream
  void* workspace = nullptr;      // user workspace (cublasSetWorkspace), or none
  std::size_t workspace_bytes = 0;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  cublasAtomicsMode_t atomics_mode = CUBLAS_ATOMICS_NOT_ALLOWED;
};
struct cublasLtContext {
  int unused = 0;
};

namespace {

namespace num = phasebench::numeric;

// ---- the last error -----------------------------------------------------------------

// What the last failing call said, so that cublasGetStatusString can tell it.
struct LastError {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string message;
};
thread_local LastError t_last;

cublasStatus_t fail(cublasStatus_t s, const std::string& call, const std::string& why) {
  t_last.status = s;
  t_last.message = "pb_emu: " + call + ": " + why;
  return s;
}

const char* status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* status_sentence(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the functionality requested requires some license";
  }
  return "unknown error";
}

// The detailed message when `s` is what the last failure on this thread returned.
const char* status_string(cublasStatus_t s) {
  if (s != CUBLAS_STATUS_SUCCESS && s == t_last.status && !t_last.message.empty()) return t_last.message.c_str();
  return status_sentence(s);
}

// ---- names ----------------------------------------------------------------------------

std::string type_str(int t) {
  switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
    case CUDA_R_8F_E4M3: return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2: return "CUDA_R_8F_E5M2";
    case CUDA_R_4F_E2M1: return "CUDA_R_4F_E2M1";
    default: return "cudaDataType " + std::to_string(t);
  }
}

std::string compute_str(int c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F: return "CUBLAS_COMPUTE_16F";
    case CUBLAS_COMPUTE_16F_PEDANTIC: return "CUBLAS_COMPUTE_16F_PEDANTIC";
    case CUBLAS_COMPUTE_32F: return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_PEDANTIC: return "CUBLAS_COMPUTE_32F_PEDANTIC";
    case CUBLAS_COMPUTE_32F_FAST_16F: return "CUBLAS_COMPUTE_32F_FAST_16F";
    case CUBLAS_COMPUTE_32F_FAST_16BF: return "CUBLAS_COMPUTE_32F_FAST_16BF";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
    case CUBLAS_COMPUTE_32F_EMULATED_16BFX9: return "CUBLAS_COMPUTE_32F_EMULATED_16BFX9";
    case CUBLAS_COMPUTE_64F: return "CUBLAS_COMPUTE_64F";
    case CUBLAS_COMPUTE_64F_PEDANTIC: return "CUBLAS_COMPUTE_64F_PEDANTIC";
    case CUBLAS_COMPUTE_32I: return "CUBLAS_COMPUTE_32I";
    case CUBLAS_COMPUTE_32I_PEDANTIC: return "CUBLAS_COMPUTE_32I_PEDANTIC";
    default: return "cublasComputeType_t " + std::to_string(c);
  }
}

const char* op_str(int op) { return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C"; }

// Bytes per element of the types the reference GEMM decodes, 0 for others.
std::size_t type_bytes(int t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: return 1;
    default: return 0;
  }
}
bool is_fp8(int t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
bool is_fp4(int t) { return t == CUDA_R_4F_E2M1; }
// Bits per element: the packed FP4 type's 4 besides the whole-byte types, 0 for others.
std::size_t type_bits(int t) { return is_fp4(t) ? 4 : 8 * type_bytes(t); }

// A matrix scale mode's name (cublasLtMatmulMatrixScale_t).
std::string scale_mode_str(int mode) {
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return "SCALAR_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3: return "VEC16_UE4M3";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: return "VEC32_UE8M0";
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return "OUTER_VEC_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return "VEC128_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return "BLK128x128_32F";
    default: return "scale mode " + std::to_string(mode);
  }
}

// ---- block scales (cuBLAS's "1D Block Scaling Factors Layout") -----------------------
// A block-scaled matrix has one scale per `block` consecutive elements along k for
// each of its `outer` rows (op(A) is m x k: m of them; op(B) k x n: n), kept in a
// tensor of 128 x 4 tiles (128 outer indices by 4 blocks along k, 512 bytes each)
// that covers the outer dimension padded to 128 and the blocks padded to 4, its
// tiles in order along k first; inside a tile, outer index o and block b lie at
// byte 16 * (o mod 32) + 4 * ((o / 32) mod 4) + (b mod 4). This is the emulation's
// own reading, written apart from the benchmark's writer (kernels/cuda/linear_verify.cpp),
// so that one checks the other.

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }

// Bytes of the scale tensor of `outer` rows of k / block scales.
std::size_t scale_tensor_bytes(std::int64_t outer, std::int64_t k, int block) {
  return static_cast<std::size_t>(round_up(outer, 128) * round_up(k / block, 4));
}

// The byte of the scale of outer index `o` and block `b` among `blocks` blocks along k.
std::size_t scale_byte(std::int64_t o, std::int64_t b, std::int64_t blocks) {
  const std::int64_t tile = (o / 128) * ((blocks + 3) / 4) + b / 4;
  return static_cast<std::size_t>(tile * 512 + 16 * (o % 32) + 4 * ((o / 32) % 4) + b % 4);
}

// One scale's value: blocks of 16 have UE4M3 scales (an e4m3 without its sign bit,
// which is ignored), blocks of 32 UE8M0 ones (2^(v - 127)).
double scale_value(std::uint8_t v, int block) {
  return block == 16 ? num::fp8e4m3_to_float(static_cast<std::uint8_t>(v & 0x7fu)) : num::e8m0_to_float(v);
}

std::string ptr_str(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// check_device_range's sentence without its leading article, to follow "call: ".
std::string range_problem(const void* p, std::size_t n, const std::string& what) {
  std::string why = pb_emu::check_device_range(p, n, what.c_str());
  if (why.rfind("the ", 0) == 0) why.erase(0, 4);
  return why;
}

// ---- the reference GEMM ----------------------------------------------------------------

// How the compute type rounds float inputs before multiplying.
enum class Rounding { none, tf32, fp16, bf16 };

// Round to nearest even at 10 explicit mantissa bits (tf32); inf and NaN unchanged.
float round_tf32(float f) {
  std::uint32_t u = num::float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  u += 0xfffu + ((u >> 13) & 1u);
  return num::bits_float(u & 0xffffe000u);
}

// One matrix as stored: rows x cols, column-major, `ld` elements between columns and
// `stride` elements between the matrices of a batch.
struct Operand {
  const void* ptr = nullptr;
  int type = CUDA_R_32F;
  std::int64_t rows = 0, cols = 0, ld = 0, stride = 0;

  std::size_t elem() const { return type_bytes(type); }
  // Bytes one matrix of the batch spans from its first element (FP4: two a byte).
  std::size_t extent() const {
    if (rows <= 0 || cols <= 0) return 0;
    return (static_cast<std::size_t>((cols - 1) * ld + rows) * type_bits(type) + 7) / 8;
  }
  const unsigned char* at(std::int64_t batch) const {
    return static_cast<const unsigned char*>(ptr) + batch * stride * static_cast<std::int64_t>(type_bits(type)) / 8;
  }
};

// One call's work, everything by value: a CUDA graph replays copies of it.
struct Gemm {
  std::string call;
  Operand a, b, c, d;  // d.ptr is written
  bool ta = false, tb = false;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  Rounding rounding = Rounding::none;
  float alpha = 1, beta = 0;
  const void* alpha_dev = nullptr;  // device pointer mode: read when the work runs
  const void* beta_dev = nullptr;
  const void* a_scale = nullptr;  // fp8 per-tensor scales (device floats), read when the work runs;
  const void* b_scale = nullptr;  // block-scaled FP4: the scale tensors
  int block = 0;                  // block-scaled FP4: values a scale (16: UE4M3, 32: UE8M0); 0: none
};

// What is wrong with the memory the GEMM touches ("" when all of it lies in
// device allocations). A and B are checked when they are read, C when beta != 0.
std::string extent_problem(const Gemm& g, bool read_c) {
  if (g.m == 0 || g.n == 0) return "";
  auto one = [&](const Operand& o, const char* name) -> std::string {
    for (std::int64_t i = 0; i < g.batch; ++i) {
      const std::string what = g.batch == 1 ? std::string(name) : std::string(name) + " of batch " + std::to_string(i);
      if (auto why = range_problem(o.at(i), o.extent(), what); !why.empty()) return why;
    }
    return "";
  };
  if (g.k > 0) {
    if (auto w = one(g.a, "A"); !w.empty()) return w;
    if (auto w = one(g.b, "B"); !w.empty()) return w;
    if (g.block) {  // one matrix (block-scaled batches are refused)
      if (auto w = range_problem(g.a_scale, scale_tensor_bytes(g.m, g.k, g.block), "A scale tensor"); !w.empty()) return w;
      if (auto w = range_problem(g.b_scale, scale_tensor_bytes(g.n, g.k, g.block), "B scale tensor"); !w.empty()) return w;
    }
  }
  if (read_c)
    if (auto w = one(g.c, "C"); !w.empty()) return w;
  return one(g.d, "D");
}

void decode_run(const unsigned char* src, int type, std::int64_t n, float* dst) {
  switch (type) {
    case CUDA_R_32F: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); break;
    case CUDA_R_16F:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = num::fp16_to_float(h);
      }
      break;
    case CUDA_R_16BF:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = num::bf16_to_float(h);
      }
      break;
    case CUDA_R_8F_E4M3:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = num::fp8e4m3_to_float(src[i]);
      break;
    case CUDA_R_8F_E5M2:  // e5m2 is the upper byte of an fp16
      for (std::int64_t i = 0; i < n; ++i) dst[i] = num::fp16_to_float(static_cast<std::uint16_t>(src[i] << 8));
      break;
    default: break;  // refused before any work is queued
  }
}

void encode_run(const float* src, int type, std::int64_t n, unsigned char* dst) {
  switch (type) {
    case CUDA_R_32F: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); break;
    case CUDA_R_16F:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t h = num::float_to_fp16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      break;
    case CUDA_R_16BF:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t h = num::float_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      break;
    default: break;  // refused before any work is queued
  }
}

// Matrix `batch` of `o`, densely (ld = rows) as float, rounded as the compute type says.
void decode_matrix(const Operand& o, std::int64_t batch, Rounding r, float* dst) {
  const unsigned char* base = o.at(batch);
  const std::size_t col_bytes = static_cast<std::size_t>(o.ld) * o.elem();
  for (std::int64_t j = 0; j < o.cols; ++j) decode_run(base + j * col_bytes, o.type, o.rows, dst + j * o.rows);
  const std::int64_t n = o.rows * o.cols;
  switch (r) {
    case Rounding::none: break;
    case Rounding::tf32:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = round_tf32(dst[i]);
      break;
    case Rounding::fp16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = num::fp16_to_float(num::float_to_fp16(dst[i]));
      break;
    case Rounding::bf16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = num::bf16_to_float(num::float_to_bf16(dst[i]));
      break;
  }
}

// A device float the work reads when it runs (alpha, beta, an fp8 scale).
cudaError_t read_device_float(const Gemm& g, const void* p, const char* what, float& out) {
  if (auto why = range_problem(p, sizeof(float), what); !why.empty())
    return pb_emu::api_error(cudaErrorIllegalAddress, "pb_emu: " + g.call + " (running on its stream): " + why);
  std::memcpy(&out, p, sizeof out);
  return cudaSuccess;
}

// A block-scaled FP4 operand stored k x outer (column-major, ld >= k: the "TN"
// layout's A and B), dequantised exactly into a dense k x outer matrix of doubles:
// each e2m1 value (the low nibble first) times its block's scale.
void decode_block_scaled(const Operand& o, const void* scales, int block, std::vector<double>& dst) {
  const auto* base = static_cast<const unsigned char*>(o.ptr);
  const auto* sc = static_cast<const unsigned char*>(scales);
  const std::int64_t k = o.rows, blocks = k / block;
  dst.resize(static_cast<std::size_t>(o.rows * o.cols));
  for (std::int64_t j = 0; j < o.cols; ++j)
    for (std::int64_t l = 0; l < k; ++l) {
      const std::int64_t e = j * o.ld + l;
      const unsigned code = (base[e / 2] >> (e % 2 ? 4 : 0)) & 0xfu;
      dst[static_cast<std::size_t>(j * k + l)] =
          static_cast<double>(num::fp4e2m1_to_float(code)) * scale_value(sc[scale_byte(j, l / block, blocks)], block);
    }
}

// The block-scaled stream work: D = alpha * (A with its scales)^T (B with its
// scales) + beta * C, the products exact and summed in double (one matrix).
void run_block_scaled(const Gemm& g, float alpha, float beta) {
  const std::int64_t m = g.m, n = g.n, k = g.k;
  std::vector<double> A, B, acc(static_cast<std::size_t>(m * n), 0.0);
  if (k > 0 && alpha != 0.0f) {
    decode_block_scaled(g.a, g.a_scale, g.block, A);
    decode_block_scaled(g.b, g.b_scale, g.block, B);
    cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                1.0, A.data(), static_cast<int>(k), B.data(), static_cast<int>(k), 0.0, acc.data(), static_cast<int>(m));
  }
  std::vector<float> col(static_cast<std::size_t>(m)), cin(static_cast<std::size_t>(m));
  const std::size_t c_col = static_cast<std::size_t>(g.c.ld) * g.c.elem();
  const std::size_t d_col = static_cast<std::size_t>(g.d.ld) * g.d.elem();
  const unsigned char* cb = g.c.at(0);
  auto* db = const_cast<unsigned char*>(g.d.at(0));
  for (std::int64_t j = 0; j < n; ++j) {
    if (beta != 0.0f) decode_run(cb + j * c_col, g.c.type, m, cin.data());
    for (std::int64_t i = 0; i < m; ++i) {
      double v = static_cast<double>(alpha) * acc[static_cast<std::size_t>(j * m + i)];
      if (beta != 0.0f) v += static_cast<double>(beta) * cin[static_cast<std::size_t>(i)];
      col[static_cast<std::size_t>(i)] = static_cast<float>(v);
    }
    encode_run(col.data(), g.d.type, m, db + j * d_col);
  }
}

// The stream work: D = alpha * scale_A * scale_B * op(A) op(B) + beta * C, per batch.
cudaError_t run_gemm(const Gemm& g) {
  float alpha = g.alpha, beta = g.beta, sa = 1, sb = 1;
  if (g.alpha_dev)
    if (cudaError_t e = read_device_float(g, g.alpha_dev, "alpha", alpha); e != cudaSuccess) return e;
  if (g.beta_dev)
    if (cudaError_t e = read_device_float(g, g.beta_dev, "beta", beta); e != cudaSuccess) return e;
  if (g.a_scale && !g.block)
    if (cudaError_t e = read_device_float(g, g.a_scale, "A scale", sa); e != cudaSuccess) return e;
  if (g.b_scale && !g.block)
    if (cudaError_t e = read_device_float(g, g.b_scale, "B scale", sb); e != cudaSuccess) return e;
  // Checked again here: a graph may replay the work after its memory was freed.
  if (auto why = extent_problem(g, beta != 0.0f); !why.empty())
    return pb_emu::api_error(cudaErrorIllegalAddress, "pb_emu: " + g.call + " (running on its stream): " + why);
  if (g.m == 0 || g.n == 0) return cudaSuccess;
  if (g.block) {
    run_block_scaled(g, alpha, beta);
    return cudaSuccess;
  }

  const std::int64_t m = g.m, n = g.n, k = g.k;
  const bool product = k > 0 && alpha != 0.0f;  // as BLAS: alpha == 0 reads neither A nor B
  std::vector<float> A, B, acc;
  if (product) {
    A.resize(static_cast<std::size_t>(g.a.rows * g.a.cols));
    B.resize(static_cast<std::size_t>(g.b.rows * g.b.cols));
    acc.resize(static_cast<std::size_t>(m * n));
  }
  std::vector<float> col(static_cast<std::size_t>(m)), cin(static_cast<std::size_t>(m));
  const float s = alpha * sa * sb;
  const std::size_t c_col = static_cast<std::size_t>(g.c.ld) * g.c.elem();
  const std::size_t d_col = static_cast<std::size_t>(g.d.ld) * g.d.elem();
  for (std::int64_t bi = 0; bi < g.batch; ++bi) {
    if (product) {
      decode_matrix(g.a, bi, g.rounding, A.data());
      decode_matrix(g.b, bi, g.rounding, B.data());
      cblas_sgemm(CblasColMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, A.data(),
                  static_cast<int>(g.a.rows), B.data(), static_cast<int>(g.b.rows), 0.0f, acc.data(), static_cast<int>(m));
    }
    const unsigned char* cb = g.c.at(bi);
    auto* db = const_cast<unsigned char*>(g.d.at(bi));
    for (std::int64_t j = 0; j < n; ++j) {
      // C's column is read before D's is written: C and D may be the same matrix.
      if (beta != 0.0f) decode_run(cb + j * c_col, g.c.type, m, cin.data());
      for (std::int64_t i = 0; i < m; ++i) {
        float v = product ? s * acc[static_cast<std::size_t>(j * m + i)] : 0.0f;
        if (beta != 0.0f) v += beta * cin[static_cast<std::size_t>(i)];
        col[static_cast<std::size_t>(i)] = v;
      }
      encode_run(col.data(), g.d.type, m, db + j * d_col);
    }
  }
  return cudaSuccess;
}

// Queues the work on `stream`; a stream that refuses it (destroyed, a failed
// context, an illegal capture) is what a failed kernel launch is to cuBLAS.
// Puts a library call's work on its stream (capturable into a graph, as cuBLAS's is).
cublasStatus_t enqueue_work(pb_emu::Op op, cudaStream_t stream, const std::string& call) {
  op.capturable = true;
  op.counted = "library";  // a reference GEMM, not the library's kernels: not counted
  if (cudaError_t e = pb_emu::enqueue(stream, std::move(op)); e != cudaSuccess)
    return fail(CUBLAS_STATUS_EXECUTION_FAILED, call,
                std::string("the stream did not take the work: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t enqueue_gemm(Gemm g, cudaStream_t stream) {
  const std::string call = g.call;
  auto job = std::make_shared<const Gemm>(std::move(g));
  pb_emu::Op op;
  op.what = call;
  op.run = [job] { return run_gemm(*job); };
  return enqueue_work(std::move(op), stream, call);
}

// ---- which problems the libraries run -------------------------------------------------

// The rounding a compute type applies to fp32 inputs, or false when the reference
// does not emulate the compute type at all.
bool compute_rounding(int compute, Rounding& r) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: r = Rounding::none; return true;
    case CUBLAS_COMPUTE_32F_FAST_TF32: r = Rounding::tf32; return true;
    case CUBLAS_COMPUTE_32F_FAST_16F: r = Rounding::fp16; return true;
    case CUBLAS_COMPUTE_32F_FAST_16BF: r = Rounding::bf16; return true;
    default: return false;
  }
}

const char* kSupportedNonFp8 =
    "supported: compute CUBLAS_COMPUTE_32F[_PEDANTIC] with A/B 16BF and C/D 16BF or 32F, A/B 16F and C/D 16F or 32F, "
    "A/B/C/D 32F; compute CUBLAS_COMPUTE_32F_FAST_TF32/_FAST_16F/_FAST_16BF with A/B/C/D 32F";

// "" when the type combination is one the library runs (and the emulation
// reproduces); else why not. `lt` admits cuBLASLt's fp8 combinations.
std::string type_problem(int compute, int at, int bt, int ct, int dt, bool lt) {
  const std::string combo = "A " + type_str(at) + ", B " + type_str(bt) + ", C " + type_str(ct) + ", D " + type_str(dt) +
                            " with " + compute_str(compute);
  Rounding r;
  if (!compute_rounding(compute, r))
    return combo + " is not emulated (pb_emu computes in fp32: " + std::string(kSupportedNonFp8) + ")";
  if (lt && (is_fp4(at) || is_fp4(bt))) {
    if (compute != CUBLAS_COMPUTE_32F || !is_fp4(at) || !is_fp4(bt))
      return combo + " is not a combination cuBLASLt supports (FP4 needs CUBLAS_COMPUTE_32F and both A and B "
                     "CUDA_R_4F_E2M1)";
    if (is_fp4(ct) || is_fp4(dt) || is_fp8(ct) || is_fp8(dt))
      return combo + ": FP4 and fp8 outputs (with their D scales) are not emulated; use a 16BF, 16F or 32F C/D";
    if (ct != dt || (dt != CUDA_R_16BF && dt != CUDA_R_16F && dt != CUDA_R_32F))
      return combo + " is not a combination cuBLASLt supports (FP4 inputs take C/D 16BF, 16F or 32F, C's type "
                     "equal to D's)";
    return "";
  }
  if (lt && (is_fp8(at) || is_fp8(bt))) {
    if (compute != CUBLAS_COMPUTE_32F || !is_fp8(at) || !is_fp8(bt) ||
        (at == CUDA_R_8F_E5M2 && bt == CUDA_R_8F_E5M2))
      return combo + " is not a combination cuBLASLt supports (fp8 needs CUBLAS_COMPUTE_32F, both A and B fp8, "
                     "not both e5m2)";
    if (is_fp8(dt) || is_fp8(ct))
      return combo + ": fp8 outputs (with their D scale and amax) are not emulated; use a 16BF, 16F or 32F C/D";
    if (ct != dt || (dt != CUDA_R_16BF && dt != CUDA_R_16F && dt != CUDA_R_32F))
      return combo + " is not a combination cuBLASLt supports (fp8 inputs take C/D 16BF, 16F or 32F, C's type "
                     "equal to D's)";
    return "";
  }
  if (ct != dt) return combo + " is not a supported combination (C and D must have the same type; " + kSupportedNonFp8 + ")";
  bool ok = false;
  if (r == Rounding::none)
    ok = at == bt && ((at == CUDA_R_16BF && (ct == CUDA_R_16BF || ct == CUDA_R_32F)) ||
                      (at == CUDA_R_16F && (ct == CUDA_R_16F || ct == CUDA_R_32F)) ||
                      (at == CUDA_R_32F && ct == CUDA_R_32F));
  else
    ok = at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F;
  if (!ok) return combo + " is not a supported combination (" + kSupportedNonFp8 + ")";
  return "";
}

bool valid_op(int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// ---- live handles ---------------------------------------------------------------------

std::mutex g_handles_mutex;
std::set<const void*>& live_handles() {
  static std::set<const void*> s;
  return s;
}
bool is_live(const void* h) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  return live_handles().count(h) != 0;
}

cublasStatus_t check_blas_handle(cublasHandle_t h, const char* call) {
  if (!h) return fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "the handle is null (cublasCreate was not called, or failed)");
  if (!is_live(h))
    return fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "handle " + ptr_str(h) + " is not a live cuBLAS handle (destroyed?)");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t check_lt_handle(cublasLtHandle_t h, const char* call) {
  if (!h) return fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "the handle is null (cublasLtCreate was not called, or failed)");
  if (!is_live(h))
    return fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "handle " + ptr_str(h) + " is not a live cuBLASLt handle (destroyed?)");
  return CUBLAS_STATUS_SUCCESS;
}

// In host pointer mode alpha and beta are host memory; a device pointer there
// would crash a real process (the emulation's device memory is host memory).
std::string host_scalar_problem(const void* p, const char* what) {
  if (!p) return std::string(what) + " is null";
  if (pb_emu::check_device_range(p, 1, what).empty())
    return std::string(what) + " " + ptr_str(p) + " points to device memory, but the pointer mode is host";
  return "";
}

// ---- cuBLASLt descriptors ---------------------------------------------------------------
// Kept inside the semi-opaque structs the header defines, so that the *Init
// functions work on storage the caller provides, as in the real library.

constexpr std::uint64_t kLayoutMagic = 0x706265'6d754c41ull;  // "pbemuLA"
constexpr std::uint64_t kDescMagic = 0x706265'6d754d44ull;
constexpr std::uint64_t kPrefMagic = 0x706265'6d755052ull;
constexpr std::uint64_t kAlgoMagic = 0x706265'6d75414cull;

struct LayoutState {
  std::uint64_t magic;
  std::uint32_t type;
  std::int32_t order;
  std::uint64_t rows, cols;
  std::int64_t ld;
  std::int32_t batch_count;
  std::uint32_t batch_mode;
  std::int64_t stride;
  std::int64_t plane_offset;
};
static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout state too large");

struct DescState {
  std::uint64_t magic;
  std::int32_t compute_type, scale_type, pointer_mode, transa, transb, transc, fill_mode;
  std::uint32_t epilogue;
  std::int32_t sm_count_target;
  std::int8_t fast_accum;
  std::int32_t aux_data_type, bias_data_type;
  std::int32_t a_scale_mode, b_scale_mode, c_scale_mode, d_scale_mode, aux_scale_mode, d_out_scale_mode;
  const void* bias;
  void* aux;
  const void* a_scale;
  const void* b_scale;
  const void* c_scale;
  const void* d_scale;
  void* amax_d;
  void* aux_scale;
  void* aux_amax;
  void* d_out_scale;
  void* emulation_desc;
  std::int64_t bias_batch_stride, aux_ld, aux_batch_stride, alpha_vector_batch_stride;
};
static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t), "matmul descriptor state too large");

struct PrefState {
  std::uint64_t magic;
  std::uint32_t search_mode, reduction_mask;
  std::uint64_t max_workspace;
  std::uint32_t align[4];  // A, B, C, D
  float max_waves;
  std::uint64_t impl_mask;
};
static_assert(sizeof(PrefState) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference state too large");

template <class State, class Opaque>
State load(const Opaque* o) {
  State s;
  std::memcpy(&s, o, sizeof s);
  return s;
}
template <class State, class Opaque>
void store(Opaque* o, const State& s) {
  std::memcpy(o, &s, sizeof s);
}

cublasStatus_t get_layout(cublasLtMatrixLayout_t l, const char* call, const char* name, LayoutState& out) {
  if (!l) return fail(CUBLAS_STATUS_INVALID_VALUE, call, std::string(name) + " is null");
  out = load<LayoutState>(l);
  if (out.magic != kLayoutMagic)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                std::string(name) + " " + ptr_str(l) + " is not a matrix layout (never created, or destroyed)");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t get_desc(cublasLtMatmulDesc_t d, const char* call, DescState& out) {
  if (!d) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "the matmul descriptor is null");
  out = load<DescState>(d);
  if (out.magic != kDescMagic)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "the matmul descriptor " + ptr_str(d) + " is not one (never created, or destroyed)");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t get_pref(cublasLtMatmulPreference_t p, const char* call, PrefState& out) {
  if (!p) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "the preference is null");
  out = load<PrefState>(p);
  if (out.magic != kPrefMagic)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "the preference " + ptr_str(p) + " is not one (never created, or destroyed)");
  return CUBLAS_STATUS_SUCCESS;
}

// Where an attribute lives in a state struct, and its size in the library's ABI.
struct Field {
  int attr;
  std::size_t offset, size;
  const char* name;
};
#define PB_FIELD(attr, State, member) \
  Field { attr, offsetof(State, member), sizeof(State::member), #attr }

const Field kLayoutFields[] = {
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_TYPE, LayoutState, type),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_ORDER, LayoutState, order),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_ROWS, LayoutState, rows),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_COLS, LayoutState, cols),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_LD, LayoutState, ld),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, LayoutState, batch_count),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, LayoutState, stride),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, LayoutState, plane_offset),
    PB_FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, LayoutState, batch_mode),
};

const Field kDescFields[] = {
    PB_FIELD(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, DescState, compute_type),
    PB_FIELD(CUBLASLT_MATMUL_DESC_SCALE_TYPE, DescState, scale_type),
    PB_FIELD(CUBLASLT_MATMUL_DESC_POINTER_MODE, DescState, pointer_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_TRANSA, DescState, transa),
    PB_FIELD(CUBLASLT_MATMUL_DESC_TRANSB, DescState, transb),
    PB_FIELD(CUBLASLT_MATMUL_DESC_TRANSC, DescState, transc),
    PB_FIELD(CUBLASLT_MATMUL_DESC_FILL_MODE, DescState, fill_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE, DescState, epilogue),
    PB_FIELD(CUBLASLT_MATMUL_DESC_BIAS_POINTER, DescState, bias),
    PB_FIELD(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, DescState, bias_batch_stride),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, DescState, aux),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, DescState, aux_ld),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, DescState, aux_batch_stride),
    PB_FIELD(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, DescState, alpha_vector_batch_stride),
    PB_FIELD(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, DescState, sm_count_target),
    PB_FIELD(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, DescState, a_scale),
    PB_FIELD(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, DescState, b_scale),
    PB_FIELD(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, DescState, c_scale),
    PB_FIELD(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, DescState, d_scale),
    PB_FIELD(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, DescState, amax_d),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, DescState, aux_data_type),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, DescState, aux_scale),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, DescState, aux_amax),
    PB_FIELD(CUBLASLT_MATMUL_DESC_FAST_ACCUM, DescState, fast_accum),
    PB_FIELD(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, DescState, bias_data_type),
    PB_FIELD(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, DescState, a_scale_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, DescState, b_scale_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_C_SCALE_MODE, DescState, c_scale_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_D_SCALE_MODE, DescState, d_scale_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, DescState, aux_scale_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, DescState, d_out_scale),
    PB_FIELD(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, DescState, d_out_scale_mode),
    PB_FIELD(CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, DescState, emulation_desc),
};

const Field kPrefFields[] = {
    PB_FIELD(CUBLASLT_MATMUL_PREF_SEARCH_MODE, PrefState, search_mode),
    PB_FIELD(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, PrefState, max_workspace),
    PB_FIELD(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, PrefState, reduction_mask),
    Field{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, offsetof(PrefState, align) + 0, 4,
          "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES"},
    Field{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, offsetof(PrefState, align) + 4, 4,
          "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES"},
    Field{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, offsetof(PrefState, align) + 8, 4,
          "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES"},
    Field{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, offsetof(PrefState, align) + 12, 4,
          "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES"},
    PB_FIELD(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, PrefState, max_waves),
    PB_FIELD(CUBLASLT_MATMUL_PREF_IMPL_MASK, PrefState, impl_mask),
};
#undef PB_FIELD

template <std::size_t N>
const Field* find_field(const Field (&fields)[N], int attr) {
  for (const Field& f : fields)
    if (f.attr == attr) return &f;
  return nullptr;
}

// The attribute setters' shared part: the size must be the attribute's, the new
// value is written into a copy of the state, and `check` (which may refuse it
// with a status and a message) sees the copy before it is stored.
template <class State, class Opaque, std::size_t N, class Check>
cublasStatus_t set_attribute(Opaque* o, State state, const Field (&fields)[N], int attr, const void* buf,
                             std::size_t bytes, const char* call, Check check) {
  const Field* f = find_field(fields, attr);
  if (!f) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "attribute " + std::to_string(attr) + " does not exist");
  if (!buf) return fail(CUBLAS_STATUS_INVALID_VALUE, call, std::string(f->name) + ": the value pointer is null");
  if (bytes != f->size)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                std::string(f->name) + " takes " + std::to_string(f->size) + " bytes, not " + std::to_string(bytes));
  std::memcpy(reinterpret_cast<unsigned char*>(&state) + f->offset, buf, f->size);
  if (cublasStatus_t s = check(state, *f); s != CUBLAS_STATUS_SUCCESS) return s;
  store(o, state);
  return CUBLAS_STATUS_SUCCESS;
}

template <class State, std::size_t N>
cublasStatus_t get_attribute(const State& state, const Field (&fields)[N], int attr, void* buf, std::size_t bytes,
                             std::size_t* written, const char* call) {
  const Field* f = find_field(fields, attr);
  if (!f) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "attribute " + std::to_string(attr) + " does not exist");
  if (bytes == 0) {
    if (!written) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "sizeInBytes is 0 and sizeWritten is null");
    *written = f->size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf) return fail(CUBLAS_STATUS_INVALID_VALUE, call, std::string(f->name) + ": the buffer is null");
  if (bytes < f->size)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                std::string(f->name) + " needs " + std::to_string(f->size) + " bytes; the buffer has " + std::to_string(bytes));
  std::memcpy(buf, reinterpret_cast<const unsigned char*>(&state) + f->offset, f->size);
  if (written) *written = f->size;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the cuBLASLt problem ---------------------------------------------------------------

struct LtProblem {
  Gemm gemm;
  DescState desc;
  LayoutState layout[4];  // A, B, C, D
  bool fp8 = false;
  bool fp4 = false;  // block-scaled FP4 A and B
};

// FNV-1a over the problem's shape, types and options: an algo remembers the
// problem the heuristic chose it for.
std::uint64_t fingerprint(const LtProblem& p) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  };
  mix(static_cast<std::uint64_t>(p.desc.compute_type));
  mix(static_cast<std::uint64_t>(p.desc.scale_type));
  mix(p.gemm.ta);
  mix(p.gemm.tb);
  mix(p.desc.epilogue);
  mix(static_cast<std::uint64_t>(p.desc.a_scale_mode));
  mix(static_cast<std::uint64_t>(p.desc.b_scale_mode));
  for (const LayoutState& l : p.layout) {
    mix(l.type);
    mix(l.rows);
    mix(l.cols);
    mix(static_cast<std::uint64_t>(l.ld));
    mix(static_cast<std::uint64_t>(l.batch_count));
    mix(static_cast<std::uint64_t>(l.stride));
  }
  return h;
}

// The algo id the heuristic reports, one per kind of kernel a real library would pick.
int algo_id(const LtProblem& p) {
  if (p.fp4) return p.gemm.block == 16 ? 77 : 78;
  if (p.fp8) return 66;
  switch (p.gemm.rounding) {
    case Rounding::tf32: return 32;
    case Rounding::fp16:
    case Rounding::bf16: return 17;
    case Rounding::none: break;
  }
  return p.gemm.a.type == CUDA_R_32F ? 0 : 16;
}

// Validates what cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul both need,
// as the library does: INVALID_VALUE for inconsistent arguments, NOT_SUPPORTED
// for problems it has no kernel for, ARCH_MISMATCH for the device.
cublasStatus_t lt_problem(const char* call, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                          cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                          LtProblem& p) {
  if (cublasStatus_t s = get_desc(desc, call, p.desc); s != CUBLAS_STATUS_SUCCESS) return s;
  const cublasLtMatrixLayout_t layouts[4] = {Adesc, Bdesc, Cdesc, Ddesc};
  const char* names[4] = {"Adesc", "Bdesc", "Cdesc", "Ddesc"};
  for (int i = 0; i < 4; ++i)
    if (cublasStatus_t s = get_layout(layouts[i], call, names[i], p.layout[i]); s != CUBLAS_STATUS_SUCCESS) return s;
  const DescState& d = p.desc;
  const LayoutState &A = p.layout[0], &B = p.layout[1], &C = p.layout[2], &D = p.layout[3];

  // Types first: an unsupported combination has no kernel whatever its shape.
  if (d.scale_type != CUDA_R_32F)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                "scale type " + type_str(d.scale_type) + " with " + compute_str(d.compute_type) +
                    " is not supported (the emulated compute types take CUDA_R_32F alpha/beta)");
  if (auto why = type_problem(d.compute_type, static_cast<int>(A.type), static_cast<int>(B.type),
                              static_cast<int>(C.type), static_cast<int>(D.type), true);
      !why.empty())
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call, why);
  p.fp8 = is_fp8(static_cast<int>(A.type));
  p.fp4 = is_fp4(static_cast<int>(A.type));
  // Block scale modes: FP4 needs them, one mode for A and B; nothing else emulated takes them.
  const std::string modes = "CUBLASLT_MATMUL_DESC_A_SCALE_MODE " + scale_mode_str(d.a_scale_mode) +
                            ", B_SCALE_MODE " + scale_mode_str(d.b_scale_mode);
  if (p.fp4) {
    if (d.a_scale_mode != d.b_scale_mode || (d.a_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 &&
                                             d.a_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0))
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "FP4 matmuls need block scales, one mode for A and B: VEC16_UE4M3 (NVFP4) or VEC32_UE8M0 (MXFP4); "
                  "got " + modes);
  } else if (d.a_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
             d.b_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                modes + " with A " + type_str(static_cast<int>(A.type)) +
                    ": block scales are emulated for FP4 (CUDA_R_4F_E2M1) A and B only");
  }
  if (p.fp8 || p.fp4) {
    const pb_emu::Target& t = pb_emu::target();
    const int need = p.fp4 ? 100 : 89;
    if (t.cc_major * 10 + t.cc_minor < need)
      return fail(CUBLAS_STATUS_ARCH_MISMATCH, call,
                  std::string(p.fp4 ? "block-scaled FP4 matmuls need compute capability 10.0"
                                    : "fp8 matmuls need compute capability 8.9") +
                      " or newer; the emulated " + std::string(t.key) + " is " + std::to_string(t.cc_major) + "." +
                      std::to_string(t.cc_minor) + " (PB_EMU_TARGET)");
  }

  // Shapes: D is m x n, C the same, op(A) m x k, op(B) k x n; ld >= rows.
  for (int i = 0; i < 4; ++i) {
    const LayoutState& l = p.layout[i];
    const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
    if (l.rows > limit || l.cols > limit)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  std::string(names[i]) + " is " + std::to_string(l.rows) + " x " + std::to_string(l.cols) +
                      "; dimensions beyond 2^31 - 1 are not supported");
    if (l.ld < 1 || static_cast<std::uint64_t>(l.ld) < l.rows)
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  std::string(names[i]) + ": ld " + std::to_string(l.ld) + " is less than max(1, rows = " +
                      std::to_string(l.rows) + ") (column-major)");
  }
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  const std::uint64_t m = D.rows, n = D.cols, k = ta ? A.rows : A.cols;
  const std::uint64_t a_m = ta ? A.cols : A.rows;
  const std::uint64_t b_k = tb ? B.cols : B.rows, b_n = tb ? B.rows : B.cols;
  auto dims = [](const LayoutState& l) { return std::to_string(l.rows) + " x " + std::to_string(l.cols); };
  if (C.rows != m || C.cols != n)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call, "C is " + dims(C) + " but D is " + dims(D) + "; they must match");
  if (a_m != m || b_k != k || b_n != n)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "inconsistent shapes: A is " + dims(A) + " with TRANSA = " + op_str(d.transa) + ", B is " + dims(B) +
                    " with TRANSB = " + op_str(d.transb) + ", D is " + dims(D) + " (op(A) must be m x k = " +
                    std::to_string(m) + " x " + std::to_string(k) + ", op(B) k x n = " + std::to_string(k) + " x " +
                    std::to_string(n) + ")");
  if (A.batch_count != D.batch_count || B.batch_count != D.batch_count || C.batch_count != D.batch_count)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "batch counts differ: A " + std::to_string(A.batch_count) + ", B " + std::to_string(B.batch_count) +
                    ", C " + std::to_string(C.batch_count) + ", D " + std::to_string(D.batch_count));

  if (p.fp8) {
    // Hopper/Ada fp8 kernels take only the "TN" layout, 16-byte aligned columns.
    if (!ta || tb)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  std::string("fp8 matmuls need TRANSA = T and TRANSB = N (the \"TN\" layout); got TRANSA = ") +
                      op_str(d.transa) + ", TRANSB = " + op_str(d.transb));
    for (int i = 0; i < 4; ++i) {
      const LayoutState& l = p.layout[i];
      if ((static_cast<std::uint64_t>(l.ld) * type_bytes(static_cast<int>(l.type))) % 16 != 0)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    std::string("fp8 matmuls need 16-byte aligned columns; ") + names[i] + " has ld " +
                        std::to_string(l.ld) + " " + type_str(static_cast<int>(l.type)) + " elements");
    }
  }
  int block = 0;
  if (p.fp4) {
    // Blackwell's block-scaled kernels take the "TN" layout only, 16-byte aligned
    // columns, whole blocks along k, one matrix.
    if (!ta || tb)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  std::string("FP4 matmuls need TRANSA = T and TRANSB = N (the \"TN\" layout); got TRANSA = ") +
                      op_str(d.transa) + ", TRANSB = " + op_str(d.transb));
    for (int i = 0; i < 4; ++i) {
      const LayoutState& l = p.layout[i];
      if ((static_cast<std::uint64_t>(l.ld) * type_bits(static_cast<int>(l.type))) % 128 != 0)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    std::string("FP4 matmuls need 16-byte aligned columns; ") + names[i] + " has ld " +
                        std::to_string(l.ld) + " " + type_str(static_cast<int>(l.type)) + " elements");
    }
    block = d.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 ? 16 : 32;
    if (k % static_cast<std::uint64_t>(block) != 0)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "block-scaled FP4 matmuls need k to be a multiple of the block (" + std::to_string(block) + " for " +
                      scale_mode_str(d.a_scale_mode) + "); k = " + std::to_string(k));
    if (D.batch_count != 1)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, call, "batched block-scaled matmuls are not emulated (batch count " +
                                                         std::to_string(D.batch_count) + ")");
  }
  // Scale pointers mean something for fp8 (per tensor) and FP4 (block) matrices only.
  if (!p.fp8 && !p.fp4 && (d.a_scale || d.b_scale))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "an A or B scale pointer is set, but A and B are " + type_str(static_cast<int>(A.type)) +
                    "; scales apply to fp8 (per tensor) and FP4 (blocks) matrices");
  if (d.c_scale || d.d_scale)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                "C and D scale pointers apply to fp8 C/D, which the emulation does not produce");

  Gemm& g = p.gemm;
  g.call = call;
  g.ta = ta;
  g.tb = tb;
  g.m = static_cast<std::int64_t>(m);
  g.n = static_cast<std::int64_t>(n);
  g.k = static_cast<std::int64_t>(k);
  g.batch = D.batch_count;
  compute_rounding(d.compute_type, g.rounding);
  if (p.fp8 || p.fp4) g.rounding = Rounding::none;
  g.block = block;
  Operand* ops[4] = {&g.a, &g.b, &g.c, &g.d};
  for (int i = 0; i < 4; ++i) {
    ops[i]->type = static_cast<int>(p.layout[i].type);
    ops[i]->rows = static_cast<std::int64_t>(p.layout[i].rows);
    ops[i]->cols = static_cast<std::int64_t>(p.layout[i].cols);
    ops[i]->ld = p.layout[i].ld;
    ops[i]->stride = p.layout[i].stride;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLAS and cuBLASLt ship together and report the same version.
cublasStatus_t library_property(const char* call, libraryPropertyType type, int* value) {
  if (!value) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "the value pointer is null");
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return fail(CUBLAS_STATUS_INVALID_VALUE, call, "unknown property " + std::to_string(static_cast<int>(type)));
}

}  // namespace

// ---- cuBLAS --------------------------------------------------------------------------------

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate", "the handle pointer is null");
  auto* h = new cublasContext;
  {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    live_handles().insert(h);
  }
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasDestroy"); s != CUBLAS_STATUS_SUCCESS) return s;
  cudaDeviceSynchronize();  // as the real cublasDestroy does
  {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    live_handles().erase(handle);
  }
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasGetVersion"); s != CUBLAS_STATUS_SUCCESS) return s;
  if (!version) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetVersion", "the version pointer is null");
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  return library_property("cublasGetProperty", type, value);
}

size_t cublasGetCudartVersion(void) { return CUDART_VERSION; }

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasSetWorkspace"); s != CUBLAS_STATUS_SUCCESS) return s;
  if (workspaceSizeInBytes > 0) {
    if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0)
      return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace",
                  "the workspace " + ptr_str(workspace) + " is not aligned to 256 bytes");
    if (auto why = range_problem(workspace, workspaceSizeInBytes, "workspace"); !why.empty())
      return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace", why);
  }
  handle->workspace = workspaceSizeInBytes > 0 ? workspace : nullptr;
  handle->workspace_bytes = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasSetStream"); s != CUBLAS_STATUS_SUCCESS) return s;
  handle->stream = streamId;
  // The real library drops a user workspace here (back to its own pool).
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasGetStream"); s != CUBLAS_STATUS_SUCCESS) return s;
  if (!streamId) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetStream", "the stream pointer is null");
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasGetPointerMode"); s != CUBLAS_STATUS_SUCCESS) return s;
  if (!mode) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetPointerMode", "the mode pointer is null");
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasSetPointerMode"); s != CUBLAS_STATUS_SUCCESS) return s;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetPointerMode", "unknown pointer mode " + std::to_string(mode));
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasGetAtomicsMode"); s != CUBLAS_STATUS_SUCCESS) return s;
  if (!mode) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetAtomicsMode", "the mode pointer is null");
  *mode = handle->atomics_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasSetAtomicsMode"); s != CUBLAS_STATUS_SUCCESS) return s;
  handle->atomics_mode = mode;  // the reference GEMM is deterministic either way
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasGetMathMode"); s != CUBLAS_STATUS_SUCCESS) return s;
  if (!mode) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetMathMode", "the mode pointer is null");
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (cublasStatus_t s = check_blas_handle(handle, "cublasSetMathMode"); s != CUBLAS_STATUS_SUCCESS) return s;
  const unsigned base = static_cast<unsigned>(mode) & 0xfu;
  if (base > CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH || (static_cast<unsigned>(mode) & ~0x1fu) != 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode", "unknown math mode " + std::to_string(mode));
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) { return status_name(status); }
const char* cublasGetStatusString(cublasStatus_t status) { return status_string(status); }

// The argument rules of cuBLAS's gemm family for one strided or pointer-array
// batched call, and its Gemm (A, B, C as given; a pointer-array call passes
// nullptr and strides 0). `read_c`: whether beta makes C an input.
static cublasStatus_t batched_gemm_setup(const char* call, cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                         const void* A, cudaDataType Atype, int lda, long long int strideA,
                                         const void* B, cudaDataType Btype, int ldb, long long int strideB,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc, long long int strideC,
                                         int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo, Gemm& g,
                                         bool& read_c) {
  if (cublasStatus_t s = check_blas_handle(handle, call); s != CUBLAS_STATUS_SUCCESS) return s;
  // The argument rules of cuBLAS's gemm family.
  if (!valid_op(transa) || !valid_op(transb))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "transa " + std::to_string(transa) + " / transb " + std::to_string(transb) + ": use CUBLAS_OP_N, _T or _C");
  if (m < 0 || n < 0 || k < 0 || batchCount < 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "m = " + std::to_string(m) + ", n = " + std::to_string(n) + ", k = " + std::to_string(k) +
                    ", batchCount = " + std::to_string(batchCount) + ": none may be negative");
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int a_rows = ta ? k : m, b_rows = tb ? n : k;
  if (lda < std::max(1, a_rows))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "lda = " + std::to_string(lda) + " is less than max(1, " + (ta ? "k" : "m") + " = " +
                    std::to_string(a_rows) + ") (transa = " + op_str(transa) + ")");
  if (ldb < std::max(1, b_rows))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "ldb = " + std::to_string(ldb) + " is less than max(1, " + (tb ? "n" : "k") + " = " +
                    std::to_string(b_rows) + ") (transb = " + op_str(transb) + ")");
  if (ldc < std::max(1, m))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "ldc = " + std::to_string(ldc) + " is less than max(1, m = " + std::to_string(m) + ")");
  if (auto why = type_problem(computeType, Atype, Btype, Ctype, Ctype, false); !why.empty())
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call, why);
  const bool algo_ok = algo == CUBLAS_GEMM_DEFAULT || algo == CUBLAS_GEMM_DEFAULT_TENSOR_OP ||
                       (algo >= CUBLAS_GEMM_ALGO0 && algo <= CUBLAS_GEMM_ALGO23) ||
                       (algo >= CUBLAS_GEMM_ALGO0_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
  if (!algo_ok)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                "algo " + std::to_string(algo) + " is not supported (use CUBLAS_GEMM_DEFAULT)");

  g = Gemm{};
  g.call = call;
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch = batchCount;
  compute_rounding(computeType, g.rounding);
  // Handle math modes: TF32 tensor-op math lets plain fp32 compute use tf32 inputs.
  const unsigned math = static_cast<unsigned>(handle->math_mode) & 0xfu;
  if (computeType == CUBLAS_COMPUTE_32F && math == CUBLAS_TF32_TENSOR_OP_MATH && Atype == CUDA_R_32F)
    g.rounding = Rounding::tf32;
  g.a = Operand{A, Atype, ta ? k : m, ta ? m : k, lda, strideA};
  g.b = Operand{B, Btype, tb ? n : k, tb ? k : n, ldb, strideB};
  g.c = Operand{C, Ctype, m, n, ldc, strideC};
  g.d = g.c;
  read_c = true;
  if (handle->pointer_mode == CUBLAS_POINTER_MODE_HOST) {
    for (auto [p, what] : {std::pair<const void*, const char*>{alpha, "alpha"}, {beta, "beta"}})
      if (auto why = host_scalar_problem(p, what); !why.empty()) return fail(CUBLAS_STATUS_INVALID_VALUE, call, why);
    std::memcpy(&g.alpha, alpha, sizeof g.alpha);
    std::memcpy(&g.beta, beta, sizeof g.beta);
    read_c = g.beta != 0.0f;
  } else {
    for (auto [p, what] : {std::pair<const void*, const char*>{alpha, "alpha"}, {beta, "beta"}})
      if (auto why = range_problem(p, sizeof(float), what); !why.empty())
        return fail(CUBLAS_STATUS_INVALID_VALUE, call, why + " (the pointer mode is device)");
    g.alpha_dev = alpha;
    g.beta_dev = beta;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  const char* call = "cublasGemmStridedBatchedEx";
  Gemm g;
  bool read_c = true;
  if (cublasStatus_t s = batched_gemm_setup(call, handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B,
                                            Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType,
                                            algo, g, read_c);
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to do, as in BLAS
  if (auto why = extent_problem(g, read_c); !why.empty()) return fail(CUBLAS_STATUS_INVALID_VALUE, call, why);
  return enqueue_gemm(std::move(g), handle->stream);
}

// Pointer-array batched GEMM: the same problem batchCount times, problem i on
// Aarray[i], Barray[i], Carray[i] (device arrays of device pointers, read when
// the work runs: stream order, as on the GPU), with the types, scalars and
// argument rules of cublasGemmStridedBatchedEx.
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void* alpha, const void* const Aarray[], cudaDataType Atype,
                                   int lda, const void* const Barray[], cudaDataType Btype, int ldb, const void* beta,
                                   void* const Carray[], cudaDataType Ctype, int ldc, int batchCount,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  const char* call = "cublasGemmBatchedEx";
  Gemm g;
  bool read_c = true;
  if (cublasStatus_t s = batched_gemm_setup(call, handle, transa, transb, m, n, k, alpha, nullptr, Atype, lda, 0,
                                            nullptr, Btype, ldb, 0, beta, nullptr, Ctype, ldc, 0, batchCount,
                                            computeType, algo, g, read_c);
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to do, as in BLAS
  const auto ptr_bytes = static_cast<std::size_t>(batchCount) * sizeof(void*);
  for (auto [p, what] : {std::pair<const void*, const char*>{Aarray, "Aarray"}, {Barray, "Barray"}, {Carray, "Carray"}})
    if (auto why = range_problem(p, ptr_bytes, what); !why.empty())
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  why + " (a device array of the " + std::to_string(batchCount) + " problems' pointers)");
  struct Job {
    Gemm g;
    bool read_c;
    const void* const* A;
    const void* const* B;
    void* const* C;
  };
  auto job = std::make_shared<const Job>(Job{std::move(g), read_c, Aarray, Barray, Carray});
  pb_emu::Op op;
  op.what = call;
  op.run = [job]() -> cudaError_t {
    const auto count = static_cast<std::size_t>(job->g.batch);
    for (auto [p, what] : {std::pair<const void*, const char*>{job->A, "Aarray"}, {job->B, "Barray"}, {job->C, "Carray"}})
      if (auto why = range_problem(p, count * sizeof(void*), what); !why.empty())
        return pb_emu::api_error(cudaErrorIllegalAddress,
                                 std::string("pb_emu: cublasGemmBatchedEx (running on its stream): ") + why);
    for (std::size_t i = 0; i < count; ++i) {
      Gemm one = job->g;
      one.batch = 1;
      one.call = "cublasGemmBatchedEx (problem " + std::to_string(i) + ")";
      one.a.ptr = job->A[i];
      one.b.ptr = job->B[i];
      one.c.ptr = job->C[i];
      one.d = one.c;
      // Each problem's matrices must lie in device allocations, as the strided call checks before it runs.
      if (auto why = extent_problem(one, job->read_c); !why.empty())
        return pb_emu::api_error(cudaErrorIllegalAddress,
                                 std::string("pb_emu: cublasGemmBatchedEx (running on its stream), problem ") +
                                     std::to_string(i) + ": " + why);
      if (cudaError_t e = run_gemm(one); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  };
  return enqueue_work(std::move(op), handle->stream, call);
}

// Grouped batched GEMM (cuBLAS 12.5+): group i has its own transa/transb, m, n, k,
// alpha, lda, ldb, beta, ldc (host arrays of group_count), and group_size[i]
// problems; Aarray/Barray/Carray are device arrays of sum(group_size) device
// pointers, read when the work runs (stream order: uploaded before, they count).
// Types as the library takes them: A, B and C of one type, 16F, 16BF or 32F, with
// CUBLAS_COMPUTE_32F (32F also with _FAST_TF32). alpha/beta host floats only.
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[], const int n_array[],
                                          const int k_array[], const void* alpha_array, const void* const Aarray[],
                                          cudaDataType_t Atype, const int lda_array[], const void* const Barray[],
                                          cudaDataType_t Btype, const int ldb_array[], const void* beta_array,
                                          void* const Carray[], cudaDataType_t Ctype, const int ldc_array[],
                                          int group_count, const int group_size[], cublasComputeType_t computeType) {
  const char* call = "cublasGemmGroupedBatchedEx";
  if (cublasStatus_t s = check_blas_handle(handle, call); s != CUBLAS_STATUS_SUCCESS) return s;
  if (group_count < 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call, "group_count = " + std::to_string(group_count) + " is negative");
  if (group_count == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to do
  const std::pair<const void*, const char*> host_arrays[] = {
      {transa_array, "transa_array"}, {transb_array, "transb_array"}, {m_array, "m_array"},
      {n_array, "n_array"},           {k_array, "k_array"},           {lda_array, "lda_array"},
      {ldb_array, "ldb_array"},       {ldc_array, "ldc_array"},       {group_size, "group_size"},
      {alpha_array, "alpha_array"},   {beta_array, "beta_array"}};
  for (auto [p, what] : host_arrays)
    if (!p) return fail(CUBLAS_STATUS_INVALID_VALUE, call, std::string(what) + " is null");
  if (handle->pointer_mode != CUBLAS_POINTER_MODE_HOST)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                "alpha_array and beta_array in device memory (CUBLAS_POINTER_MODE_DEVICE) are not emulated; use the "
                "host pointer mode");
  for (auto [p, what] : {std::pair<const void*, const char*>{alpha_array, "alpha_array"}, {beta_array, "beta_array"}})
    if (auto why = host_scalar_problem(p, what); !why.empty()) return fail(CUBLAS_STATUS_INVALID_VALUE, call, why);
  if (auto why = type_problem(computeType, Atype, Btype, Ctype, Ctype, false); !why.empty())
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call, why);
  if (Atype != Btype || Atype != Ctype)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                "A " + type_str(Atype) + ", B " + type_str(Btype) + ", C " + type_str(Ctype) +
                    ": the grouped GEMM takes A, B and C of one type (16F, 16BF or 32F)");
  Rounding rounding = Rounding::none;  // type_problem has accepted the compute type
  compute_rounding(computeType, rounding);
  const unsigned math = static_cast<unsigned>(handle->math_mode) & 0xfu;
  if (computeType == CUBLAS_COMPUTE_32F && math == CUBLAS_TF32_TENSOR_OP_MATH && Atype == CUDA_R_32F)
    rounding = Rounding::tf32;
  // Each group's problem, checked as cublasGemmStridedBatchedEx checks one.
  std::vector<Gemm> groups(static_cast<std::size_t>(group_count));
  std::int64_t problems = 0;
  for (int i = 0; i < group_count; ++i) {
    const std::string g = "group " + std::to_string(i) + ": ";
    const auto ta_op = transa_array[i], tb_op = transb_array[i];
    const int m = m_array[i], n = n_array[i], k = k_array[i], lda = lda_array[i], ldb = ldb_array[i], ldc = ldc_array[i];
    if (!valid_op(ta_op) || !valid_op(tb_op))
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  g + "transa " + std::to_string(ta_op) + " / transb " + std::to_string(tb_op) +
                      ": use CUBLAS_OP_N, _T or _C");
    if (m < 0 || n < 0 || k < 0 || group_size[i] < 0)
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  g + "m = " + std::to_string(m) + ", n = " + std::to_string(n) + ", k = " + std::to_string(k) +
                      ", group_size = " + std::to_string(group_size[i]) + ": none may be negative");
    const bool ta = ta_op != CUBLAS_OP_N, tb = tb_op != CUBLAS_OP_N;
    const int a_rows = ta ? k : m, b_rows = tb ? n : k;
    if (lda < std::max(1, a_rows))
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  g + "lda = " + std::to_string(lda) + " is less than max(1, " + (ta ? "k" : "m") + " = " +
                      std::to_string(a_rows) + ") (transa = " + op_str(ta_op) + ")");
    if (ldb < std::max(1, b_rows))
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  g + "ldb = " + std::to_string(ldb) + " is less than max(1, " + (tb ? "n" : "k") + " = " +
                      std::to_string(b_rows) + ") (transb = " + op_str(tb_op) + ")");
    if (ldc < std::max(1, m))
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  g + "ldc = " + std::to_string(ldc) + " is less than max(1, m = " + std::to_string(m) + ")");
    Gemm& G = groups[static_cast<std::size_t>(i)];
    G.call = call;
    G.ta = ta;
    G.tb = tb;
    G.m = m;
    G.n = n;
    G.k = k;
    G.batch = group_size[i];  // the pointers are filled in when the work runs
    G.rounding = rounding;
    G.alpha = static_cast<const float*>(alpha_array)[i];
    G.beta = static_cast<const float*>(beta_array)[i];
    G.a = Operand{nullptr, Atype, ta ? k : m, ta ? m : k, lda, 0};
    G.b = Operand{nullptr, Btype, tb ? n : k, tb ? k : n, ldb, 0};
    G.c = Operand{nullptr, Ctype, m, n, ldc, 0};
    problems += group_size[i];
  }
  if (problems == 0) return CUBLAS_STATUS_SUCCESS;
  const auto ptr_bytes = static_cast<std::size_t>(problems) * sizeof(void*);
  for (auto [p, what] : {std::pair<const void*, const char*>{Aarray, "Aarray"}, {Barray, "Barray"}, {Carray, "Carray"}})
    if (auto why = range_problem(p, ptr_bytes, what); !why.empty())
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  why + " (a device array of the " + std::to_string(problems) + " problems' pointers)");
  // The work: the pointer arrays are read when it runs, then every problem is one GEMM.
  struct Job {
    std::vector<Gemm> groups;
    const void* const* A;
    const void* const* B;
    void* const* C;
  };
  auto job = std::make_shared<const Job>(Job{std::move(groups), Aarray, Barray, Carray});
  pb_emu::Op op;
  op.what = call;
  op.run = [job]() -> cudaError_t {
    std::size_t count = 0;
    for (const auto& g : job->groups) count += static_cast<std::size_t>(g.batch);
    for (auto [p, what] : {std::pair<const void*, const char*>{job->A, "Aarray"}, {job->B, "Barray"}, {job->C, "Carray"}})
      if (auto why = range_problem(p, count * sizeof(void*), what); !why.empty())
        return pb_emu::api_error(cudaErrorIllegalAddress, std::string("pb_emu: cublasGemmGroupedBatchedEx (running on its stream): ") + why);
    std::size_t next = 0;
    for (std::size_t gi = 0; gi < job->groups.size(); ++gi)
      for (std::int64_t j = 0; j < job->groups[gi].batch; ++j, ++next) {
        Gemm g = job->groups[gi];
        g.batch = 1;
        g.call = "cublasGemmGroupedBatchedEx (group " + std::to_string(gi) + ", problem " + std::to_string(next) + ")";
        g.a.ptr = job->A[next];
        g.b.ptr = job->B[next];
        g.c.ptr = job->C[next];
        g.d = g.c;
        if (cudaError_t e = run_gemm(g); e != cudaSuccess) return e;
      }
    return cudaSuccess;
  };
  return enqueue_work(std::move(op), handle->stream, call);
}

// ---- cuBLASLt ------------------------------------------------------------------------------

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "the handle pointer is null");
  auto* h = new cublasLtContext;
  {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    live_handles().insert(h);
  }
  *lightHandle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (cublasStatus_t s = check_lt_handle(lightHandle, "cublasLtDestroy"); s != CUBLAS_STATUS_SUCCESS) return s;
  {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    live_handles().erase(lightHandle);
  }
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return status_name(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) { return status_string(status); }
size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }
cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  return library_property("cublasLtGetProperty", type, value);
}

// Matrix layouts.

cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t matLayout, size_t size, cudaDataType type,
                                                 uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutInit", "the layout is null");
  if (size < sizeof(LayoutState))
    return fail(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatrixLayoutInit", "the space is too small for a layout");
  LayoutState s{};
  s.magic = kLayoutMagic;
  s.type = static_cast<std::uint32_t>(type);
  s.order = CUBLASLT_ORDER_COL;
  s.rows = rows;
  s.cols = cols;
  s.ld = ld;
  s.batch_count = 1;
  s.batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
  store(matLayout, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate", "the layout pointer is null");
  auto* l = new cublasLtMatrixLayoutOpaque_t{};
  cublasLtMatrixLayoutInit_internal(l, sizeof *l, type, rows, cols, ld);
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (!matLayout) return CUBLAS_STATUS_SUCCESS;
  std::memset(matLayout, 0, sizeof *matLayout);
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  const char* call = "cublasLtMatrixLayoutSetAttribute";
  LayoutState s;
  if (cublasStatus_t st = get_layout(matLayout, call, "the layout", s); st != CUBLAS_STATUS_SUCCESS) return st;
  return set_attribute(matLayout, s, kLayoutFields, attr, buf, sizeInBytes, call,
                       [call](const LayoutState& n, const Field& f) -> cublasStatus_t {
                         switch (f.attr) {
                           case CUBLASLT_MATRIX_LAYOUT_ORDER:
                             if (n.order == CUBLASLT_ORDER_COL) break;
                             if (n.order >= CUBLASLT_ORDER_ROW && n.order <= CUBLASLT_ORDER_COL32_2R_4R4)
                               return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                                           "order " + std::to_string(n.order) +
                                               " is not emulated; only CUBLASLT_ORDER_COL (column-major)");
                             return fail(CUBLAS_STATUS_INVALID_VALUE, call, "unknown order " + std::to_string(n.order));
                           case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
                             if (n.batch_count < 1)
                               return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                                           "batch count " + std::to_string(n.batch_count) + " is less than 1");
                             break;
                           case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET:
                             if (n.plane_offset != 0)
                               return fail(CUBLAS_STATUS_NOT_SUPPORTED, call, "planar complex layouts are not emulated");
                             break;
                           case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE:
                             if (n.batch_mode == CUBLASLT_BATCH_MODE_STRIDED) break;
                             if (n.batch_mode == CUBLASLT_BATCH_MODE_POINTER_ARRAY)
                               return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                                           "pointer-array batches are not emulated; use strided batches");
                             return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                                         "unknown batch mode " + std::to_string(n.batch_mode));
                           default: break;
                         }
                         return CUBLAS_STATUS_SUCCESS;
                       });
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  const char* call = "cublasLtMatrixLayoutGetAttribute";
  LayoutState s;
  if (cublasStatus_t st = get_layout(matLayout, call, "the layout", s); st != CUBLAS_STATUS_SUCCESS) return st;
  return get_attribute(s, kLayoutFields, attr, buf, sizeInBytes, sizeWritten, call);
}

// Matmul descriptors.

cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t matmulDesc, size_t size,
                                               cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (!matmulDesc) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescInit", "the descriptor is null");
  if (size < sizeof(DescState))
    return fail(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmulDescInit", "the space is too small for a descriptor");
  DescState s{};
  s.magic = kDescMagic;
  s.compute_type = computeType;
  s.scale_type = scaleType;
  s.pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  s.transa = s.transb = s.transc = CUBLAS_OP_N;
  s.fill_mode = CUBLAS_FILL_MODE_FULL;
  s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  s.aux_data_type = s.bias_data_type = -1;
  store(matmulDesc, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "the descriptor pointer is null");
  auto* d = new cublasLtMatmulDescOpaque_t{};
  cublasLtMatmulDescInit_internal(d, sizeof *d, computeType, scaleType);
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (!matmulDesc) return CUBLAS_STATUS_SUCCESS;
  std::memset(matmulDesc, 0, sizeof *matmulDesc);
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  const char* call = "cublasLtMatmulDescSetAttribute";
  DescState s;
  if (cublasStatus_t st = get_desc(matmulDesc, call, s); st != CUBLAS_STATUS_SUCCESS) return st;
  return set_attribute(
      matmulDesc, s, kDescFields, attr, buf, sizeInBytes, call, [call](const DescState& n, const Field& f) -> cublasStatus_t {
        auto not_emulated = [&](const std::string& what) {
          return fail(CUBLAS_STATUS_NOT_SUPPORTED, call, std::string(f.name) + ": " + what + " is not emulated");
        };
        switch (f.attr) {
          case CUBLASLT_MATMUL_DESC_POINTER_MODE:
            if (n.pointer_mode == CUBLASLT_POINTER_MODE_HOST) break;
            if (n.pointer_mode >= CUBLASLT_POINTER_MODE_DEVICE &&
                n.pointer_mode <= CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST)
              return not_emulated("pointer mode " + std::to_string(n.pointer_mode) +
                                  " (only CUBLASLT_POINTER_MODE_HOST)");
            return fail(CUBLAS_STATUS_INVALID_VALUE, call, "unknown pointer mode " + std::to_string(n.pointer_mode));
          case CUBLASLT_MATMUL_DESC_TRANSA:
          case CUBLASLT_MATMUL_DESC_TRANSB: {
            const int op = f.attr == CUBLASLT_MATMUL_DESC_TRANSA ? n.transa : n.transb;
            if (!valid_op(op))
              return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                          std::string(f.name) + ": " + std::to_string(op) + " is not CUBLAS_OP_N, _T or _C");
            break;
          }
          case CUBLASLT_MATMUL_DESC_TRANSC:
            if (n.transc == CUBLAS_OP_N) break;
            if (valid_op(n.transc)) return not_emulated(std::string("TRANSC = ") + op_str(n.transc) + " (only N)");
            return fail(CUBLAS_STATUS_INVALID_VALUE, call, "TRANSC " + std::to_string(n.transc) + " is not an operation");
          case CUBLASLT_MATMUL_DESC_FILL_MODE:
            if (n.fill_mode == CUBLAS_FILL_MODE_FULL) break;
            if (n.fill_mode == CUBLAS_FILL_MODE_LOWER || n.fill_mode == CUBLAS_FILL_MODE_UPPER)
              return not_emulated("a triangular fill mode");
            return fail(CUBLAS_STATUS_INVALID_VALUE, call, "unknown fill mode " + std::to_string(n.fill_mode));
          case CUBLASLT_MATMUL_DESC_EPILOGUE:
            switch (n.epilogue) {
              case CUBLASLT_EPILOGUE_DEFAULT: return CUBLAS_STATUS_SUCCESS;
              case CUBLASLT_EPILOGUE_RELU:
              case CUBLASLT_EPILOGUE_RELU_AUX:
              case CUBLASLT_EPILOGUE_BIAS:
              case CUBLASLT_EPILOGUE_RELU_BIAS:
              case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
              case CUBLASLT_EPILOGUE_DRELU:
              case CUBLASLT_EPILOGUE_DRELU_BGRAD:
              case CUBLASLT_EPILOGUE_GELU:
              case CUBLASLT_EPILOGUE_GELU_AUX:
              case CUBLASLT_EPILOGUE_GELU_BIAS:
              case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
              case CUBLASLT_EPILOGUE_DGELU:
              case CUBLASLT_EPILOGUE_DGELU_BGRAD:
              case CUBLASLT_EPILOGUE_BGRADA:
              case CUBLASLT_EPILOGUE_BGRADB:
                return not_emulated("epilogue " + std::to_string(n.epilogue) + " (only CUBLASLT_EPILOGUE_DEFAULT)");
              default:
                return fail(CUBLAS_STATUS_INVALID_VALUE, call, "unknown epilogue " + std::to_string(n.epilogue));
            }
          case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
            if (n.amax_d) return not_emulated("amax of D");
            break;
          case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER:
          case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER:
            if (n.aux_scale || n.aux_amax) return not_emulated("an auxiliary-output scale or amax");
            break;
          case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER:
            if (n.d_out_scale) return not_emulated("an output scale");
            break;
          case CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR:
            if (n.emulation_desc) return not_emulated("an emulation descriptor");
            break;
          case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
          case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: {
            // Per-tensor fp32, or FP4's block scales (checked against the types at the matmul).
            const int mode = f.attr == CUBLASLT_MATMUL_DESC_A_SCALE_MODE ? n.a_scale_mode : n.b_scale_mode;
            if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 ||
                mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
              break;
            if (mode > 0 && mode < CUBLASLT_MATMUL_MATRIX_SCALE_END)
              return not_emulated(scale_mode_str(mode) + " (only SCALAR_32F, and VEC16_UE4M3 or VEC32_UE8M0 for FP4)");
            return fail(CUBLAS_STATUS_INVALID_VALUE, call, std::string(f.name) + ": unknown " + scale_mode_str(mode));
          }
          case CUBLASLT_MATMUL_DESC_C_SCALE_MODE:
          case CUBLASLT_MATMUL_DESC_D_SCALE_MODE:
          case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE:
          case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE:
            if (n.c_scale_mode || n.d_scale_mode || n.aux_scale_mode || n.d_out_scale_mode)
              return not_emulated("a scale mode other than per-tensor fp32 for C, D or an output");
            break;
          default: break;  // stored; the default epilogue ignores bias and aux settings
        }
        return CUBLAS_STATUS_SUCCESS;
      });
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  const char* call = "cublasLtMatmulDescGetAttribute";
  DescState s;
  if (cublasStatus_t st = get_desc(matmulDesc, call, s); st != CUBLAS_STATUS_SUCCESS) return st;
  return get_attribute(s, kDescFields, attr, buf, sizeInBytes, sizeWritten, call);
}

// Heuristic preferences.

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
  if (!pref) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceInit", "the preference is null");
  if (size < sizeof(PrefState))
    return fail(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmulPreferenceInit", "the space is too small for a preference");
  PrefState s{};
  s.magic = kPrefMagic;
  s.search_mode = CUBLASLT_SEARCH_BEST_FIT;
  s.reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  s.max_workspace = 0;
  for (auto& a : s.align) a = 256;
  s.impl_mask = ~std::uint64_t{0};
  store(pref, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "the preference pointer is null");
  auto* p = new cublasLtMatmulPreferenceOpaque_t{};
  cublasLtMatmulPreferenceInit_internal(p, sizeof *p);
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (!pref) return CUBLAS_STATUS_SUCCESS;
  std::memset(pref, 0, sizeof *pref);
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  const char* call = "cublasLtMatmulPreferenceSetAttribute";
  PrefState s;
  if (cublasStatus_t st = get_pref(pref, call, s); st != CUBLAS_STATUS_SUCCESS) return st;
  return set_attribute(pref, s, kPrefFields, attr, buf, sizeInBytes, call,
                       [call](const PrefState& n, const Field& f) -> cublasStatus_t {
                         if (f.attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE && n.search_mode != CUBLASLT_SEARCH_BEST_FIT) {
                           if (n.search_mode == CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID)
                             return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                                         "CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID is not emulated");
                           return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                                       "search mode " + std::to_string(n.search_mode) + " is reserved");
                         }
                         return CUBLAS_STATUS_SUCCESS;
                       });
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  const char* call = "cublasLtMatmulPreferenceGetAttribute";
  PrefState s;
  if (cublasStatus_t st = get_pref(pref, call, s); st != CUBLAS_STATUS_SUCCESS) return st;
  return get_attribute(s, kPrefFields, attr, buf, sizeInBytes, sizeWritten, call);
}

// The heuristic: one algorithm (the reference GEMM), tied to the problem it was chosen for.

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (cublasStatus_t s = check_lt_handle(lightHandle, call); s != CUBLAS_STATUS_SUCCESS) return s;
  if (requestedAlgoCount <= 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "requestedAlgoCount is " + std::to_string(requestedAlgoCount) + "; it must be at least 1");
  if (!heuristicResultsArray || !returnAlgoCount)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call, "the results array or returnAlgoCount is null");
  *returnAlgoCount = 0;
  PrefState pref;
  if (cublasStatus_t s = get_pref(preference, call, pref); s != CUBLAS_STATUS_SUCCESS) return s;
  LtProblem p;
  cublasStatus_t s = lt_problem(call, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, p);
  // The heuristic finds nothing for a device that cannot run the problem.
  if (s == CUBLAS_STATUS_ARCH_MISMATCH) s = t_last.status = CUBLAS_STATUS_NOT_SUPPORTED;
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (p.fp8 || p.fp4) {
    const char* names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i)
      if (pref.align[i] < 16)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    std::string("no ") + (p.fp4 ? "FP4" : "fp8") + " algorithm works with " + names[i] +
                        " aligned to only " +
                        std::to_string(pref.align[i]) + " bytes (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" + names[i] +
                        "_BYTES); they need 16");
  }
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = fingerprint(p);
  r.algo.data[2] = static_cast<std::uint64_t>(algo_id(p));
  r.workspaceSize = 0;  // the reference needs none, so any MAX_WORKSPACE_BYTES fits
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  heuristicResultsArray[0] = r;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  const char* call = "cublasLtMatmulAlgoConfigGetAttribute";
  if (!algo) return fail(CUBLAS_STATUS_INVALID_VALUE, call, "the algo is null");
  if (algo->data[0] != kAlgoMagic)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call, "the algo was not filled in by cublasLtMatmulAlgoGetHeuristic");
  // The reference's one configuration: its id and the attributes' defaults.
  struct Config {
    std::int32_t id, splitk;
    std::uint32_t tile, reduction, swizzle, custom, stages;
    std::uint16_t inner, cluster;
  } c{static_cast<std::int32_t>(algo->data[2]), 1, 0, CUBLASLT_REDUCTION_SCHEME_NONE, 0, 0, 0, 0, 0};
  const Field fields[] = {
      Field{CUBLASLT_ALGO_CONFIG_ID, offsetof(Config, id), 4, "CUBLASLT_ALGO_CONFIG_ID"},
      Field{CUBLASLT_ALGO_CONFIG_TILE_ID, offsetof(Config, tile), 4, "CUBLASLT_ALGO_CONFIG_TILE_ID"},
      Field{CUBLASLT_ALGO_CONFIG_SPLITK_NUM, offsetof(Config, splitk), 4, "CUBLASLT_ALGO_CONFIG_SPLITK_NUM"},
      Field{CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, offsetof(Config, reduction), 4,
            "CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME"},
      Field{CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, offsetof(Config, swizzle), 4, "CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING"},
      Field{CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, offsetof(Config, custom), 4, "CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION"},
      Field{CUBLASLT_ALGO_CONFIG_STAGES_ID, offsetof(Config, stages), 4, "CUBLASLT_ALGO_CONFIG_STAGES_ID"},
      Field{CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, offsetof(Config, inner), 2, "CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID"},
      Field{CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, offsetof(Config, cluster), 2,
            "CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID"},
  };
  return get_attribute(c, fields, attr, buf, sizeInBytes, sizeWritten, call);
}

cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    const void*, size_t) {
  return fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoConfigSetAttribute",
              "configuring algo attribute " + std::to_string(attr) + " of " + ptr_str(algo) +
                  " is not emulated; use the algo cublasLtMatmulAlgoGetHeuristic returns");
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  const char* call = "cublasLtMatmul";
  if (cublasStatus_t s = check_lt_handle(lightHandle, call); s != CUBLAS_STATUS_SUCCESS) return s;
  LtProblem p;
  if (cublasStatus_t s = lt_problem(call, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, p); s != CUBLAS_STATUS_SUCCESS)
    return s;
  // An algo must come from the heuristic, for this very problem (a null one
  // means "run the heuristic", as in the library).
  if (algo) {
    if (algo->data[0] != kAlgoMagic)
      return fail(CUBLAS_STATUS_INVALID_VALUE, call, "the algo was not filled in by cublasLtMatmulAlgoGetHeuristic");
    if (algo->data[1] != fingerprint(p))
      return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                  "the algo was chosen by cublasLtMatmulAlgoGetHeuristic for a different problem (types, shapes, "
                  "leading dimensions, transposes or batch differ from these descriptors)");
  }
  Gemm& g = p.gemm;
  for (auto [ptr, what] : {std::pair<const void*, const char*>{alpha, "alpha"}, {beta, "beta"}})
    if (auto why = host_scalar_problem(ptr, what); !why.empty()) return fail(CUBLAS_STATUS_INVALID_VALUE, call, why);
  std::memcpy(&g.alpha, alpha, sizeof g.alpha);
  std::memcpy(&g.beta, beta, sizeof g.beta);
  g.a.ptr = A;
  g.b.ptr = B;
  g.c.ptr = C;
  g.d.ptr = D;
  const LayoutState &Cl = p.layout[2], &Dl = p.layout[3];
  if (C == D && (Cl.ld != Dl.ld || Cl.type != Dl.type || Cl.stride != Dl.stride))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                "C and D are the same memory (in place) but Cdesc and Ddesc differ in ld, type or batch stride");
  if (p.fp8 || p.fp4) {
    const void* ptrs[4] = {A, B, C, D};
    const char* names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i)
      if (reinterpret_cast<std::uintptr_t>(ptrs[i]) % 16 != 0)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    std::string(p.fp4 ? "FP4" : "fp8") + " matmuls need 16-byte aligned matrices; " + names[i] + " " +
                        ptr_str(ptrs[i]) + " is not");
  }
  if (p.fp4) {
    // Block scales have no default: each mode needs its tensor, 16-byte aligned.
    for (auto [ptr, x] : {std::pair<const void*, const char*>{p.desc.a_scale, "A"}, {p.desc.b_scale, "B"}}) {
      const int mode = *x == 'A' ? p.desc.a_scale_mode : p.desc.b_scale_mode;
      if (!ptr)
        return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                    std::string("CUBLASLT_MATMUL_DESC_") + x + "_SCALE_MODE is " + scale_mode_str(mode) +
                        " but CUBLASLT_MATMUL_DESC_" + x + "_SCALE_POINTER is not set (block scales have no default)");
      if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    std::string("block scale tensors must be 16-byte aligned; the ") + x + " scale tensor " +
                        ptr_str(ptr) + " is not");
    }
    g.a_scale = p.desc.a_scale;
    g.b_scale = p.desc.b_scale;
  }
  if (p.fp8) {
    for (auto [ptr, what] : {std::pair<const void*, const char*>{p.desc.a_scale, "A scale"}, {p.desc.b_scale, "B scale"}})
      if (ptr)
        if (auto why = range_problem(ptr, sizeof(float), what); !why.empty())
          return fail(CUBLAS_STATUS_INVALID_VALUE, call, why);
    g.a_scale = p.desc.a_scale;
    g.b_scale = p.desc.b_scale;
  }
  if (workspace && workspaceSizeInBytes > 0)
    if (auto why = range_problem(workspace, workspaceSizeInBytes, "workspace"); !why.empty())
      return fail(CUBLAS_STATUS_INVALID_VALUE, call, why);
  if (auto why = extent_problem(g, g.beta != 0.0f); !why.empty()) return fail(CUBLAS_STATUS_INVALID_VALUE, call, why);
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
  return enqueue_gemm(std::move(g), stream);
}

}  // extern "C"
