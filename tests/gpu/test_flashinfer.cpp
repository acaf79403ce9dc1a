// FlashInfer's rows (impl:flashinfer) of decode attention (its batch decode over our
// paged pool and, one page per sequence, our contiguous cache), prefill attention
// (single-request and batched ragged) and MLA decode, each against the CPU reference and our
// own kernel on the same buffers, over tail-heavy shapes; and what it refuses, with why.
// Skipped where no CUDA device is present, or where the build has no FlashInfer rows.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reference/common.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_op.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/latent_attention.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench {
namespace {

cuda::AttentionOpAccess& access(PreparedOp& op) {
  auto* a = dynamic_cast<cuda::AttentionOpAccess*>(&op);
  if (!a) throw std::logic_error("op does not implement AttentionOpAccess");
  return *a;
}

// Skips a FlashInfer test in a build without its rows (no headers at configure time,
// or an emulated build without PHASEBENCH_EMU_FLASHINFER).
class FlashInferTest : public test::CudaContextTest {
 protected:
  void SetUp() override {
    if (cuda::all_ops().find(kDecodeAttentionPaged, Impl::flashinfer) == nullptr)
      GTEST_SKIP() << "this build has no FlashInfer rows (FlashInfer's headers were not found at configure time, or "
                      "the emulated build leaves them out)";
    test::CudaContextTest::SetUp();
  }
};

OpRequest decode(Impl impl, bool paged, DType t, std::uint64_t B, std::uint64_t Hq, std::uint64_t Hkv,
                 std::uint64_t L, std::uint64_t D, std::uint64_t page = 16, bool fp8 = false) {
  auto r = decode_attention_request({B, Hq, Hkv, L, D}, t, paged, page, 0, 4321 + B * 3 + L, fp8);
  r.impl = impl;
  return r;
}

OpRequest prefill(Impl impl, DType t, std::uint64_t B, std::uint64_t S, std::uint64_t Hq, std::uint64_t Hkv,
                  std::uint64_t D) {
  return prefill_attention_request({B, Hq, Hkv, S, D}, t, impl, 77 + S);
}

// Two kernels' outputs, each within the dtype's tolerance of the exact answer.
void expect_agree(const std::vector<float>& a, const std::vector<float>& b, std::uint64_t D, DType t,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  auto tol = reference::tolerance_for(t);
  tol = {2 * tol.atol, 2 * tol.rtol};
  EXPECT_NO_THROW(reference::check_rows_close(b, std::vector<double>(a.begin(), a.end()), D, tol, what));
}

struct DecodeCase {
  DType dtype;
  std::uint64_t B, Hq, Hkv, L, D, page;
};
std::ostream& operator<<(std::ostream& os, const DecodeCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " Hq=" << c.Hq << " Hkv=" << c.Hkv << " L=" << c.L
            << " D=" << c.D << " page=" << c.page;
}

class FlashInferDecode : public FlashInferTest, public ::testing::WithParamInterface<DecodeCase> {};

TEST_P(FlashInferDecode, MatchesReferenceAndOurs) {
  const auto& c = GetParam();
  for (const bool paged : {true, false}) {
    const std::string what = std::string(paged ? "paged" : "contiguous") + " FlashInfer vs ours";
    auto fi = cuda::make_op(ctx(), decode(Impl::flashinfer, paged, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page));
    auto own = cuda::make_op(ctx(), decode(Impl::own, paged, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page));
    EXPECT_NO_THROW(fi->verify()) << what;
    EXPECT_EQ(fi->notes()["entry_point"], "BatchDecodeWithPagedKVCacheDispatched (DecodePlan)");
    own->run();
    expect_agree(access(*own).output_as_float(), access(*fi).output_as_float(), c.D, c.dtype, what);
  }
}

// Last pages partial (L not a multiple of the page), one token, GQA groups 1, 4 and 8,
// head dims 64, 128, 256, page sizes 16 and 32, a batch long enough for its split-KV plan.
INSTANTIATE_TEST_SUITE_P(TailHeavy, FlashInferDecode,
                         ::testing::Values(DecodeCase{DType::bf16, 1, 32, 8, 1, 128, 16},
                                           DecodeCase{DType::bf16, 3, 32, 8, 17, 128, 16},
                                           DecodeCase{DType::fp16, 2, 64, 8, 100, 128, 32},
                                           DecodeCase{DType::bf16, 1, 8, 8, 257, 64, 16},
                                           DecodeCase{DType::fp16, 2, 16, 4, 33, 256, 32},
                                           DecodeCase{DType::bf16, 1, 32, 8, 4097, 128, 16}));

TEST_F(FlashInferTest, DecodeWrongOutputIsCaught) {
  for (const bool paged : {true, false}) {
    auto op = cuda::make_op(ctx(), decode(Impl::flashinfer, paged, DType::bf16, 2, 32, 8, 300, 128, 16));
    EXPECT_NO_THROW(op->verify());
    access(*op).set_fault_injection(true);
    EXPECT_THROW(op->verify(), VerificationError) << (paged ? "paged" : "contiguous");
  }
}

TEST_F(FlashInferTest, DecodeRefusalsSayWhy) {
  auto why = [&](const OpRequest& r) { return cuda::cannot_run(ctx(), r).value_or(""); };
  // GQA group 7 (Qwen2.5-7B: 28 query heads over 4): not one of its CUDA-core decode's groups.
  EXPECT_NE(why(decode(Impl::flashinfer, true, DType::bf16, 1, 28, 4, 100, 128)).find("GQA groups"), std::string::npos);
  EXPECT_NE(why(decode(Impl::flashinfer, true, DType::bf16, 1, 32, 32, 100, 96)).find("head_dim 96"), std::string::npos);
  EXPECT_NE(why(decode(Impl::flashinfer, true, DType::bf16, 1, 32, 8, 100, 128, 16, true)).find("per KV head"),
            std::string::npos);
  EXPECT_FALSE(cuda::cannot_run(ctx(), decode(Impl::flashinfer, true, DType::bf16, 1, 32, 8, 100, 128)).has_value());
}

struct PrefillCase {
  DType dtype;
  std::uint64_t B, S, Hq, Hkv, D;
};
std::ostream& operator<<(std::ostream& os, const PrefillCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " S=" << c.S << " Hq=" << c.Hq << " Hkv=" << c.Hkv
            << " D=" << c.D;
}

class FlashInferPrefill : public FlashInferTest, public ::testing::WithParamInterface<PrefillCase> {};

TEST_P(FlashInferPrefill, MatchesReferenceAndOurs) {
  const auto& c = GetParam();
  auto fi = cuda::make_op(ctx(), prefill(Impl::flashinfer, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D));
  auto own = cuda::make_op(ctx(), prefill(Impl::own, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D));
  EXPECT_NO_THROW(fi->verify());
  EXPECT_EQ(fi->notes()["entry_point"],
            c.B == 1 ? "SinglePrefillWithKVCacheDispatched" : "BatchPrefillWithRaggedKVCacheDispatched");
  own->run();
  expect_agree(access(*own).output_as_float(), access(*fi).output_as_float(), c.D, c.dtype, "FlashInfer vs ours");
}

// One request (single prefill) and batches (ragged prefill), prompts off every tile edge.
INSTANTIATE_TEST_SUITE_P(TailHeavy, FlashInferPrefill,
                         ::testing::Values(PrefillCase{DType::bf16, 1, 1, 32, 8, 128},
                                           PrefillCase{DType::bf16, 1, 77, 32, 8, 128},
                                           PrefillCase{DType::fp16, 1, 200, 8, 8, 64},
                                           PrefillCase{DType::bf16, 1, 129, 16, 4, 256},
                                           PrefillCase{DType::bf16, 3, 33, 32, 8, 128},
                                           PrefillCase{DType::fp16, 2, 300, 16, 2, 64},
                                           PrefillCase{DType::bf16, 2, 65, 8, 8, 256}));

TEST_F(FlashInferTest, PrefillWrongOutputIsCaught) {
  for (const std::uint64_t B : {1u, 2u}) {
    auto op = cuda::make_op(ctx(), prefill(Impl::flashinfer, DType::bf16, B, 100, 32, 8, 128));
    EXPECT_NO_THROW(op->verify());
    access(*op).set_fault_injection(true);
    EXPECT_THROW(op->verify(), VerificationError) << "batch " << B;
  }
}

// FlashInfer's MLA over our latent cache (DeepSeek's 512 + 64), contiguous and paged,
// partial last pages, head counts off its 16-row tiles.
TEST_F(FlashInferTest, LatentAttentionMatchesReferenceAndOurs) {
  if (cuda::all_ops().find(kLatentAttention, Impl::flashinfer) == nullptr)
    GTEST_SKIP() << "this build has no FlashInfer MLA row (the emulated builds leave it out: its grid-wide "
                    "cooperative sync cannot run there; kernels/CMakeLists.txt)";
  struct Case {
    std::uint64_t B, H, L, page;
  };
  for (const auto& c : {Case{1, 16, 1, 64}, Case{2, 16, 257, 64}, Case{3, 128, 100, 32}, Case{1, 20, 1000, 16}})
    for (const bool paged : {false, true}) {
      auto r = latent_attention_request({c.B, c.H, c.L, 512, 64}, DType::bf16, paged, 192, c.page);
      r.impl = Impl::flashinfer;
      auto fi = cuda::make_op(ctx(), r);
      r.impl = Impl::own;
      auto own = cuda::make_op(ctx(), r);
      const std::string what = "MLA B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + " L=" +
                               std::to_string(c.L) + (paged ? " paged" : " contiguous");
      EXPECT_NO_THROW(fi->verify()) << what;
      own->run();
      expect_agree(access(*own).output_as_float(), access(*fi).output_as_float(), 512, DType::bf16, what);
      access(*fi).set_fault_injection(true);
      EXPECT_THROW(fi->verify(), VerificationError) << what;
    }
}

}  // namespace
}  // namespace phasebench
