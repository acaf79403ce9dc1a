// The fused residual add and RMSNorm on CUDA (kernels/cuda/fused_add_rmsnorm.cu)
// against the reference, through cuda::make_op (the op's verify checks both
// outputs): tail-heavy shapes (one row, odd row counts, a row of one 16-byte
// vector, rows that leave most of the CTA idle, rows a vector past a multiple of
// the CTA's 256 vectors, the largest row a CTA holds), bf16 and fp16; what the
// kernel cannot hold is refused. Skips where no GPU is present; runs under the
// functional emulation (label emu).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_op.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/ops/fused_add_rmsnorm.hpp"

namespace phasebench {
namespace {

class FusedAddRmsnormTest : public test::CudaContextTest {};

TEST_F(FusedAddRmsnormTest, MatchesReferenceWithTails) {
  for (DType t : {DType::bf16, DType::fp16})
    for (const auto& [M, h] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
             {1, 8}, {3, 24}, {17, 4104}, {2, 16384}, {5, 2056}, {70, 64}}) {
      auto op = cuda::make_op(ctx(), fused_add_rmsnorm_request(M, h, t, 5 + M));
      EXPECT_NO_THROW(op->verify()) << to_string(t) << " M=" << M << " h=" << h;
    }
}

TEST_F(FusedAddRmsnormTest, RepeatedRunsGiveTheSameOutput) {
  // Out of place: a timed loop sees the same inputs on every run.
  auto op = cuda::make_op(ctx(), fused_add_rmsnorm_request(4, 520, DType::bf16));
  op->run();
  const auto first = op->output_values();
  op->run();
  op->run();
  EXPECT_EQ(op->output_values(), first);
  EXPECT_NO_THROW(op->verify());
}

TEST_F(FusedAddRmsnormTest, RefusesWhatOneCtaCannotHold) {
  for (const auto& [M, h] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 12}, {1, 16392}, {0, 64}}) {
    const auto why = cuda::cannot_run(ctx(), fused_add_rmsnorm_request(M, h, DType::bf16));
    ASSERT_TRUE(why.has_value()) << "M=" << M << " h=" << h;
    EXPECT_NE(why->find(M == 0 ? "M and h" : "multiple of 8 and at most 16384"), std::string::npos) << *why;
  }
  const auto fp32 = cuda::cannot_run(ctx(), fused_add_rmsnorm_request(1, 64, DType::fp32));
  EXPECT_TRUE(fp32.has_value());
}

}  // namespace
}  // namespace phasebench
