#pragma once
// Our decode GEMV: Y[M,N] = X[M,K] W^T for M = 1..16 (a decode step's batch),
// bf16 or fp16 with fp32 accumulation. Built to stream W at memory bandwidth:
// every weight byte is read exactly once per call whatever M.
#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <string>

#include "backend.hpp"
#include "cuda/cuda_common.hpp"

namespace phasebench::cuda {

inline constexpr std::uint64_t kGemvMaxBatch = 16;

// Why decode_gemv cannot run this shape/type, or nothing.
std::optional<std::string> decode_gemv_unsupported(DType t, const LinearShape& s);

// The launch plan and the scratch state of one shape: the fp32 accumulators and
// per-row-block arrival counters of the split-K reduction (zeroed once here;
// each call leaves them zero again).
class DecodeGemv {
 public:
  // max_blocks > 0 caps the persistent grid (tests use it to make row blocks
  // span several CTAs, or one CTA walk many row blocks).
  DecodeGemv(const Context& ctx, DType t, const LinearShape& s, int max_blocks = 0);
  // Enqueue Y = X W^T on `stream` (X: M x K, W: N x K, Y: M x N, row-major, all of type t).
  void run(const void* X, const void* W, void* Y, cudaStream_t stream) const;
  std::string describe() const;
  int blocks() const { return blocks_; }

 private:
  DType type_;
  LinearShape shape_;
  std::uint64_t row_blocks_ = 0, groups_per_row_block_ = 0;
  int blocks_ = 0;
  DeviceBuffer accum_;     // float [M][N]
  DeviceBuffer counters_;  // unsigned [row_blocks]
};

// Row blocks of N (the split-K reduction's arrival counters).
std::uint64_t decode_gemv_row_blocks(std::uint64_t N);

}  // namespace phasebench::cuda
