// Our decode GEMV (kernels/cuda/linear_gemv.cu) against the CPU reference:
// every batch 1..16 in bf16 and fp16, shapes with tails in N and K, repeated
// calls (the split-K scratch must come back to zero), refusals, and a
// corrupted output that verification must catch. Skips where no GPU is present;
// runs under the functional emulation too (label emu).
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "backend.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/linear_gemv.hpp"
#include "cuda/linear_verify.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench {
namespace {

OpRequest gemv_request(DType t, std::uint64_t M, std::uint64_t N, std::uint64_t K, std::uint64_t seed = 7) {
  return linear_request({M, N, K}, t, Impl::own, seed);
}

class DecodeGemvTest : public test::CudaContextTest {};

struct GemvCase {
  DType dtype;
  std::uint64_t M;
};

void PrintTo(const GemvCase& c, std::ostream* os) { *os << to_string(c.dtype) << " M=" << c.M; }

class DecodeGemvEveryBatch : public test::CudaContextTest, public ::testing::WithParamInterface<GemvCase> {};

// N = 1000: the last 32-row block is partial; K = 1032 = 8 x 129: the last
// 64-wide group of k is partial (K is not a multiple of 16, 32 or 64).
TEST_P(DecodeGemvEveryBatch, MatchesReferenceWithTails) {
  const auto c = GetParam();
  auto op = cuda::make_op(ctx(), gemv_request(c.dtype, c.M, 1000, 1032, 11 + c.M));
  EXPECT_NO_THROW(op->verify());
}

std::vector<GemvCase> every_batch() {
  std::vector<GemvCase> v;
  for (DType t : {DType::bf16, DType::fp16})
    for (std::uint64_t m = 1; m <= cuda::kGemvMaxBatch; ++m) v.push_back({t, m});
  return v;
}

std::string case_name(const ::testing::TestParamInfo<GemvCase>& i) {
  return std::string(to_string(i.param.dtype)) + "_M" + std::to_string(i.param.M);
}

INSTANTIATE_TEST_SUITE_P(Batches, DecodeGemvEveryBatch, ::testing::ValuesIn(every_batch()), case_name);

class DecodeGemvModelShape : public test::CudaContextTest, public ::testing::WithParamInterface<GemvCase> {};

// Large enough that verification samples (M*N*K > 2^27) and the stream-K
// split puts several warps on one row block.
TEST_P(DecodeGemvModelShape, MatchesReference) {
  const auto c = GetParam();
  auto op = cuda::make_op(ctx(), gemv_request(c.dtype, c.M, 4096, 14336, 3 + c.M));
  EXPECT_NO_THROW(op->verify());
}

// Every batch on a GPU; under the emulation two (each takes seconds on a CPU,
// and the tails are covered by DecodeGemvEveryBatch above).
std::vector<GemvCase> model_shape_batches() {
#if PHASEBENCH_CUDA_EMU
  return {{DType::bf16, 16}, {DType::fp16, 3}};
#else
  return every_batch();
#endif
}

INSTANTIATE_TEST_SUITE_P(Batches, DecodeGemvModelShape, ::testing::ValuesIn(model_shape_batches()), case_name);

TEST_F(DecodeGemvTest, OddShapes) {
  struct Shape {
    std::uint64_t M, N, K;
  };
  for (const auto s : {Shape{1, 1, 8}, Shape{3, 33, 24}, Shape{16, 17, 4104}, Shape{5, 31, 8}, Shape{8, 65, 72},
                       Shape{2, 128256, 64}, Shape{1, 7, 65536}}) {
    SCOPED_TRACE("M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K));
    for (DType t : {DType::bf16, DType::fp16}) {
      auto op = cuda::make_op(ctx(), gemv_request(t, s.M, s.N, s.K));
      EXPECT_NO_THROW(op->verify());
    }
  }
}

TEST_F(DecodeGemvTest, RepeatedCallsStayCorrect) {
  // The split-K accumulators and counters must be left at zero by every call.
  auto op = cuda::make_op(ctx(), gemv_request(DType::bf16, 4, 2048, 8192));
  for (int i = 0; i < 5; ++i) op->run();
  EXPECT_NO_THROW(op->verify());
  for (int i = 0; i < 3; ++i) op->run();
  EXPECT_NO_THROW(op->verify());
}

TEST_F(DecodeGemvTest, CtaSharesOfRowBlocksReduceCorrectly) {
  // The CTA-level split: grids capped so that one CTA walks many row blocks
  // (whole ones written directly, partial ones at both ends), a row block is
  // shared by several CTAs (and their warps get 0..n units), and repeated calls
  // leave the accumulators and counters zero. Tails in N and K throughout.
  struct Case {
    std::uint64_t M, N, K;
    int blocks;
  };
  for (const auto c : {Case{1, 100, 520, 1}, Case{3, 65, 4104, 3}, Case{16, 33, 8200, 5}, Case{8, 200, 64, 2},
                       Case{2, 31, 65536, 7}, Case{5, 4096, 72, 6}, Case{9, 97, 1096, 13}}) {
    SCOPED_TRACE("M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                 " blocks<=" + std::to_string(c.blocks));
    const LinearShape s{c.M, c.N, c.K};
    for (DType t : {DType::bf16, DType::fp16}) {
      auto operands = cuda::make_linear_operands(s, t, t, 17 + c.M, ctx().stream);
      cuda::DecodeGemv gemv(ctx(), t, s, c.blocks);
      EXPECT_LE(gemv.blocks(), c.blocks);
      for (int i = 0; i < 3; ++i) gemv.run(operands.X.get(), operands.W.get(), operands.Y.get(), ctx().stream);
      EXPECT_NO_THROW(cuda::verify_linear(s, t, t, operands.view(), ctx().stream, "gemv " + gemv.describe()));
    }
  }
}

TEST_F(DecodeGemvTest, RefusesWhatItCannotRun) {
  auto k_odd = cuda::decode_gemv_unsupported(DType::bf16, {1, 64, 100});
  ASSERT_TRUE(k_odd.has_value());
  EXPECT_NE(k_odd->find("multiple of 8"), std::string::npos) << *k_odd;
  auto big_batch = cuda::decode_gemv_unsupported(DType::bf16, {17, 64, 64});
  ASSERT_TRUE(big_batch.has_value());
  EXPECT_NE(big_batch->find("1..16"), std::string::npos) << *big_batch;
  auto fp32 = cuda::decode_gemv_unsupported(DType::fp32, {1, 64, 64});
  ASSERT_TRUE(fp32.has_value());
  EXPECT_THROW(cuda::make_op(ctx(), gemv_request(DType::fp16, 1, 64, 100)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), gemv_request(DType::bf16, 17, 64, 64)), Unsupported);
  EXPECT_FALSE(cuda::decode_gemv_unsupported(DType::fp16, {16, 1, 8}).has_value());
}

TEST_F(DecodeGemvTest, VerificationCatchesACorruptedOutput) {
  const LinearShape s{3, 300, 520};
  auto operands = cuda::make_linear_operands(s, DType::bf16, DType::bf16, 99, ctx().stream);
  cuda::DecodeGemv gemv(ctx(), DType::bf16, s);
  gemv.run(operands.X.get(), operands.W.get(), operands.Y.get(), ctx().stream);
  EXPECT_NO_THROW(cuda::verify_linear(s, DType::bf16, DType::bf16, operands.view(), ctx().stream, "gemv"));
  // One wrong element (Y[1, 150] = 1e38) must be caught and named.
  const std::uint16_t huge = 0x7e96;
  // On ctx().stream: a plain cudaMemcpy (legacy stream) is not ordered with the
  // non-blocking stream verify_linear reads on, and may return before its DMA ends.
  cuda::upload(static_cast<std::uint16_t*>(operands.Y.get()) + 1 * s.N + 150, &huge, sizeof huge, ctx().stream);
  try {
    cuda::verify_linear(s, DType::bf16, DType::bf16, operands.view(), ctx().stream, "gemv");
    ADD_FAILURE() << "verify_linear accepted a corrupted output";
  } catch (const VerificationError& e) {
    EXPECT_NE(std::string(e.what()).find("m=1, n=150"), std::string::npos) << e.what();
  }
  // An output never written (still the NaN fill) fails too.
  auto unwritten = cuda::make_linear_operands(s, DType::fp16, DType::fp16, 5, ctx().stream);
  EXPECT_THROW(cuda::verify_linear(s, DType::fp16, DType::fp16, unwritten.view(), ctx().stream, "gemv"),
               VerificationError);
}

TEST_F(DecodeGemvTest, DroppingPartOfKIsCaught) {
  // The tolerance must be tight enough that a kernel skipping 1/8 of K fails:
  // compare a K = 4096 output with the reference computed over K = 4096 after
  // zeroing the last 512 columns of X on the device.
  const LinearShape s{2, 512, 4096};
  auto operands = cuda::make_linear_operands(s, DType::bf16, DType::bf16, 21, ctx().stream);
  auto truncated = cuda::make_linear_operands(s, DType::bf16, DType::bf16, 21, ctx().stream);
  // Stream-ordered: cudaMemset runs on the legacy stream, which the non-blocking
  // ctx().stream does not wait for, so the GEMV could read X before it is zeroed.
  for (std::uint64_t m = 0; m < s.M; ++m)
    PB_CUDA_CHECK(cudaMemsetAsync(static_cast<std::uint16_t*>(truncated.X.get()) + m * s.K + (s.K - 512), 0, 512 * 2,
                                  ctx().stream));
  cuda::DecodeGemv gemv(ctx(), DType::bf16, s);
  gemv.run(truncated.X.get(), truncated.W.get(), operands.Y.get(), ctx().stream);
  EXPECT_THROW(cuda::verify_linear(s, DType::bf16, DType::bf16, operands.view(), ctx().stream, "gemv"),
               VerificationError);
}

TEST(DecodeGemvBackend, ThroughTheBackendSeam) {
  PB_SKIP_IF_NO_GPU();
  std::string why;
  auto backend = make_cuda_backend(&why);
  ASSERT_TRUE(backend) << why;
  EXPECT_TRUE(backend->implements(kLinear, DType::bf16, Impl::own));
  EXPECT_FALSE(backend->implements(kLinear, DType::fp32, Impl::own));
  EXPECT_TRUE(backend->applies(gemv_request(DType::bf16, 16, 64, 64)));
  EXPECT_FALSE(backend->applies(gemv_request(DType::bf16, 17, 64, 64)));  // the sweep keeps to cuBLASLt there
  auto r = gemv_request(DType::bf16, 8, 4096, 4096);
  ASSERT_FALSE(backend->cannot_run(r).has_value());
  auto op = backend->prepare(r);
  EXPECT_NO_THROW(op->verify());
  auto too_big = gemv_request(DType::bf16, 17, 64, 64);
  auto reason = backend->cannot_run(too_big);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THROW(backend->prepare(too_big), Unsupported);
}

#if !PHASEBENCH_CUDA_EMU  // not under the emulation: it times (a real GPU only)
TEST(DecodeGemvBackend, TimesInBothCacheModes) {
  PB_SKIP_IF_NO_GPU();
  std::string why;
  auto backend = make_cuda_backend(&why);
  ASSERT_TRUE(backend) << why;
  auto op = backend->prepare(gemv_request(DType::bf16, 8, 4096, 4096));
  // Timing smoke test: both cache modes give a positive time (no speed assertions).
  for (bool cold : {true, false}) {
    const Sample s = backend->time(*op, TimingOptions{cold, "test/decode_gemv"});
    EXPECT_GT(s.seconds, 0.0);
    EXPECT_GE(s.runs, 1u);
    if (cold) {
      EXPECT_EQ(s.runs, 1u) << "cold-cache samples time one launch";
    }
  }
  EXPECT_NO_THROW(op->verify());  // still right after graph replays
}
#endif

}  // namespace
}  // namespace phasebench
