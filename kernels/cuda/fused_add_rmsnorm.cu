// The fused residual add and RMSNorm of a decode step (ops/fused_add_rmsnorm.hpp)
// on CUDA, in 16-bit storage with fp32 math:
//   residual_out = x + residual;  y = residual_out / rms(x + residual) * weight
//
// Design (memory-bound at every batch: 4 row streams and the weight, 0 FLOPs):
// - One CTA of 256 threads per row (token); each thread owns up to 8 16-byte
//   vectors of the row (h <= 256 * 8 * 8 = 16384), read once with __ldg from x
//   and residual and held in registers, so the second pass reads only the weight
//   (the same h elements for every row: L2-resident after the first rows).
// - The sum of squares is of the fp32 sums, the normalised values are of the
//   stored (rounded) sums, as vLLM's fused_add_rms_norm and FlashInfer's
//   fused_add_rmsnorm do; one warp shuffle and one shared-memory step reduce it.
// - Out of place (residual_out, not residual): a timed run sees the same data
//   every time. No inline PTX.
// Never run on a GPU yet: verified under the functional emulation only.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/attention_util.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/cuda_op.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/fused_add_rmsnorm.hpp"
#include "reference/common.hpp"
#include "reference/fused_add_rmsnorm.hpp"

namespace phasebench::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kVecsPerThread = 8;  // 16-byte vectors of a row each thread holds
constexpr std::uint64_t kMaxHidden = std::uint64_t{kThreads} * kVecsPerThread * 8;

struct FusedAddRmsnormParams {
  const uint4* x = nullptr;         // [M, h/8]
  const uint4* residual = nullptr;  // [M, h/8]
  const uint4* weight = nullptr;    // [h/8]
  uint4* residual_out = nullptr;    // [M, h/8]
  uint4* y = nullptr;               // [M, h/8]
  int vecs_per_row = 0;             // h / 8
  float inv_h = 0.f, eps = 0.f;
};

template <class Tag>
__global__ void __launch_bounds__(kThreads) fused_add_rmsnorm_kernel(FusedAddRmsnormParams p) {
  __shared__ float warp_sums[kThreads / 32];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(p.vecs_per_row);
  uint4 sums[kVecsPerThread];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < kVecsPerThread; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * kThreads;
    if (i < p.vecs_per_row) {
      float a[8], b[8];
      unpack8<Tag>(__ldg(p.x + base + i), a);
      unpack8<Tag>(__ldg(p.residual + base + i), b);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        a[j] += b[j];
        ss = fmaf(a[j], a[j], ss);
      }
      sums[c] = pack8<Tag>(a);
      p.residual_out[base + i] = sums[c];
    }
  }
  const float inv_rms = rsqrtf(block_sum<kThreads>(ss, warp_sums) * p.inv_h + p.eps);
#pragma unroll
  for (int c = 0; c < kVecsPerThread; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * kThreads;
    if (i < p.vecs_per_row) {
      float s[8], g[8];
      unpack8<Tag>(sums[c], s);
      unpack8<Tag>(__ldg(p.weight + i), g);
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j] = s[j] * inv_rms * g[j];
      p.y[base + i] = pack8<Tag>(s);
    }
  }
}

std::optional<std::string> unsupported(const OpRequest& r) {
  const auto M = r.shape["M"], h = r.shape["h"];
  if (M == 0 || h == 0) return "fused add + RMSNorm: M and h must be >= 1";
  if (h % 8 != 0 || h > kMaxHidden)
    return "the CUDA fused add + RMSNorm takes a hidden size that is a multiple of 8 and at most " +
           std::to_string(kMaxHidden) + " (one CTA holds a row in registers), not " + std::to_string(h);
  if (M > 0x7fffffffull) return "the CUDA fused add + RMSNorm launches one CTA per row: at most 2^31 - 1 rows";
  return std::nullopt;
}

// The op: x, residual and the weight filled on the device; both outputs start as
// 0xff bytes (NaN in bf16 and fp16), so an element the kernel never writes fails
// verification; verified row by row against the reference.
class FusedAddRmsnormOp final : public PreparedOp {
 public:
  FusedAddRmsnormOp(Context& ctx, const OpRequest& r)
      : ctx_(ctx), dtype_(r.dtype), M_(r.shape["M"]), h_(r.shape["h"]),
        eps_(r.options.as<FusedAddRmsnormOptions>().eps) {
    const auto n = mul(M_, h_, "fused add + RMSNorm elements"), bytes = mul(n, element_bytes(dtype_));
    x_ = DeviceBuffer(bytes);
    residual_ = DeviceBuffer(bytes);
    weight_ = DeviceBuffer(mul(h_, element_bytes(dtype_)));
    residual_out_ = DeviceBuffer(bytes);
    y_ = DeviceBuffer(bytes);
    fill_random(x_.get(), dtype_, n, r.seed + 1, 1.0f, ctx.stream);
    fill_random(residual_.get(), dtype_, n, r.seed + 2, 1.0f, ctx.stream);
    fill_random(weight_.get(), dtype_, h_, r.seed + 3, 1.0f, ctx.stream);
    PB_CUDA_CHECK(cudaMemsetAsync(residual_out_.get(), 0xff, bytes, ctx.stream));
    PB_CUDA_CHECK(cudaMemsetAsync(y_.get(), 0xff, bytes, ctx.stream));
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  }

  void run() override {
    FusedAddRmsnormParams p;
    p.x = x_.as<uint4>();
    p.residual = residual_.as<uint4>();
    p.weight = weight_.as<uint4>();
    p.residual_out = residual_out_.as<uint4>();
    p.y = y_.as<uint4>();
    p.vecs_per_row = static_cast<int>(h_ / 8);
    p.inv_h = 1.0f / static_cast<float>(h_);
    p.eps = eps_;
    dispatch_16bit(dtype_, "fused add + RMSNorm", [&](auto tag) {
      fused_add_rmsnorm_kernel<decltype(tag)><<<static_cast<unsigned>(M_), kThreads, 0, ctx_.stream>>>(p);
    });
    PB_CUDA_CHECK_LAUNCH("fused_add_rmsnorm_kernel");
  }

  std::vector<float> output_values() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(y_.get(), dtype_, M_ * h_, ctx_.stream);
  }

  // Both outputs of the first and last 8 rows and of 48 rows between, every element.
  void verify() override {
    run();
    std::vector<std::uint64_t> rows;
    for (std::uint64_t m = 0; m < M_; ++m)
      if (m < 8 || m + 8 >= M_ || m % std::max<std::uint64_t>(1, M_ / 48) == 0) rows.push_back(m);
    const auto n = M_ * h_;
    const auto x = download_as_float(x_.get(), dtype_, n, ctx_.stream);
    const auto res = download_as_float(residual_.get(), dtype_, n, ctx_.stream);
    const auto w = download_as_float(weight_.get(), dtype_, h_, ctx_.stream);
    const auto got_sum = download_as_float(residual_out_.get(), dtype_, n, ctx_.stream);
    const auto got_y = download_as_float(y_.get(), dtype_, n, ctx_.stream);
    std::vector<float> sum, y;
    std::vector<double> want_sum, want_y, row_sum(h_), row_y(h_);
    for (const auto m : rows) {
      reference::fused_add_rmsnorm_row(x.data() + m * h_, res.data() + m * h_, w.data(), h_, eps_, row_sum.data(),
                                       row_y.data());
      want_sum.insert(want_sum.end(), row_sum.begin(), row_sum.end());
      want_y.insert(want_y.end(), row_y.begin(), row_y.end());
      sum.insert(sum.end(), got_sum.begin() + m * h_, got_sum.begin() + (m + 1) * h_);
      y.insert(y.end(), got_y.begin() + m * h_, got_y.begin() + (m + 1) * h_);
    }
    const std::string what = "fused add + RMSNorm (M=" + std::to_string(M_) + " h=" + std::to_string(h_) + ", " +
                             std::to_string(rows.size()) + " rows checked)";
    const auto tol = reference::tolerance_for(dtype_);
    reference::check_close(sum, want_sum, tol, what + " residual_out");
    reference::check_close(y, want_y, tol, what + " y");
  }

 private:
  Context& ctx_;
  DType dtype_;
  std::uint64_t M_, h_;
  float eps_;
  DeviceBuffer x_, residual_, weight_, residual_out_, y_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(fused_add_rmsnorm) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kFusedAddRmsnorm, Impl::own, takes_16bit, {},
                limits_plan([](const OpRequest& r, const Context&) { return unsupported(r); }),
                prepare_op<FusedAddRmsnormOp>()});
}
