// Weight-only int4 decode GEMV: Y[M,N] = X[M,K] W^T for M = 1..16, W in the
// packed int4 layout of ops/linear_int4.hpp (4-bit q, a bf16 scale and a 4-bit
// zero per group of G along K: w = (q - z) * s), X and Y bf16, fp32 accumulation.
//
// Design (memory-bound at small M: the packed weights are everything):
// - One warp per output row at a time (grid-stride over rows). Each lane reads
//   16 bytes of the row (32 weights) per step, so a warp reads 512 contiguous
//   bytes per step and every weight byte is read once per call.
// - G >= 32 and 32 | G, so a lane's 32 weights share one group: one scale and
//   one zero per 16-byte load. The lane dequantizes each weight once, (q - z) *
//   s, and multiplies it into the M rows of X (bf16, read through the caches:
//   X is at most 16 x K and every warp reads it).
// - At the end of the row the 32 lanes' partial sums are added with shuffles and
//   lane 0 writes the M outputs. No inline PTX: plain loads and warp shuffles.
// Never run on a GPU yet: verified under the functional emulation only.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include "common/numeric.hpp"
#include "reference/linear_int4.hpp"
#include "cuda/cuda_op.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear_int4.hpp"

namespace phasebench::cuda {

namespace {

constexpr int kMaxBatch = 16;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;

struct Int4Params {
  const std::uint16_t* X = nullptr;     // [M, K] bf16
  const std::uint8_t* q = nullptr;      // [N, K/2] packed nibbles
  const std::uint16_t* scales = nullptr;  // [N, K/G] bf16
  const std::uint8_t* zeros = nullptr;  // 4-bit, over n*(K/G)+g
  std::uint16_t* Y = nullptr;           // [M, N] bf16
  int M = 0;
  long long N = 0, K = 0, G = 0;
};


__global__ void __launch_bounds__(kThreads) gemv_int4_kernel(Int4Params p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const long long warp = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const long long warps = static_cast<long long>(gridDim.x) * kWarpsPerBlock;
  const long long groups = p.K / p.G;
  for (long long n = warp; n < p.N; n += warps) {
    float acc[kMaxBatch];
#pragma unroll
    for (int m = 0; m < kMaxBatch; ++m) acc[m] = 0.f;
    const std::uint8_t* qrow = p.q + n * (p.K / 2);
    for (long long k0 = 32LL * lane; k0 < p.K; k0 += 32LL * 32) {
      const uint4 packed = *reinterpret_cast<const uint4*>(qrow + k0 / 2);
      const long long gi = n * groups + k0 / p.G;
      const float s = numeric::bf16_to_float(p.scales[gi]);
      const float z = static_cast<float>(numeric::nibble(p.zeros, static_cast<std::uint64_t>(gi)));
      const std::uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {
        // 8 weights k0 + 8*wi .. +7: byte b holds k = 2b (low nibble) and 2b + 1 (high).
        float w[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) w[j] = (static_cast<float>((words[wi] >> (4 * j)) & 0xF) - z) * s;
#pragma unroll
        for (int m = 0; m < kMaxBatch; ++m) {
          if (m >= p.M) break;
          const uint4 xv = *reinterpret_cast<const uint4*>(p.X + m * p.K + k0 + 8 * wi);
          const std::uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
          float a = acc[m];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            a = fmaf(w[2 * j], numeric::bf16_to_float(static_cast<std::uint16_t>(xw[j] & 0xFFFF)), a);
            a = fmaf(w[2 * j + 1], numeric::bf16_to_float(static_cast<std::uint16_t>(xw[j] >> 16)), a);
          }
          acc[m] = a;
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kMaxBatch; ++m) {
      if (m >= p.M) break;
      float v = acc[m];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) p.Y[m * p.N + n] = numeric::float_to_bf16(v);
    }
  }
}

std::optional<std::string> gemv_int4_unsupported(const OpRequest& r) {
  const auto s = LinearShape::of(r.shape);
  const auto G = r.options.as<LinearInt4Options>().group;
  if (s.M < 1 || s.M > static_cast<std::uint64_t>(kMaxBatch))
    return "the int4 GEMV handles a batch (M) of 1.." + std::to_string(kMaxBatch) + ", not " + std::to_string(s.M);
  if (G < 32 || G % 32 != 0 || s.K % G != 0)
    return "the int4 GEMV needs a group size that is a multiple of 32 and divides K (G = " + std::to_string(G) +
           ", K = " + std::to_string(s.K) + ")";
  if (s.N >= (1ull << 40) || s.K >= (1ull << 31)) return "the int4 GEMV: shape too large";
  return std::nullopt;
}

// The op: inputs filled on the host with reference::fill_int4 (the CPU backend's
// values) and uploaded; verified against the reference on sampled outputs.
class GemvInt4Op final : public PreparedOp {
 public:
  GemvInt4Op(Context& ctx, const OpRequest& r)
      : ctx_(ctx), s_(LinearShape::of(r.shape)), G_(r.options.as<LinearInt4Options>().group) {
    if (auto why = gemv_int4_unsupported(r)) throw Unsupported(*why);
    const Int4Layout l{s_.N, s_.K, G_};
    hq_.resize(l.q_bytes());
    hs_.resize(l.scale_bytes() / 2);
    hz_.resize(l.zero_bytes());
    reference::fill_int4(hq_.data(), hs_.data(), hz_.data(), s_.N, s_.K, G_, r.seed + 2);
    X_ = DeviceBuffer(mul({s_.M, s_.K, 2}));
    q_ = DeviceBuffer(hq_.size());
    scales_ = DeviceBuffer(hs_.size() * 2);
    zeros_ = DeviceBuffer(hz_.size());
    Y_ = DeviceBuffer(mul({s_.M, s_.N, 2}));
    fill_random(X_.get(), DType::bf16, s_.M * s_.K, r.seed + 1, 1.0f, ctx.stream);
    upload(q_.get(), hq_.data(), hq_.size(), ctx.stream);
    upload(scales_.get(), hs_.data(), hs_.size() * 2, ctx.stream);
    upload(zeros_.get(), hz_.data(), hz_.size(), ctx.stream);
    // 0xff bytes are NaN in bf16: an output the kernel never writes fails verification.
    PB_CUDA_CHECK(cudaMemsetAsync(Y_.get(), 0xff, Y_.bytes(), ctx.stream));
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    const auto rows_blocks = (s_.N + kWarpsPerBlock - 1) / kWarpsPerBlock;
    blocks_ = static_cast<int>(std::min<std::uint64_t>(rows_blocks, 65535ull * 16));
  }

  void run() override {
    Int4Params p;
    p.X = X_.as<std::uint16_t>();
    p.q = q_.as<std::uint8_t>();
    p.scales = scales_.as<std::uint16_t>();
    p.zeros = zeros_.as<std::uint8_t>();
    p.Y = Y_.as<std::uint16_t>();
    p.M = static_cast<int>(s_.M);
    p.N = static_cast<long long>(s_.N);
    p.K = static_cast<long long>(s_.K);
    p.G = static_cast<long long>(G_);
    gemv_int4_kernel<<<blocks_, kThreads, 0, ctx_.stream>>>(p);
    PB_CUDA_CHECK_LAUNCH("gemv_int4_kernel");
  }

  std::vector<float> output_values() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(Y_.get(), DType::bf16, s_.M * s_.N, ctx_.stream);
  }

  void verify() override {
    run();
    const auto y = download_as_float(Y_.get(), DType::bf16, s_.M * s_.N, ctx_.stream);
    const auto x = download_as_float(X_.get(), DType::bf16, s_.M * s_.K, ctx_.stream);
    // Every row of Y; its first and last 16 columns (the tails) and 96 between.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> positions;
    for (std::uint64_t m = 0; m < s_.M; ++m)
      for (std::uint64_t n = 0; n < s_.N; ++n)
        if (n < 16 || n + 16 >= s_.N || n % std::max<std::uint64_t>(1, s_.N / 96) == 0) positions.emplace_back(m, n);
    std::ostringstream what;
    what << "gemv_int4 (M=" << s_.M << " N=" << s_.N << " K=" << s_.K << " G=" << G_ << ", " << blocks_ << " blocks)";
    reference::check_int4_linear(
        positions, x.data(), hq_.data(), hs_.data(), hz_.data(), s_.K, G_,
        [&](std::uint64_t m, std::uint64_t n) { return y[m * s_.N + n]; }, what.str());
  }

 private:
  Context& ctx_;
  LinearShape s_;
  std::uint64_t G_;
  std::vector<std::uint8_t> hq_, hz_;
  std::vector<std::uint16_t> hs_;
  DeviceBuffer X_, q_, scales_, zeros_, Y_;
  int blocks_ = 1;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(linear_int4) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kLinearInt4, Impl::own, [](DType t, const Context&) { return t == DType::bf16; }, {},
                limits_plan([](const OpRequest& r, const Context&) { return gemv_int4_unsupported(r); }),
                prepare_op<GemvInt4Op>()});
}
