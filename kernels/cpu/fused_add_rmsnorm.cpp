// The fused residual add and RMSNorm on the CPU (ops/fused_add_rmsnorm.hpp):
// one pass per row that adds, stores the sum and accumulates its squares in
// fp32, then a second over the row (now in L1/L2) that scales it; rows split
// over the threads. Also the operation's CPU implementation, every output
// element verified against reference::fused_add_rmsnorm_row.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/cpu_op.hpp"
#include "cpu/storage.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/fused_add_rmsnorm.hpp"
#include "reference/common.hpp"
#include "reference/fused_add_rmsnorm.hpp"

namespace phasebench::cpu {

namespace {

template <class T>
void fused_add_rmsnorm_rows(const void* x, const void* residual, const void* weight, void* residual_out, void* y,
                            std::uint64_t M, std::uint64_t h, float eps) {
  const auto* X = static_cast<const T*>(x);
  const auto* R = static_cast<const T*>(residual);
  const auto* W = static_cast<const T*>(weight);
  auto* RO = static_cast<T*>(residual_out);
  auto* Y = static_cast<T*>(y);
  const float inv_h = 1.0f / static_cast<float>(h);
  // A row or two of a small batch is faster on one thread than a parallel region's fork/join.
#pragma omp parallel for schedule(static) if (M * h >= (1u << 16))
  for (std::int64_t m = 0; m < static_cast<std::int64_t>(M); ++m) {
    const std::uint64_t o = static_cast<std::uint64_t>(m) * h;
    float ss = 0.f;
    for (std::uint64_t j = 0; j < h; ++j) {
      const float s = decode(X[o + j]) + decode(R[o + j]);
      encode(s, RO + o + j);
      ss += s * s;
    }
    const float inv_rms = 1.0f / std::sqrt(ss * inv_h + eps);
    for (std::uint64_t j = 0; j < h; ++j) encode(decode(RO[o + j]) * inv_rms * decode(W[j]), Y + o + j);
  }
}

class CpuFusedAddRmsnorm final : public CpuOp {
 public:
  explicit CpuFusedAddRmsnorm(const OpRequest& r)
      : CpuOp(r.footprint_bytes()), r_(r), M_(r.shape["M"]), h_(r.shape["h"]) {
    const auto e = element_bytes(r.dtype), n = mul(M_, h_, "fused add + RMSNorm elements");
    x_ = HostBuffer(n * e);
    res_ = HostBuffer(n * e);
    w_ = HostBuffer(h_ * e);
    res_out_ = HostBuffer(n * e);
    y_ = HostBuffer(n * e);
    fill(x_, r.dtype, n, r.seed + 1);
    fill(res_, r.dtype, n, r.seed + 2);
    fill(w_, r.dtype, h_, r.seed + 3);
    std::memset(res_out_.get(), 0, res_out_.bytes());
    std::memset(y_.get(), 0, y_.bytes());
    for (const HostBuffer* b : {&x_, &res_, &w_, &res_out_, &y_}) track(b->get(), b->bytes());
  }

  void run() override {
    const float eps = r_.options.as<FusedAddRmsnormOptions>().eps;
    auto go = [&](auto type) {
      fused_add_rmsnorm_rows<decltype(type)>(x_.get(), res_.get(), w_.get(), res_out_.get(), y_.get(), M_, h_, eps);
    };
    if (r_.dtype == DType::bf16)
      go(Bf16{});
    else if (r_.dtype == DType::fp16)
      go(Fp16{});
    else
      go(float{});
  }

  // Every element of both outputs against the reference, row by row.
  void verify() override {
    run();
    const auto n = M_ * h_;
    const auto x = reference::to_float(x_.get(), r_.dtype, n), res = reference::to_float(res_.get(), r_.dtype, n);
    const auto w = reference::to_float(w_.get(), r_.dtype, h_);
    std::vector<double> want_sum(n), want_y(n);
    for (std::uint64_t m = 0; m < M_; ++m)
      reference::fused_add_rmsnorm_row(x.data() + m * h_, res.data() + m * h_, w.data(), h_,
                                       r_.options.as<FusedAddRmsnormOptions>().eps, want_sum.data() + m * h_,
                                       want_y.data() + m * h_);
    const std::string what = "fused add + RMSNorm (M=" + std::to_string(M_) + " h=" + std::to_string(h_) + ")";
    const auto tol = reference::tolerance_for(r_.dtype);
    reference::check_close(reference::to_float(res_out_.get(), r_.dtype, n), want_sum, tol, what + " residual_out");
    reference::check_close(output_values(), want_y, tol, what + " y");
  }

  std::vector<float> output_values() override { return reference::to_float(y_.get(), r_.dtype, M_ * h_); }

 private:
  OpRequest r_;
  std::uint64_t M_ = 0, h_ = 0;
  HostBuffer x_, res_, w_, res_out_, y_;
};

}  // namespace

}  // namespace phasebench::cpu

PHASEBENCH_CPU_OPS(fused_add_rmsnorm) {
  using namespace phasebench;
  using namespace phasebench::cpu;
  registry.add({kFusedAddRmsnorm, Impl::own,
                [](DType t, const CpuEnv&) { return t == DType::fp32 || t == DType::bf16 || t == DType::fp16; }, {},
                [](const OpRequest& r, const CpuEnv&) -> std::optional<std::string> {
                  if (r.shape["M"] == 0 || r.shape["h"] == 0) return "fused add + RMSNorm: M and h must be >= 1";
                  return std::nullopt;
                },
                {},
                [](CpuEnv&, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
                  return std::make_unique<CpuFusedAddRmsnorm>(r);
                }});
}
