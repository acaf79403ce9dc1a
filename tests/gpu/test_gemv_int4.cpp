// Our weight-only int4 decode GEMV (kernels/cuda/linear_int4.cu) against the CPU
// reference: batches 1..16, group sizes 32..256, N and K with tails (N not a
// multiple of the block's 8 rows, K past one warp step with a partial second),
// repeated calls and refusals. (Its verification caught a planted wrong zero
// point; a never-written output is NaN and fails it.)
// Skips where no GPU is present; runs under the functional emulation (label emu).
#include <gtest/gtest.h>

#include <string>

#include "backend.hpp"
#include "cuda/cuda_op.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear_int4.hpp"

namespace phasebench {
namespace {

class GemvInt4Test : public test::CudaContextTest {};

// N = 67: eight full warps' rows and a partial block; K = 1152 = 9 x 128 =
// 36 x 32: one 1024-weight warp step and a partial one (4 of 32 lanes busy).
TEST_F(GemvInt4Test, MatchesReferenceWithTails) {
  for (std::uint64_t G : {32u, 128u})
    for (std::uint64_t M : {1u, 3u, 8u, 16u}) {
      auto op = cuda::make_op(ctx(), linear_int4_request({M, 67, 1152}, G, Impl::own, 5 + M));
      EXPECT_NO_THROW(op->verify()) << "G=" << G << " M=" << M;
    }
  auto wide = cuda::make_op(ctx(), linear_int4_request({5, 40, 1280}, 256, Impl::own, 3));  // 5 groups of 256
  EXPECT_NO_THROW(wide->verify());
  auto small = cuda::make_op(ctx(), linear_int4_request({2, 1, 64}, 64, Impl::own, 4));  // one row, one group
  EXPECT_NO_THROW(small->verify());
}

TEST_F(GemvInt4Test, ModelShape) {
#if PHASEBENCH_CUDA_EMU
  const LinearShape s{1, 512, 4096};  // seconds on a CPU; the GPU takes Llama's down_proj
#else
  const LinearShape s{8, 4096, 14336};
#endif
  auto op = cuda::make_op(ctx(), linear_int4_request(s, 128, Impl::own, 9));
  EXPECT_NO_THROW(op->verify());
}

TEST_F(GemvInt4Test, RepeatedCallsStayCorrect) {
  auto op = cuda::make_op(ctx(), linear_int4_request({4, 33, 256}, 32, Impl::own, 2));
  op->run();
  op->run();
  EXPECT_NO_THROW(op->verify());
}

TEST_F(GemvInt4Test, RefusesWhatItCannotRun) {
  const auto why = cuda::cannot_run(ctx(), linear_int4_request({17, 64, 128}, 128, Impl::own));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("1..16"), std::string::npos) << *why;
  EXPECT_THROW(cuda::make_op(ctx(), linear_int4_request({17, 64, 128}, 128, Impl::own)), Unsupported);
}

}  // namespace
}  // namespace phasebench
