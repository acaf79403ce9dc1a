// The block-scaled 4-bit prefill GEMMs (nvfp4, mxfp4: cuBLASLt's block-scaled matmul)
// against the CPU reference, on tail-heavy shapes: M odd, N not a multiple of 128, K
// a multiple of 32 but not of 128 (partial tiles in both scale tensors, along K too),
// and a K x N x M large enough that the verification samples a grid. Compute
// capability 10.0 (Blackwell) only: below it each test that runs one skips, saying
// why, and the refusal (a skipped point with the reason) is tested instead. Under the
// emulation the default target (h200) skips them; tests/CMakeLists.txt runs them
// again on PB_EMU_TARGET=b200 (emu.block_scaled_linear_b200), where none may skip.
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/linear_cublaslt.hpp"
#include "cuda/linear_verify.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench {
namespace {

int cc_of(const cuda::Context& ctx) { return ctx.cc_major * 10 + ctx.cc_minor; }

#define PB_SKIP_BELOW_BLACKWELL()                                                                             \
  if (cc_of(ctx()) < 100)                                                                                     \
  GTEST_SKIP() << "block-scaled FP4 GEMMs need compute capability 10.0; this device is " << ctx().cc_major << "." \
               << ctx().cc_minor << " (under the emulation: PB_EMU_TARGET=b200)"

struct Fp4Case {
  DType dtype;
  std::uint64_t M, N, K;
};

void PrintTo(const Fp4Case& c, std::ostream* os) {
  *os << to_string(c.dtype) << " M=" << c.M << " N=" << c.N << " K=" << c.K;
}

class BlockScaledLinear : public test::CudaContextTest, public ::testing::WithParamInterface<Fp4Case> {};

TEST_P(BlockScaledLinear, MatchesReference) {
  PB_SKIP_BELOW_BLACKWELL();
  const auto c = GetParam();
  const auto r = linear_request({c.M, c.N, c.K}, c.dtype, Impl::blas, 4242 + c.M);
  ASSERT_FALSE(cuda::cannot_run(ctx(), r).has_value()) << *cuda::cannot_run(ctx(), r);
  auto op = cuda::make_op(ctx(), r);
  EXPECT_NO_THROW(op->verify());
}

std::vector<Fp4Case> fp4_cases() {
  std::vector<Fp4Case> v;
  for (DType t : {DType::nvfp4, DType::mxfp4}) {
    v.push_back({t, 37, 200, 96});     // M odd; N 200 = 128 + 72; K 96: 6 or 3 scale columns of 8 or 4
    v.push_back({t, 1, 136, 160});     // one token; K 160: 10 or 5 scale columns
    v.push_back({t, 131, 1032, 1056});  // M*N*K > 2^27: a sampled grid; two tile rows of X's scales
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Types, BlockScaledLinear, ::testing::ValuesIn(fp4_cases()),
                         [](const ::testing::TestParamInfo<Fp4Case>& i) {
                           return std::string(to_string(i.param.dtype)) + "_" + std::to_string(i.param.M) + "x" +
                                  std::to_string(i.param.N) + "x" + std::to_string(i.param.K);
                         });

class BlockScaledLinearMisc : public test::CudaContextTest {};

TEST_F(BlockScaledLinearMisc, RefusedWithTheReasonBelowComputeCapability10AndOffItsAlignments) {
  for (DType t : {DType::nvfp4, DType::mxfp4}) {
    auto why = [&](std::uint64_t M, std::uint64_t N, std::uint64_t K) {
      return cuda::cannot_run(ctx(), linear_request({M, N, K}, t, Impl::blas));
    };
    if (cc_of(ctx()) < 100) {
      const auto w = why(37, 200, 96);
      ASSERT_TRUE(w.has_value());
      EXPECT_NE(w->find("need compute capability 10.0 or newer"), std::string::npos) << *w;
      EXPECT_THROW(cuda::make_op(ctx(), linear_request({37, 200, 96}, t, Impl::blas)), Unsupported);
      continue;
    }
    EXPECT_FALSE(why(37, 200, 96).has_value());
    const auto k = why(37, 200, 80);  // a multiple of 16 (nvfp4's block), not of 32
    ASSERT_TRUE(k.has_value());
    EXPECT_NE(k->find("K to be a multiple of 32"), std::string::npos) << *k;
    const auto n = why(37, 204, 96);
    ASSERT_TRUE(n.has_value());
    EXPECT_NE(n->find("N to be a multiple of 8"), std::string::npos) << *n;
  }
}

TEST_F(BlockScaledLinearMisc, VerificationCatchesScalesTheMatmulMisreads) {
  // Planted bugs in how the matmul is given its scales: X's and W's scale tensors
  // swapped (M and N both pad to 128 rows here, so both tensors are read whole), and
  // for nvfp4 alpha without the two tensor scales. The verification reads the
  // operands as they lie on the device, so each shows as a wrong Y.
  PB_SKIP_BELOW_BLACKWELL();
  const LinearShape s{37, 104, 96};
  for (DType t : {DType::nvfp4, DType::mxfp4}) {
    SCOPED_TRACE(std::string(to_string(t)));
    auto o = cuda::make_block_scaled_operands(s, t, 99, ctx().stream);
    const float alpha = o.x_tensor_scale * o.w_tensor_scale;
    auto check = [&](const cuda::BlockScales& scales, bool right) {
      cuda::CublasLtLinear gemm(ctx(), t, s, o.X.get(), o.W.get(), o.Y.get(), &scales);
      gemm.run();
      if (right) {
        EXPECT_NO_THROW(cuda::verify_linear_block_scaled(s, o, ctx().stream, "right"));
      } else {
        EXPECT_THROW(cuda::verify_linear_block_scaled(s, o, ctx().stream, "planted"), VerificationError);
      }
    };
    check({o.X_scales.get(), o.W_scales.get(), alpha}, true);
    check({o.W_scales.get(), o.X_scales.get(), alpha}, false);
    if (t == DType::nvfp4) {
      ASSERT_NE(alpha, 1.0f);
      check({o.X_scales.get(), o.W_scales.get(), 1.0f}, false);
    }
  }
}

}  // namespace
}  // namespace phasebench
