// Decode GEMV: Y[M,N] = X[M,K] W^T, M = 1..16, bf16/fp16 in and out, fp32
// accumulation, W (N x K, row-major) streamed from memory exactly once.
//
// Design (memory-bound: W is everything, X is tiny):
// - Tensor cores do the arithmetic (mma.sync m16n8k16, fp32 accumulate), so the
//   instruction count per weight byte is a few loads and two MMAs per 1 KiB,
//   whatever M is; CUDA-core FMAs at M = 8..16 would be issue-bound on Hopper.
//   W rows are the MMA's A operand (16 rows per tile), X rows its B operand
//   (8 batch rows per tile; rows past M are zero).
// - A dot product does not care in which order k is summed, so A and B use the
//   same permutation of k inside a 32-wide step: lane (g, t) loads 16 bytes
//   (8 consecutive k) of W rows g and g+8 and of X row g, which is exactly what
//   its fragments of two k16 MMAs need. Every W access is a 16-byte vector load,
//   4 lanes read 64 contiguous bytes of a row, and no shuffles are needed.
// - A unit of work is a row block of 32 rows (two 16-row tiles, so each X
//   fragment feeds two MMAs) times a group of 2 steps = 64 k: 4 KiB of W, 8
//   loads of 16 bytes per lane issued before the first MMA, and a whole 128-byte
//   line of each row. At 80 registers (M <= 8) three 256-thread blocks fit per
//   SM, about 96 KiB of W in flight per SM. W is read with
//   ld.global.nc.L1::no_allocate.L2::256B (streamed, keeps L1 for X), X through L1.
// - Stream-K scheduling: the (row block, group) units are split evenly over a
//   persistent grid of CTAs, each taking a contiguous range, and within a CTA
//   each row block's share is split evenly over its 8 warps. The warps keep
//   their sums in registers, then reduce them through shared memory, so a CTA
//   makes one fp32 red.global.add per output element of a row block it shares
//   with other CTAs, and one fence-and-count per row block (not per warp); the
//   CTA whose count completes a row block converts it to Y and zeroes the
//   accumulator and the counter for the next call. A CTA that covers a whole row
//   block writes Y directly: no atomics at all. Every shape gets all SMs busy
//   with balanced work, including small N with large K, and a row block is shared
//   by about units / CTAs / groups-per-row-block CTAs instead of 8x as many warps.
#include "cuda/linear_gemv.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "cuda/cuda_op.hpp"
#include "cuda/linear_verify.hpp"
#include "cuda/ptx.cuh"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kTilesPerWarp = 2;                   // 16-row MMA tiles per warp
constexpr int kRowsPerBlock = 16 * kTilesPerWarp;  // rows of W in a row block
constexpr int kStepsPerGroup = 2;                  // 32-k steps per unit of work
constexpr int kKPerGroup = 32 * kStepsPerGroup;    // 64

// X is small and re-read by every row block: cached.
__device__ __forceinline__ uint4 load_cached(const std::uint16_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

struct GemvParams {
  const std::uint16_t* X;
  const std::uint16_t* W;
  std::uint16_t* Y;
  float* accum;         // [M][N], zero between calls
  unsigned* counters;   // [row_blocks], zero between calls
  long long N, K;
  int groups_per_row_block;
  int units;  // row_blocks * groups_per_row_block (< 2^31, checked on the host): 32-bit unit
              // arithmetic keeps the CTA's bookkeeping within the 80 registers of 3 CTAs per SM
};

template <int M, class Tag>
__global__ void __launch_bounds__(kThreads, M <= 8 ? 3 : 2) decode_gemv_kernel(GemvParams p) {
  constexpr int kBatchTiles = (M + 7) / 8;  // 8-column MMA tiles covering the batch
  // Each warp's sums of a row block, [warp][m][row], reduced over the warps.
  __shared__ float partial[kWarpsPerBlock][M][kRowsPerBlock];
  __shared__ unsigned arrived_sm;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;  // MMA groupID: W row (and row + 8) and X row of this lane
  const int t = lane & 3;   // MMA threadID_in_group: which 16-byte chunk of a step
  // This CTA's contiguous share of the units (stream-K); uniform across the CTA.
  int seg = static_cast<int>(static_cast<long long>(blockIdx.x) * p.units / gridDim.x);
  const int cta_end = static_cast<int>((static_cast<long long>(blockIdx.x) + 1) * p.units / gridDim.x);

  while (seg < cta_end) {
    const int rb = seg / p.groups_per_row_block;
    const int seg_end = min(cta_end, (rb + 1) * p.groups_per_row_block);
    const int n_units = seg_end - seg;
    const long long row0 = static_cast<long long>(rb) * kRowsPerBlock;
    // This warp's part of the segment.
    int u = seg + warp * n_units / kWarpsPerBlock;
    const int u_end = seg + (warp + 1) * n_units / kWarpsPerBlock;

    float acc[kTilesPerWarp][kBatchTiles][4] = {};
    // Row pointers of this lane (rows g and g+8 of each tile; X row g of each
    // batch tile), at its chunk t; steps then add constant offsets.
    const std::uint16_t* w_row[kTilesPerWarp][2];
    bool row_ok[kTilesPerWarp][2];
#pragma unroll
    for (int mt = 0; mt < kTilesPerWarp; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long row = row0 + mt * 16 + h * 8 + g;
        row_ok[mt][h] = row < p.N;
        w_row[mt][h] = p.W + (row_ok[mt][h] ? row : 0) * p.K + t * 8;
      }
    for (; u < u_end; ++u) {
      const long long k0 = static_cast<long long>(u - rb * p.groups_per_row_block) * kKPerGroup;  // first k of the group
      uint4 w[kStepsPerGroup][kTilesPerWarp][2];
      uint4 x[kStepsPerGroup][kBatchTiles];
      // All loads of the group first, so 8 (W) + 2..4 (X) are in flight together.
#pragma unroll
      for (int s = 0; s < kStepsPerGroup; ++s) {
        const long long k = k0 + s * 32;  // this lane's chunk starts at k + 8t
        const bool k_ok = k + t * 8 < p.K;
#pragma unroll
        for (int mt = 0; mt < kTilesPerWarp; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            w[s][mt][h] = (k_ok && row_ok[mt][h]) ? load_streaming(w_row[mt][h] + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int nt = 0; nt < kBatchTiles; ++nt) {
          const int m = nt * 8 + g;
          x[s][nt] = (k_ok && m < M) ? load_cached(p.X + m * p.K + t * 8 + k) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int s = 0; s < kStepsPerGroup; ++s)
#pragma unroll
        for (int mt = 0; mt < kTilesPerWarp; ++mt)
#pragma unroll
          for (int nt = 0; nt < kBatchTiles; ++nt) {
            // k order inside the 8-wide chunk: (0,1)->cols 2t,2t+1 and (2,3)->2t+8,2t+9 of the first
            // k16 MMA; (4,5),(6,7) likewise of the second. B uses the same order.
            mma_16816(Tag{}, acc[mt][nt], {w[s][mt][0].x, w[s][mt][1].x, w[s][mt][0].y, w[s][mt][1].y}, x[s][nt].x,
                      x[s][nt].y);
            mma_16816(Tag{}, acc[mt][nt], {w[s][mt][0].z, w[s][mt][1].z, w[s][mt][0].w, w[s][mt][1].w}, x[s][nt].z,
                      x[s][nt].w);
          }
    }

    // The warp's sums to shared memory. Accumulator fragment c: W row g (+8 for
    // c >= 2), batch column 2t (+1 for odd c); columns past M are not kept.
#pragma unroll
    for (int mt = 0; mt < kTilesPerWarp; ++mt)
#pragma unroll
      for (int nt = 0; nt < kBatchTiles; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int m = nt * 8 + 2 * t + (c & 1);
          if (m < M) partial[warp][m][mt * 16 + g + (c >> 1) * 8] = acc[mt][nt][c];
        }
    __syncthreads();
    // Reduce over the warps; the whole row block here: Y directly, else one
    // red.global.add per element.
    const bool whole = n_units == p.groups_per_row_block;
    for (int i = threadIdx.x; i < M * kRowsPerBlock; i += kThreads) {
      const int m = i / kRowsPerBlock, r = i % kRowsPerBlock;
      const long long n = row0 + r;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarpsPerBlock; ++w) sum += partial[w][m][r];
      if (n < p.N) {
        if (whole)
          p.Y[m * p.N + n] = from_float(Tag{}, sum);
        else
          atomicAdd(p.accum + m * p.N + n, sum);
      }
    }
    if (!whole) {
      // One count per CTA and row block, after all of its sums are visible
      // device-wide (each thread's fence orders its own adds; the barrier then
      // orders them before thread 0's count).
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) arrived_sm = atomicAdd(p.counters + rb, static_cast<unsigned>(n_units)) +
                                         static_cast<unsigned>(n_units);
      __syncthreads();
      if (arrived_sm == static_cast<unsigned>(p.groups_per_row_block)) {
        // Last contributor: every other share is in the accumulator. Convert the
        // row block to Y and leave accumulator and counter zero for the next call.
        __threadfence();
        for (int i = threadIdx.x; i < M * kRowsPerBlock; i += kThreads) {
          const int m = i / kRowsPerBlock;
          const long long n = row0 + i % kRowsPerBlock;
          if (n < p.N) {
            float* a = p.accum + m * p.N + n;
            p.Y[m * p.N + n] = from_float(Tag{}, __ldcg(a));
            __stcg(a, 0.0f);
          }
        }
        if (threadIdx.x == 0) p.counters[rb] = 0;
      }
    }
    __syncthreads();  // `partial` and `arrived_sm` are reused by the next segment
    seg = seg_end;
  }
}

template <class Tag>
void* kernel_for(std::uint64_t M) {
  switch (M) {
#define PB_GEMV_CASE(m) \
  case m: return reinterpret_cast<void*>(&decode_gemv_kernel<m, Tag>);
    PB_GEMV_CASE(1) PB_GEMV_CASE(2) PB_GEMV_CASE(3) PB_GEMV_CASE(4) PB_GEMV_CASE(5) PB_GEMV_CASE(6)
    PB_GEMV_CASE(7) PB_GEMV_CASE(8) PB_GEMV_CASE(9) PB_GEMV_CASE(10) PB_GEMV_CASE(11) PB_GEMV_CASE(12)
    PB_GEMV_CASE(13) PB_GEMV_CASE(14) PB_GEMV_CASE(15) PB_GEMV_CASE(16)
#undef PB_GEMV_CASE
  }
  throw Unsupported("decode_gemv: batch " + std::to_string(M) + " is outside 1.." + std::to_string(kGemvMaxBatch));
}

void* kernel_for(DType t, std::uint64_t M) {
  return t == DType::bf16 ? kernel_for<Bf16Tag>(M) : kernel_for<Fp16Tag>(M);
}

class DecodeGemvOp final : public PreparedOp {
 public:
  DecodeGemvOp(Context& ctx, const OpRequest& r)
      : ctx_(ctx),
        shape_(LinearShape::of(r.shape)),
        type_(r.dtype),
        operands_(make_linear_operands(shape_, r.dtype, r.dtype, r.seed, ctx.stream)),
        gemv_(ctx, r.dtype, shape_) {}
  void run() override { gemv_.run(operands_.X.get(), operands_.W.get(), operands_.Y.get(), ctx_.stream); }
  void verify() override {
    run();
    verify_linear(shape_, type_, type_, operands_.view(), ctx_.stream, "decode_gemv " + gemv_.describe());
  }
  std::vector<float> output_values() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(operands_.Y.get(), type_, shape_.M * shape_.N, ctx_.stream);
  }

 private:
  Context& ctx_;
  LinearShape shape_;
  DType type_;
  LinearOperands operands_;
  DecodeGemv gemv_;
};

}  // namespace

std::uint64_t decode_gemv_row_blocks(std::uint64_t N) { return (N + kRowsPerBlock - 1) / kRowsPerBlock; }

std::optional<std::string> decode_gemv_unsupported(DType t, const LinearShape& s) {
  if (t != DType::bf16 && t != DType::fp16)
    return "decode_gemv supports bf16 and fp16 only, not " + std::string(to_string(t));
  if (s.M < 1 || s.M > kGemvMaxBatch)
    return "decode_gemv handles a batch (M) of 1.." + std::to_string(kGemvMaxBatch) + ", not " + std::to_string(s.M) +
           "; cuBLASLt (impl blas) takes larger M";
  if (s.N == 0 || s.K == 0) return "decode_gemv: N and K must be positive";
  if (s.K % 8 != 0)
    return "decode_gemv needs K to be a multiple of 8 (rows of W are read as 16-byte vectors and must stay aligned); K = " +
           std::to_string(s.K);
  if (s.N >= (1ull << 40) || s.K >= (1ull << 40) ||
      decode_gemv_row_blocks(s.N) * ((s.K + kKPerGroup - 1) / kKPerGroup) >= (1ull << 31))
    return "decode_gemv: shape too large (more than 2^31 units of " + std::to_string(kRowsPerBlock) + " rows x " +
           std::to_string(kKPerGroup) + " k)";
  return std::nullopt;
}

DecodeGemv::DecodeGemv(const Context& ctx, DType t, const LinearShape& s, int max_blocks) : type_(t), shape_(s) {
  if (auto why = decode_gemv_unsupported(t, s)) throw Unsupported(*why);
  row_blocks_ = decode_gemv_row_blocks(s.N);
  groups_per_row_block_ = (s.K + kKPerGroup - 1) / kKPerGroup;
  const std::uint64_t units = row_blocks_ * groups_per_row_block_;
  int per_sm = 0;
  PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(t, s.M), kThreads, 0));
  if (per_sm < 1) throw std::runtime_error("decode_gemv: the kernel cannot be resident on this device (occupancy 0)");
  const std::uint64_t resident = static_cast<std::uint64_t>(per_sm) * static_cast<std::uint64_t>(ctx.sm_count);
  // A persistent grid: as many blocks as fit at once, but never more warps than units.
  std::uint64_t blocks = std::max<std::uint64_t>(1, std::min(resident, (units + kWarpsPerBlock - 1) / kWarpsPerBlock));
  if (max_blocks > 0) blocks = std::min<std::uint64_t>(blocks, static_cast<std::uint64_t>(max_blocks));
  blocks_ = static_cast<int>(blocks);
  accum_ = DeviceBuffer(s.M * s.N * sizeof(float));
  counters_ = DeviceBuffer(row_blocks_ * sizeof(unsigned));
  PB_CUDA_CHECK(cudaMemsetAsync(accum_.get(), 0, accum_.bytes(), ctx.stream));
  PB_CUDA_CHECK(cudaMemsetAsync(counters_.get(), 0, counters_.bytes(), ctx.stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void DecodeGemv::run(const void* X, const void* W, void* Y, cudaStream_t stream) const {
  // X and W are read as 16-byte vectors: a misaligned base would be a device fault.
  if ((reinterpret_cast<std::uintptr_t>(X) | reinterpret_cast<std::uintptr_t>(W)) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(Y) % 2 != 0)
    throw std::invalid_argument("decode_gemv: X and W must be 16-byte aligned and Y 2-byte aligned");
  GemvParams p{};
  p.X = static_cast<const std::uint16_t*>(X);
  p.W = static_cast<const std::uint16_t*>(W);
  p.Y = static_cast<std::uint16_t*>(Y);
  p.accum = accum_.as<float>();
  p.counters = counters_.as<unsigned>();
  p.N = static_cast<long long>(shape_.N);
  p.K = static_cast<long long>(shape_.K);
  p.groups_per_row_block = static_cast<int>(groups_per_row_block_);
  p.units = static_cast<int>(row_blocks_ * groups_per_row_block_);
  void* args[] = {&p};
  PB_CUDA_CHECK(cudaLaunchKernel(kernel_for(type_, shape_.M), dim3(blocks_), dim3(kThreads), args, 0, stream));
}

std::string DecodeGemv::describe() const {
  std::ostringstream os;
  os << "M=" << shape_.M << " N=" << shape_.N << " K=" << shape_.K << " " << to_string(type_) << ", " << blocks_
     << " blocks x " << kWarpsPerBlock << " warps over " << row_blocks_ * groups_per_row_block_ << " units of "
     << kRowsPerBlock << " rows x " << kKPerGroup << " k";
  return os.str();
}

}  // namespace phasebench::cuda

// Our GEMV is the decode linear layer (kind linear, impl own) for batches up to
// kGemvMaxBatch; beyond, the sweep keeps to cuBLASLt.
PHASEBENCH_CUDA_OPS(linear_gemv) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kLinear, Impl::own, takes_16bit, [](const OpRequest& r) { return r.shape["M"] <= kGemvMaxBatch; },
                limits_plan([](const OpRequest& r,
                               const Context&) { return decode_gemv_unsupported(r.dtype, LinearShape::of(r.shape)); },
                            // The split-K reduction's fp32 accumulators and arrival counters.
                            [](const OpRequest& r, const Context&) -> std::uint64_t {
                              const auto s = LinearShape::of(r.shape);
                              return s.M * s.N * sizeof(float) + decode_gemv_row_blocks(s.N) * sizeof(unsigned);
                            }),
                prepare_op<DecodeGemvOp>()});
}
