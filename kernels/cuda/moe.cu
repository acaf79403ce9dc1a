// The routed experts of a MoE layer on CUDA (ops/moe.hpp), the vendor-library row:
//   permute   one CTA per routed row copies its token's row of X into expert order;
//   gate_up   cublasGemmGroupedBatchedEx, one group per touched expert (its rows
//             are its own m): H_e[n_e, 2I] = Xp_e W_gu,e^T;
//   act       A = SiLU(gate) * up, elementwise over [rows, I];
//   down      cublasGemmGroupedBatchedEx: Yp_e[n_e, h] = A_e W_d,e^T;
//   combine   one CTA per token sums its k rows of Yp with the router's weights.
// Row-major C[M,N] = A[M,K] B^T is, column-major, C^T = B^T(op T) A^T: transa T
// on the weights (lda K), transb N on the rows (ldb K), m = N, n = M, ldc = N.
// The grouping (which experts, their rows and pointers) follows from the drawn
// routing and is made at prepare; a run is five launches. Storage bf16, fp16 or
// fp32 (the intermediates too), fp32 math; weights and inputs filled on the
// device with the host's seeded values, so verification regenerates them on the
// host and downloads only Y.
#include "cuda/moe.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "common/numeric.hpp"
#include "reference/moe.hpp"
#include "cuda/attention_util.cuh"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/moe.hpp"

namespace phasebench::cuda {

namespace {

constexpr int kThreads = 256;

// Element access by storage type: fp32 as is, 16-bit through its tag.
struct F32 {
  using T = float;
  static __device__ __forceinline__ float load(float x) { return x; }
  static __device__ __forceinline__ float store(float v) { return v; }
};
template <class Tag>
struct Half {
  using T = std::uint16_t;
  static __device__ __forceinline__ float load(std::uint16_t x) { return decode<Tag>(x); }
  static __device__ __forceinline__ std::uint16_t store(float v) { return encode<Tag>(v); }
};

template <class S>
__global__ void __launch_bounds__(kThreads)
    moe_permute_kernel(const typename S::T* __restrict__ x, typename S::T* __restrict__ xp,
                       const std::int32_t* __restrict__ src, unsigned h) {
  const std::size_t row = blockIdx.x;
  const typename S::T* in = x + static_cast<std::size_t>(src[row]) * h;
  typename S::T* out = xp + row * h;
  for (unsigned c = threadIdx.x; c < h; c += kThreads) out[c] = in[c];
}

template <class S>
__global__ void __launch_bounds__(kThreads)
    moe_act_kernel(const typename S::T* __restrict__ gate_up, typename S::T* __restrict__ act, std::size_t n,
                   unsigned I) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * kThreads) {
    const std::size_t row = i / I, c = i % I;
    const float g = S::load(gate_up[row * 2 * I + c]);
    const float u = S::load(gate_up[row * 2 * I + I + c]);
    act[i] = S::store(g / (1.f + __expf(-g)) * u);
  }
}

template <class S>
__global__ void __launch_bounds__(kThreads)
    moe_combine_kernel(const typename S::T* __restrict__ yp, typename S::T* __restrict__ y,
                       const std::int32_t* __restrict__ pos, const float* __restrict__ weight, unsigned h, unsigned k) {
  const std::size_t t = blockIdx.x;
  for (unsigned c = threadIdx.x; c < h; c += kThreads) {
    float acc = 0.f;
    for (unsigned j = 0; j < k; ++j)
      acc = fmaf(weight[t * k + j], S::load(yp[static_cast<std::size_t>(pos[t * k + j]) * h + c]), acc);
    y[t * h + c] = S::store(acc);
  }
}

template <class F>
void by_storage(DType t, F&& f) {
  if (t == DType::fp32)
    f(F32{});
  else if (t == DType::bf16)
    f(Half<Bf16Tag>{});
  else
    f(Half<Fp16Tag>{});
}

cudaDataType_t blas_type(DType t) {
  return t == DType::fp32 ? CUDA_R_32F : t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

// A float through storage type t and back (the host's view of a filled element).
float stored(float v, DType t) {
  if (t == DType::bf16) return numeric::bf16_to_float(numeric::float_to_bf16(v));
  if (t == DType::fp16) return numeric::fp16_to_float(numeric::float_to_fp16(v));
  return v;
}

std::optional<std::string> moe_unsupported(const OpRequest& r) {
  const auto s = MoeShape::of(r.shape);
  const std::uint64_t limit = (1ull << 31) - 1;
  if (s.T == 0 || s.h == 0 || s.I == 0) return "the MoE experts need T, h and I of at least 1";
  if (s.T > limit || s.T * s.k > limit || 2 * s.I > limit || s.h > limit)
    return "the MoE experts: a dimension exceeds cuBLAS's 32-bit sizes (T*k, 2I, h below 2^31)";
  return std::nullopt;
}

// One cublasGemmGroupedBatchedEx: a group per touched expert; C_e = A_e B_e^T
// in row-major terms (A_e its rows [n_e, K], B_e its weights [N, K]).
struct Grouped {
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  DeviceBuffer ptrs;  // A pointers, then B pointers, then C pointers (the problems')
  int groups = 0;

  void make(const std::vector<std::uint64_t>& rows, const std::vector<std::uint64_t>& offsets, const void* act,
            const void* weights, void* out, std::uint64_t N, std::uint64_t K, std::size_t e, cudaStream_t stream) {
    std::vector<const void*> host;  // [A (weights) ..., B (rows) ..., C ...]
    std::vector<const void*> a, b, c;
    for (std::size_t x = 0; x < rows.size(); ++x) {
      if (rows[x] == 0) continue;
      ta.push_back(CUBLAS_OP_T);
      tb.push_back(CUBLAS_OP_N);
      m.push_back(static_cast<int>(N));
      n.push_back(static_cast<int>(rows[x]));
      k.push_back(static_cast<int>(K));
      lda.push_back(static_cast<int>(K));
      ldb.push_back(static_cast<int>(K));
      ldc.push_back(static_cast<int>(N));
      size.push_back(1);
      alpha.push_back(1.0f);
      beta.push_back(0.0f);
      a.push_back(static_cast<const unsigned char*>(weights) + x * N * K * e);
      b.push_back(static_cast<const unsigned char*>(act) + offsets[x] * K * e);
      c.push_back(static_cast<unsigned char*>(out) + offsets[x] * N * e);
    }
    groups = static_cast<int>(a.size());
    host.insert(host.end(), a.begin(), a.end());
    host.insert(host.end(), b.begin(), b.end());
    host.insert(host.end(), c.begin(), c.end());
    ptrs = DeviceBuffer(std::max<std::size_t>(host.size(), 1) * sizeof(void*));
    upload(ptrs.get(), host.data(), host.size() * sizeof(void*), stream);
  }

  void run(cublasHandle_t handle, DType t) const {
    void* const* p = ptrs.as<void*>();
    const cudaDataType_t ty = blas_type(t);
    PB_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(handle, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
                                               p, ty, lda.data(), p + groups, ty, ldb.data(), beta.data(),
                                               p + 2 * groups, ty, ldc.data(), groups, size.data(), CUBLAS_COMPUTE_32F));
  }
};

class CublasMoeOp final : public PreparedOp, public MoeOpAccess {
 public:
  CublasMoeOp(Context& ctx, const OpRequest& r) : ctx_(ctx), r_(r), s_(MoeShape::of(r.shape)), routed_(moe_routed(r)) {
    if (auto why = moe_unsupported(r)) throw Unsupported(*why);
    const auto e = element_bytes(r.dtype);
    const auto T = s_.T, k = s_.k, E = s_.E, h = s_.h, I = s_.I, rows = T * k;
    // Expert order: rows sorted by expert, then token (the CPU op's order).
    std::vector<std::uint64_t> offsets(E + 1, 0);
    for (std::uint64_t x = 0; x < E; ++x) offsets[x + 1] = offsets[x] + routed_.per_expert[x];
    std::vector<std::int32_t> src(rows), pos(rows);
    std::vector<std::uint64_t> next(offsets.begin(), offsets.end() - 1);
    for (std::uint64_t t = 0; t < T; ++t)
      for (std::uint64_t j = 0; j < k; ++j) {
        const auto row = next[routed_.expert[t * k + j]]++;
        src[row] = static_cast<std::int32_t>(t);
        pos[t * k + j] = static_cast<std::int32_t>(row);
      }
    X_ = DeviceBuffer(mul({T, h, e}));
    W_ = DeviceBuffer(mul({E, 3, h, I, e}));
    Xp_ = DeviceBuffer(mul({rows, h, e}));
    H_ = DeviceBuffer(mul({rows, 2 * I, e}));
    A_ = DeviceBuffer(mul({rows, I, e}));
    Yp_ = DeviceBuffer(mul({rows, h, e}));
    Y_ = DeviceBuffer(mul({T, h, e}));
    src_ = DeviceBuffer(rows * 4);
    pos_ = DeviceBuffer(rows * 4);
    weight_ = DeviceBuffer(rows * 4);
    fill_random(X_.get(), r.dtype, T * h, r.seed + 1, 1.0f, ctx.stream);
    fill_random(W_.get(), r.dtype, E * 3 * h * I, r.seed + 2, moe_weight_scale(h), ctx.stream);
    upload(src_.get(), src.data(), rows * 4, ctx.stream);
    upload(pos_.get(), pos.data(), rows * 4, ctx.stream);
    upload(weight_.get(), routed_.weight.data(), rows * 4, ctx.stream);
    // 0xff bytes are NaN in every storage type: an output never written fails verification.
    PB_CUDA_CHECK(cudaMemsetAsync(Y_.get(), 0xff, Y_.bytes(), ctx.stream));
    gate_up_.make(routed_.per_expert, offsets, Xp_.get(), W_.get(), H_.get(), 2 * I, h, e, ctx.stream);
    down_.make(routed_.per_expert, offsets, A_.get(), W_.as<unsigned char>() + E * 2 * I * h * e, Yp_.get(), h, I, e,
               ctx.stream);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    act_blocks_ = static_cast<unsigned>(std::min<std::uint64_t>((rows * I + kThreads - 1) / kThreads, 65535ull * 16));
  }

  void run() override {
    const auto T = static_cast<unsigned>(s_.T), h = static_cast<unsigned>(s_.h), I = static_cast<unsigned>(s_.I),
               k = static_cast<unsigned>(s_.k);
    const auto rows = static_cast<unsigned>(s_.T * s_.k);
    cudaStream_t st = ctx_.stream;
    by_storage(r_.dtype, [&](auto s) {
      using S = decltype(s);
      using T_ = typename S::T;
      moe_permute_kernel<S><<<rows, kThreads, 0, st>>>(X_.as<const T_>(), Xp_.as<T_>(), src_.as<const std::int32_t>(), h);
      PB_CUDA_CHECK_LAUNCH("moe_permute_kernel");
      gate_up_.run(ctx_.cublas, r_.dtype);
      moe_act_kernel<S><<<act_blocks_, kThreads, 0, st>>>(H_.as<const T_>(), A_.as<T_>(),
                                                           static_cast<std::size_t>(rows) * I, I);
      PB_CUDA_CHECK_LAUNCH("moe_act_kernel");
      down_.run(ctx_.cublas, r_.dtype);
      moe_combine_kernel<S><<<T, kThreads, 0, st>>>(Yp_.as<const T_>(), Y_.as<T_>(), pos_.as<const std::int32_t>(),
                                                    weight_.as<const float>(), h, k);
      PB_CUDA_CHECK_LAUNCH("moe_combine_kernel");
    });
  }

  void verify() override {
    run();
    const auto e = element_bytes(r_.dtype);
    corrupt_for_test(fault_, Y_.as<unsigned char>() + (s_.T - 1) * s_.h * e, s_.h * e, ctx_.stream);
    const auto y = download_as_float(Y_.get(), r_.dtype, s_.T * s_.h, ctx_.stream);
    reference::MoeInputs in;
    in.h = s_.h;
    in.I = s_.I;
    in.k = s_.k;
    in.expert = routed_.expert.data();
    in.weight = routed_.weight.data();
    const DType t = r_.dtype;
    const auto h = s_.h, I = s_.I, E = s_.E, xs = r_.seed + 1, ws = r_.seed + 2;
    const float scale = moe_weight_scale(h);
    in.x = [=](std::uint64_t tok, float* out) {
      for (std::uint64_t c = 0; c < h; ++c) out[c] = stored(numeric::random_value(xs, tok * h + c, 1.0f), t);
    };
    in.gate_up = [=](std::uint64_t x, std::uint64_t row, float* out) {
      for (std::uint64_t c = 0; c < h; ++c) out[c] = stored(numeric::random_value(ws, (x * 2 * I + row) * h + c, scale), t);
    };
    in.down = [=](std::uint64_t x, std::uint64_t row, float* out) {
      for (std::uint64_t c = 0; c < I; ++c)
        out[c] = stored(numeric::random_value(ws, E * 2 * I * h + (x * h + row) * I + c, scale), t);
    };
    std::ostringstream what;
    what << "moe experts (cublasGemmGroupedBatchedEx, " << to_string(t) << " T=" << s_.T << " k=" << s_.k
         << " E=" << s_.E << " h=" << h << " I=" << I << ", routing " << moe_routing(r_).text() << ", "
         << routed_.touched() << " experts touched)";
    reference::check_moe(in, reference::moe_tokens_to_check(routed_.expert.data(), s_.T, s_.k), t,
                         [&](std::uint64_t tok, std::uint64_t c) { return y[tok * h + c]; }, what.str());
  }

  std::vector<float> output_values() override { return download_as_float(Y_.get(), r_.dtype, s_.T * s_.h, ctx_.stream); }

  void set_fault_injection(bool on) override { fault_ = on; }

 private:
  Context& ctx_;
  OpRequest r_;
  MoeShape s_;
  RoutedTokens routed_;
  DeviceBuffer X_, W_, Xp_, H_, A_, Yp_, Y_, src_, pos_, weight_;
  Grouped gate_up_, down_;
  unsigned act_blocks_ = 1;
  bool fault_ = false;
};

}  // namespace

}  // namespace phasebench::cuda

// The MoE experts' library row (kind moe, impl blas): bf16, fp16, fp32.
PHASEBENCH_CUDA_OPS(moe) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kMoe, Impl::blas,
                [](DType t, const Context&) { return t == DType::bf16 || t == DType::fp16 || t == DType::fp32; }, {},
                limits_plan([](const OpRequest& r, const Context&) { return moe_unsupported(r); }),
                prepare_op<CublasMoeOp>()});
}
