// Weight-only FP4 decode GEMV: Y[M,N] = X[M,K] W^T for M = 1..16, W block-scaled
// e2m1 in the packed layout of ops/linear_fp4.hpp: MXFP4 (an e8m0 scale per 32
// weights along K) or NVFP4 (an e4m3 scale per 16 and one fp32 tensor scale),
// X and Y bf16, fp32 accumulation. Weight-only: no FP4 tensor cores and no
// sm_100 conversion instructions, only integer and fp32 operations and the
// fp16 -> fp32 conversion every architecture has, so one kernel runs on sm_80,
// sm_90, sm_100 and sm_120 (how gpt-oss's MXFP4 weights run on Hopper).
//
// Design (memory-bound at small M: the packed weights are everything), as the
// int4 GEMV (linear_int4.cu):
// - One warp per output row at a time (grid-stride over rows). Each lane reads
//   V = 16 bytes of the row (32 weights) per step, and with them its block
//   scales (one e8m0 byte, or two e4m3 bytes as one 16-bit load), so a warp
//   reads 512 contiguous bytes of values and 32 or 64 of scales per step and
//   every byte is read once per call. NVFP4 rows of K = 16 (mod 32) are not
//   16-byte aligned: there V = 8 (16 weights, one block) keeps the loads aligned.
// - Dequantisation in registers, exact, and without subnormal fp32 arithmetic:
//   the e2m1 sign and three magnitude bits are moved into an fp16's sign and
//   the bottom of its exponent and top of its mantissa, two nibbles per 32-bit
//   operation (Marlin's FP4 trick); that fp16 is the e2m1 value times 2^-14
//   exactly (0.5 an fp16 subnormal), and the hardware's fp16 -> fp32 conversion
//   is exact for every input. The products with X (bf16, widened by a shift)
//   are summed per block in fp32; the block's scale (decoded by integer ops)
//   multiplies the block's sum once per row of X, and 2^14 times the tensor
//   scale (nvfp4; 1 for mxfp4) each output once.
// - At the end of the row the 32 lanes' partial sums are added with shuffles
//   and lane 0 writes the M outputs. No inline PTX: plain loads, shifts, masks,
//   conversions and warp shuffles.
// Never run on a GPU yet: verified under the functional emulation only.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include "common/numeric.hpp"
#include "reference/linear_fp4.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/linear_fp4.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear_fp4.hpp"

namespace phasebench::cuda {

namespace {

constexpr int kMaxBatch = 16;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;

struct Fp4Params {
  const std::uint16_t* X = nullptr;          // [M, K] bf16
  const std::uint8_t* values = nullptr;      // [N, K/2] e2m1, two per byte, low nibble first
  const std::uint8_t* scales = nullptr;      // [N, K/block] e8m0 (mxfp4) or e4m3 (nvfp4)
  const float* tensor_scale = nullptr;       // nvfp4's one fp32 scale; unused for mxfp4
  std::uint16_t* Y = nullptr;                // [M, N] bf16
  int M = 0;
  long long N = 0, K = 0;
};

// Eight e2m1 values (the nibbles of `q`, weight j in bits 4j..4j+3) as floats
// times 2^-14, exactly: for each 16-bit half, the nibble at its top (bits
// 12..15) becomes the fp16 with that sign and exponent and mantissa bits
// e1 e0 m at bits 11..9; shifting q left by 4 brings the next nibble there.
__device__ __forceinline__ void e2m1x8_scaled(std::uint32_t q, float (&h)[8]) {
#pragma unroll
  for (int j = 3; j >= 0; --j) {
    const std::uint32_t t = q << (4 * (3 - j));  // weights j and j + 4 at the top of the halves
    const std::uint32_t f16x2 = (t & 0x80008000u) | ((t & 0x70007000u) >> 3);
    h[j] = __half2float(__ushort_as_half(static_cast<unsigned short>(f16x2 & 0xFFFFu)));
    h[j + 4] = __half2float(__ushort_as_half(static_cast<unsigned short>(f16x2 >> 16)));
  }
}

template <bool kNv>
__device__ __forceinline__ float block_scale(unsigned code) {
  if constexpr (kNv)
    return numeric::fp8e4m3_to_float(static_cast<std::uint8_t>(code));
  else
    return numeric::e8m0_to_float(static_cast<std::uint8_t>(code));
}

// kNv: NVFP4 (blocks of 16, e4m3 scales, a tensor scale), else MXFP4 (blocks of
// 32, e8m0 scales). kVec: bytes of values a lane loads per step (16, or 8 for
// NVFP4 rows whose K is an odd multiple of 16).
template <bool kNv, int kVec>
__global__ void __launch_bounds__(kThreads) linear_fp4_kernel(Fp4Params p) {
  constexpr int kBlock = kNv ? 16 : 32;
  constexpr int kWeights = 2 * kVec;            // weights per lane step
  constexpr int kBlocks = kWeights / kBlock;    // block scales per lane step: 1 or 2
  constexpr int kWordsPerBlock = kBlock / 8;    // 32-bit words of values per block
  static_assert(kBlocks == 1 || kBlocks == 2, "a lane step holds one or two whole blocks");
  const int lane = static_cast<int>(threadIdx.x % 32);
  const long long warp = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const long long warps = static_cast<long long>(gridDim.x) * kWarpsPerBlock;
  const long long blocks_per_row = p.K / kBlock;
  // The fp16 trick's 2^-14, undone once per output with the tensor scale.
  float out_scale = 16384.0f;
  if constexpr (kNv) out_scale *= *p.tensor_scale;
  for (long long n = warp; n < p.N; n += warps) {
    float acc[kMaxBatch];
#pragma unroll
    for (int m = 0; m < kMaxBatch; ++m) acc[m] = 0.f;
    const std::uint8_t* vrow = p.values + n * (p.K / 2);
    const std::uint8_t* srow = p.scales + n * blocks_per_row;
    for (long long k0 = static_cast<long long>(kWeights) * lane; k0 < p.K; k0 += static_cast<long long>(kWeights) * 32) {
      std::uint32_t words[kVec / 4];
      if constexpr (kVec == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(vrow + k0 / 2);
        words[0] = v.x;
        words[1] = v.y;
        words[2] = v.z;
        words[3] = v.w;
      } else {
        const uint2 v = *reinterpret_cast<const uint2*>(vrow + k0 / 2);
        words[0] = v.x;
        words[1] = v.y;
      }
      unsigned codes[kBlocks];
      if constexpr (kBlocks == 2) {
        // Two e4m3 scales, the first in the low byte (k0 / 16 is even: 2-byte aligned).
        const std::uint16_t two = *reinterpret_cast<const std::uint16_t*>(srow + k0 / kBlock);
        codes[0] = two & 0xFFu;
        codes[1] = static_cast<unsigned>(two) >> 8;
      } else {
        codes[0] = srow[k0 / kBlock];
      }
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        const float s = block_scale<kNv>(codes[b]);
        float h[kBlock];  // the block's weights times 2^-14, in k order
#pragma unroll
        for (int w = 0; w < kWordsPerBlock; ++w) {
          float eight[8];
          e2m1x8_scaled(words[b * kWordsPerBlock + w], eight);
#pragma unroll
          for (int j = 0; j < 8; ++j) h[8 * w + j] = eight[j];
        }
        const long long kb = k0 + static_cast<long long>(b) * kBlock;
#pragma unroll
        for (int m = 0; m < kMaxBatch; ++m) {
          if (m >= p.M) break;
          float part = 0.f;
#pragma unroll
          for (int w = 0; w < kWordsPerBlock; ++w) {
            const uint4 xv = *reinterpret_cast<const uint4*>(p.X + m * p.K + kb + 8 * w);
            const std::uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              part = fmaf(h[8 * w + 2 * j], numeric::bf16_to_float(static_cast<std::uint16_t>(xw[j] & 0xFFFFu)), part);
              part = fmaf(h[8 * w + 2 * j + 1], numeric::bf16_to_float(static_cast<std::uint16_t>(xw[j] >> 16)), part);
            }
          }
          acc[m] = fmaf(part, s, acc[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kMaxBatch; ++m) {
      if (m >= p.M) break;
      float v = acc[m];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) p.Y[m * p.N + n] = numeric::float_to_bf16(v * out_scale);
    }
  }
}

std::optional<std::string> linear_fp4_unsupported(const OpRequest& r) {
  const auto s = LinearShape::of(r.shape);
  const auto format = r.options.as<LinearFp4Options>().format;
  if (s.M < 1 || s.M > static_cast<std::uint64_t>(kMaxBatch))
    return "the FP4 GEMV handles a batch (M) of 1.." + std::to_string(kMaxBatch) + ", not " + std::to_string(s.M);
  if (format != DType::mxfp4 && format != DType::nvfp4)
    return "the FP4 GEMV takes mxfp4 or nvfp4 weights, not " + std::string(to_string(format));
  const auto block = block_scaling(format)->block;
  if (s.K % block != 0)
    return "the FP4 GEMV needs K a multiple of " + std::string(to_string(format)) + "'s block of " +
           std::to_string(block) + " (K = " + std::to_string(s.K) + ")";
  if (s.N >= (1ull << 40) || s.K >= (1ull << 31)) return "the FP4 GEMV: shape too large";
  return std::nullopt;
}

// The op: the weights filled on the host with reference::fill_fp4 (the CPU
// backend's values) and uploaded; verified against the reference on sampled outputs.
class LinearFp4Op final : public PreparedOp, public LinearFp4OpAccess {
 public:
  LinearFp4Op(Context& ctx, const OpRequest& r)
      : ctx_(ctx), s_(LinearShape::of(r.shape)), l_{r.options.as<LinearFp4Options>().format, s_.N, s_.K} {
    if (auto why = linear_fp4_unsupported(r)) throw Unsupported(*why);
    hv_.resize(l_.value_bytes());
    hs_.resize(l_.scale_bytes());
    reference::fill_fp4(l_, hv_.data(), hs_.data(), &tensor_scale_, r.seed + 2);
    X_ = DeviceBuffer(mul({s_.M, s_.K, 2}));
    values_ = DeviceBuffer(hv_.size());
    scales_ = DeviceBuffer(hs_.size());
    Y_ = DeviceBuffer(mul({s_.M, s_.N, 2}));
    fill_random(X_.get(), DType::bf16, s_.M * s_.K, r.seed + 1, 1.0f, ctx.stream);
    upload(values_.get(), hv_.data(), hv_.size(), ctx.stream);
    upload(scales_.get(), hs_.data(), hs_.size(), ctx.stream);
    if (l_.tensor_scale_bytes()) {
      tensor_scale_buf_ = DeviceBuffer(sizeof(float));
      upload(tensor_scale_buf_.get(), &tensor_scale_, sizeof(float), ctx.stream);
    }
    // 0xff bytes are NaN in bf16: an output the kernel never writes fails verification.
    PB_CUDA_CHECK(cudaMemsetAsync(Y_.get(), 0xff, Y_.bytes(), ctx.stream));
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    const auto rows_blocks = (s_.N + kWarpsPerBlock - 1) / kWarpsPerBlock;
    blocks_ = static_cast<int>(std::min<std::uint64_t>(rows_blocks, 65535ull * 16));
  }

  void run() override {
    Fp4Params p;
    p.X = X_.as<std::uint16_t>();
    p.values = values_.as<std::uint8_t>();
    p.scales = scales_.as<std::uint8_t>();
    p.tensor_scale = l_.tensor_scale_bytes() ? tensor_scale_buf_.as<float>() : nullptr;
    p.Y = Y_.as<std::uint16_t>();
    p.M = static_cast<int>(s_.M);
    p.N = static_cast<long long>(s_.N);
    p.K = static_cast<long long>(s_.K);
    if (l_.format == DType::mxfp4)
      linear_fp4_kernel<false, 16><<<blocks_, kThreads, 0, ctx_.stream>>>(p);
    else if (s_.K % 32 == 0)
      linear_fp4_kernel<true, 16><<<blocks_, kThreads, 0, ctx_.stream>>>(p);
    else
      linear_fp4_kernel<true, 8><<<blocks_, kThreads, 0, ctx_.stream>>>(p);
    PB_CUDA_CHECK_LAUNCH("linear_fp4_kernel");
  }

  std::vector<float> output_values() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(Y_.get(), DType::bf16, s_.M * s_.N, ctx_.stream);
  }

  void verify() override {
    run();
    corrupt_for_test(fault_, Y_.get(), Y_.bytes(), ctx_.stream);
    const auto y = download_as_float(Y_.get(), DType::bf16, s_.M * s_.N, ctx_.stream);
    const auto x = download_as_float(X_.get(), DType::bf16, s_.M * s_.K, ctx_.stream);
    // Every row of Y; its first and last 16 columns (the tails) and 96 between.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> positions;
    for (std::uint64_t m = 0; m < s_.M; ++m)
      for (std::uint64_t n = 0; n < s_.N; ++n)
        if (n < 16 || n + 16 >= s_.N || n % std::max<std::uint64_t>(1, s_.N / 96) == 0) positions.emplace_back(m, n);
    std::ostringstream what;
    what << "linear_fp4 " << to_string(l_.format) << " (M=" << s_.M << " N=" << s_.N << " K=" << s_.K << ", "
         << blocks_ << " blocks)";
    reference::check_fp4_linear(
        positions, x.data(), l_, hv_.data(), hs_.data(), tensor_scale_,
        [&](std::uint64_t m, std::uint64_t n) { return y[m * s_.N + n]; }, what.str());
  }

  void set_fault_injection(bool on) override { fault_ = on; }

 private:
  Context& ctx_;
  LinearShape s_;
  Fp4Layout l_;
  float tensor_scale_ = 1.0f;
  std::vector<std::uint8_t> hv_, hs_;
  DeviceBuffer X_, values_, scales_, tensor_scale_buf_, Y_;
  int blocks_ = 1;
  bool fault_ = false;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(linear_fp4) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kLinearFp4, Impl::own, [](DType t, const Context&) { return t == DType::bf16; }, {},
                limits_plan([](const OpRequest& r, const Context&) { return linear_fp4_unsupported(r); }),
                prepare_op<LinearFp4Op>()});
}
