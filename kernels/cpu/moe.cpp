// The routed experts of a MoE layer on the CPU (ops/moe.hpp), BLAS per expert:
// permute X's rows into expert order, per expert one GEMM of its rows by its
// gate_up weights (OpenBLAS sgemm, sgemv for an expert with one row; sbgemm for
// bf16, its fp32 output rounded),
// SiLU(gate) * up, per expert one GEMM by its down weights, then each token's k
// rows combined with the router's weights. The experts' weights are one buffer,
// gate_up of every expert [E][2I][h] then down [E][h][I], filled once per model
// and dtype (shared with the previous point, like the linear layers').
#include <cmath>
#include <cstring>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/cpu_op.hpp"
#include "reference/common.hpp"
#include "reference/moe.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/moe.hpp"

namespace phasebench::cpu {

namespace {

inline float load(const void* p, std::uint64_t i, DType t) {
  return t == DType::fp32 ? static_cast<const float*>(p)[i] : numeric::bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
}
inline void store(void* p, std::uint64_t i, DType t, float v) {
  if (t == DType::fp32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<std::uint16_t*>(p)[i] = numeric::float_to_bf16(v);
}

class CpuMoe final : public CpuOp {
 public:
  CpuMoe(const OpRequest& r, CpuEnv& env)
      : CpuOp(r.footprint_bytes()), r_(r), s_(MoeShape::of(r.shape)), routed_(moe_routed(r)), sbgemm_(env.sbgemm) {
    const auto e = element_bytes(r.dtype);
    const auto T = s_.T, k = s_.k, E = s_.E, h = s_.h, I = s_.I, rows = T * k;
    // Expert order: rows sorted by expert, then token.
    offsets_.assign(E + 1, 0);
    for (std::uint64_t x = 0; x < E; ++x) offsets_[x + 1] = offsets_[x] + routed_.per_expert[x];
    src_.resize(rows);
    pos_.resize(rows);
    std::vector<std::uint64_t> next(offsets_.begin(), offsets_.end() - 1);
    for (std::uint64_t t = 0; t < T; ++t)
      for (std::uint64_t j = 0; j < k; ++j) {
        const auto row = next[routed_.expert[t * k + j]]++;
        src_[row] = static_cast<std::uint32_t>(t);
        pos_[t * k + j] = static_cast<std::uint32_t>(row);
      }
    for (std::uint64_t x = 0; x < E; ++x) max_rows_ = std::max(max_rows_, routed_.per_expert[x]);
    X_ = HostBuffer(mul({T, h, e}));
    fill(X_, r.dtype, T * h, r.seed + 1);
    W_ = env.filled->get(r.dtype, mul({E, 3, h, I}), r.seed + 2, moe_weight_scale(h));
    Xp_ = HostBuffer(mul({rows, h, e}));
    H_ = HostBuffer(mul({rows, 2 * I, e}));
    A_ = HostBuffer(mul({rows, I, e}));
    Yp_ = HostBuffer(mul({rows, h, e}));
    Y_ = HostBuffer(mul({T, h, e}));
    if (r.dtype == DType::bf16) F_ = HostBuffer(mul({std::max<std::uint64_t>(max_rows_, 1), std::max(2 * I, h), 4}));
    std::memset(Y_.get(), 0, Y_.bytes());
    for (const HostBuffer* b : {&X_, &Xp_, &H_, &A_, &Yp_, &Y_, &F_})
      if (b->get()) track(b->get(), b->bytes());
    // The weights of the experts this routing touches (the others are never read).
    for (std::uint64_t x = 0; x < E; ++x)
      if (routed_.per_expert[x]) {
        track(W_->as<unsigned char>() + x * 2 * I * h * e, 2 * I * h * e);
        track(W_->as<unsigned char>() + (E * 2 * I * h + x * h * I) * e, h * I * e);
      }
    track(src_.data(), src_.size() * 4);
    track(pos_.data(), pos_.size() * 4);
    track(routed_.weight.data(), routed_.weight.size() * 4);
  }

  void run() override {
    const auto t = r_.dtype;
    const auto e = element_bytes(t);
    const auto T = s_.T, k = s_.k, E = s_.E, h = s_.h, I = s_.I;
    const auto rows = static_cast<std::int64_t>(T * k);
    auto* xp = Xp_.as<unsigned char>();
#pragma omp parallel for
    for (std::int64_t q = 0; q < rows; ++q)
      std::memcpy(xp + static_cast<std::uint64_t>(q) * h * e, X_.as<unsigned char>() + src_[static_cast<std::uint64_t>(q)] * h * e, h * e);
    const auto* w = W_->as<unsigned char>();
    for (std::uint64_t x = 0; x < E; ++x)
      if (routed_.per_expert[x])
        gemm(xp + offsets_[x] * h * e, w + x * 2 * I * h * e, H_.as<unsigned char>() + offsets_[x] * 2 * I * e,
             routed_.per_expert[x], 2 * I, h);
#pragma omp parallel for
    for (std::int64_t q = 0; q < rows; ++q) {
      const auto base = static_cast<std::uint64_t>(q);
      for (std::uint64_t c = 0; c < I; ++c) {
        const float g = load(H_.get(), base * 2 * I + c, t), u = load(H_.get(), base * 2 * I + I + c, t);
        store(A_.get(), base * I + c, t, g / (1.0f + std::exp(-g)) * u);
      }
    }
    for (std::uint64_t x = 0; x < E; ++x)
      if (routed_.per_expert[x])
        gemm(A_.as<unsigned char>() + offsets_[x] * I * e, w + (E * 2 * I * h + x * h * I) * e,
             Yp_.as<unsigned char>() + offsets_[x] * h * e, routed_.per_expert[x], h, I);
#pragma omp parallel
    {
      std::vector<float> acc(h);
#pragma omp for
      for (std::int64_t tok = 0; tok < static_cast<std::int64_t>(T); ++tok) {
        const auto tt = static_cast<std::uint64_t>(tok);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::uint64_t j = 0; j < k; ++j) {
          const float wt = routed_.weight[tt * k + j];
          const std::uint64_t row = pos_[tt * k + j];
          for (std::uint64_t c = 0; c < h; ++c) acc[c] += wt * load(Yp_.get(), row * h + c, t);
        }
        for (std::uint64_t c = 0; c < h; ++c) store(Y_.get(), tt * h + c, t, acc[c]);
      }
    }
  }

  void verify() override {
    run();
    reference::check_moe(inputs(), reference::moe_tokens_to_check(routed_.expert.data(), s_.T, s_.k), r_.dtype,
                         [&](std::uint64_t t, std::uint64_t c) { return load(Y_.get(), t * s_.h + c, r_.dtype); },
                         "moe experts (" + std::string(to_string(r_.impl)) + ", " + describe() + ")");
  }

  std::vector<float> output_values() override { return reference::to_float(Y_.get(), r_.dtype, s_.T * s_.h); }

 private:
  // C[M,N] = A[M,K] B^T, B is N x K; all row-major in the op's dtype.
  void gemm(const unsigned char* A, const unsigned char* B, unsigned char* C, std::uint64_t M, std::uint64_t N,
            std::uint64_t K) {
    const auto m = static_cast<blasint>(M), n = static_cast<blasint>(N), kk = static_cast<blasint>(K);
    if (r_.dtype == DType::fp32 && M == 1) {  // one row: BLAS's GEMV streams the weights without packing them
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, kk, 1.0f, reinterpret_cast<const float*>(B), kk,
                  reinterpret_cast<const float*>(A), 1, 0.0f, reinterpret_cast<float*>(C), 1);
      return;
    }
    if (r_.dtype == DType::fp32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kk, 1.0f, reinterpret_cast<const float*>(A), kk,
                  reinterpret_cast<const float*>(B), kk, 0.0f, reinterpret_cast<float*>(C), n);
      return;
    }
    sbgemm_(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kk, 1.0f, A, kk, B, kk, 0.0f, F_.as<float>(), n);
    const auto total = static_cast<std::int64_t>(M * N);
    auto* out = reinterpret_cast<std::uint16_t*>(C);
#pragma omp parallel for
    for (std::int64_t i = 0; i < total; ++i) out[i] = numeric::float_to_bf16(F_.as<float>()[i]);
  }

  std::string describe() const {
    return "T=" + std::to_string(s_.T) + " k=" + std::to_string(s_.k) + " E=" + std::to_string(s_.E) +
           " h=" + std::to_string(s_.h) + " I=" + std::to_string(s_.I) + ", routing " + moe_routing(r_).text() + ", " +
           std::to_string(routed_.touched()) + " experts touched";
  }

  reference::MoeInputs inputs() const {
    reference::MoeInputs in;
    in.h = s_.h;
    in.I = s_.I;
    in.k = s_.k;
    in.expert = routed_.expert.data();
    in.weight = routed_.weight.data();
    const DType t = r_.dtype;
    const auto h = s_.h, I = s_.I, E = s_.E;
    const void* X = X_.get();
    const void* W = W_->get();
    in.x = [=](std::uint64_t tok, float* out) {
      for (std::uint64_t c = 0; c < h; ++c) out[c] = load(X, tok * h + c, t);
    };
    in.gate_up = [=](std::uint64_t x, std::uint64_t row, float* out) {
      for (std::uint64_t c = 0; c < h; ++c) out[c] = load(W, (x * 2 * I + row) * h + c, t);
    };
    in.down = [=](std::uint64_t x, std::uint64_t row, float* out) {
      for (std::uint64_t c = 0; c < I; ++c) out[c] = load(W, E * 2 * I * h + (x * h + row) * I + c, t);
    };
    return in;
  }

  OpRequest r_;
  MoeShape s_;
  RoutedTokens routed_;
  sbgemm_fn sbgemm_;
  std::vector<std::uint64_t> offsets_;
  std::vector<std::uint32_t> src_, pos_;
  std::uint64_t max_rows_ = 0;
  HostBuffer X_, Xp_, H_, A_, Yp_, Y_, F_;
  std::shared_ptr<const HostBuffer> W_;
};

}  // namespace

}  // namespace phasebench::cpu

// The MoE experts on the CPU: the BLAS row (fp32; bf16 where OpenBLAS has sbgemm).
PHASEBENCH_CPU_OPS(moe) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  registry.add({kMoe, Impl::blas,
                [](DType t, const CpuEnv& env) { return t == DType::fp32 || (t == DType::bf16 && env.sbgemm); }, {},
                [](const OpRequest& r, const CpuEnv&) -> std::optional<std::string> {
                  const auto s = MoeShape::of(r.shape);
                  const std::uint64_t limit = 0x7fffffff;
                  if (s.T * s.k > limit || 2 * s.I > limit || s.h > limit)
                    return "a dimension exceeds BLAS's 32-bit integers";
                  return std::nullopt;
                },
                [](const OpRequest& r, const CpuEnv&) -> std::uint64_t {  // bf16: sbgemm's fp32 output, per expert
                  if (r.dtype != DType::bf16) return 0;
                  const auto s = MoeShape::of(r.shape);
                  return mul({s.T * s.k, std::max(2 * s.I, s.h), 4});
                },
                [](CpuEnv& env, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
                  return std::make_unique<CpuMoe>(r, env);
                }});
}
