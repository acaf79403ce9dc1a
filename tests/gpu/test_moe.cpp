// The MoE experts on CUDA (kernels/cuda/moe.cu: cuBLAS's grouped GEMM
// with our permute, SiLU*up and combine kernels) against the CPU reference:
// tail-heavy shapes (h and I not multiples of 8 or 16, odd token counts, experts
// left without tokens, k = 1 and k = E - 1), every storage type, each routing, a
// corrupted output that verification must catch, repeated calls, and refusals.
// Skips where no GPU is present; runs under the functional emulation (label emu).
#include <gtest/gtest.h>

#include <string>

#include "backend.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/moe.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/moe.hpp"

namespace phasebench {
namespace {

class MoeTest : public test::CudaContextTest {};

const Routing kUniform{}, kZipf1{Routing::Kind::zipf, 1.0}, kHalfHot{Routing::Kind::hot, 0.5};

TEST_F(MoeTest, MatchesReferenceWithTails) {
  struct Case {
    MoeShape s;
    Routing r;
  };
  for (const auto& c : std::vector<Case>{{{1, 2, 6, 40, 24}, kUniform},
                                         {{3, 2, 6, 40, 24}, kZipf1},
                                         {{17, 3, 5, 33, 19}, kHalfHot},
                                         {{9, 1, 7, 24, 40}, Routing{Routing::Kind::hot, 1.0}},
                                         {{5, 4, 5, 16, 8}, kUniform},
                                         {{2, 1, 3, 300, 7}, kUniform}})  // h beyond one CTA's 256 threads
    for (DType t : {DType::bf16, DType::fp16, DType::fp32}) {
      auto op = cuda::make_op(ctx(), moe_request(c.s, c.r, t, Impl::blas, Phase::decode, 11 + c.s.T));
      EXPECT_NO_THROW(op->verify()) << to_string(t) << " T=" << c.s.T << " " << c.r.text();
    }
}

TEST_F(MoeTest, ModelShape) {
  const auto m = load_model("mixtral-8x7b");
#if PHASEBENCH_CUDA_EMU
  // Emulated kernels run at CPU speed: Mixtral's routing (2 of 8) with narrower experts.
  const MoeShape s{6, m.experts_per_token, m.experts, 512, 384};
#else
  const MoeShape s{64, m.experts_per_token, m.experts, m.hidden, m.expert_intermediate};
#endif
  auto op = cuda::make_op(ctx(), moe_request(s, kUniform, DType::bf16, Impl::blas, Phase::decode, 9));
  EXPECT_NO_THROW(op->verify());
}

TEST_F(MoeTest, RepeatedCallsStayCorrect) {
  auto op = cuda::make_op(ctx(), moe_request({7, 2, 4, 24, 16}, kZipf1, DType::bf16, Impl::blas, Phase::decode, 2));
  op->run();
  op->run();
  EXPECT_NO_THROW(op->verify());
}

TEST_F(MoeTest, ACorruptedOutputFailsVerification) {
  auto op = cuda::make_op(ctx(), moe_request({5, 2, 6, 40, 24}, kUniform, DType::bf16, Impl::blas, Phase::decode, 3));
  auto* access = dynamic_cast<cuda::MoeOpAccess*>(op.get());
  ASSERT_NE(access, nullptr);
  access->set_fault_injection(true);
  EXPECT_THROW(op->verify(), VerificationError);
  access->set_fault_injection(false);
  EXPECT_NO_THROW(op->verify());
}

TEST_F(MoeTest, RefusesWhatItCannotRun) {
  const auto fp8 = moe_request({4, 2, 6, 32, 16}, kUniform, DType::fp8, Impl::blas, Phase::decode);
  EXPECT_TRUE(cuda::cannot_run(ctx(), fp8).has_value());
  const auto own = moe_request({4, 2, 6, 32, 16}, kUniform, DType::bf16, Impl::own, Phase::decode);
  EXPECT_TRUE(cuda::cannot_run(ctx(), own).has_value());  // the library row only
  const auto m = load_model("mixtral-8x7b");
  const auto huge = moe_request({1u << 22, m.experts_per_token, m.experts, m.hidden, m.expert_intermediate}, kUniform,
                                DType::bf16, Impl::blas, Phase::prefill);
  const auto why = cuda::cannot_run(ctx(), huge);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("memory"), std::string::npos) << *why;
}

}  // namespace
}  // namespace phasebench
