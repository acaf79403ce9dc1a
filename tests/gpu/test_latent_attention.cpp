// MLA decode attention on CUDA (latent_attention.cu) against the CPU
// reference, through cuda::make_op: tail-heavy shapes (L = 1, L not a multiple
// of the 32-token tile or the page, pages of 64 and of sizes that are not the
// tile's, forced and automatic splits, 1, 5, 16, 20 and 128 heads, bf16 and
// fp16), every context from 1 to 96 tokens (each position of the tile, split and
// not), paged and contiguous on the same data, split and unsplit, a corrupted
// output caught, unsupported requests. Skipped where no CUDA device is present;
// the split plan is host-only and always runs. Built again over the emulation
// (label emu), where the shapes stay small: emulated kernels run at CPU speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "reference/common.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/latent_attention.hpp"
#include "cuda/latent_attention_plan.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/latent_attention.hpp"

namespace phasebench {
namespace {

using cuda::AttentionOpAccess;

OpRequest latent_request(bool paged, DType dt, std::uint64_t B, std::uint64_t H, std::uint64_t L,
                         std::uint64_t page_size = 64, std::uint64_t splits = 0, std::uint64_t R = 512,
                         std::uint64_t P = 64) {
  return latent_attention_request({B, H, L, R, P}, dt, paged, 192, page_size, splits, 4321 + B * 3 + L);
}

AttentionOpAccess& access(PreparedOp& op) {
  auto* a = dynamic_cast<AttentionOpAccess*>(&op);
  if (!a) throw std::logic_error("op does not implement AttentionOpAccess");
  return *a;
}

// ---- host-only: the split plan -----------------------------------------------------

TEST(LatentSplits, PlanFillsTwoWavesWithLongEnoughChunks) {
  // H200-like: 132 SMs, 2 CTAs per SM: a wave is 264 CTAs.
  auto p = cuda::plan_latent_splits(1, 16, 8192, 0, 132, 2);
  EXPECT_EQ(p.splits, 32);  // every chunk >= 256 tokens
  EXPECT_EQ(p.chunk, 256);
  EXPECT_EQ(p.workspace_floats, 1u * 16 * 32 * 514);
  // 128 heads: 8 head tiles per sequence, chunks >= 2048 tokens.
  p = cuda::plan_latent_splits(8, 128, 8192, 0, 132, 2);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(cuda::latent_min_chunk(128), 2048);
  // 64 sequences of 16 heads: 4 splits of 2048 tokens fill a wave (256 of 264
  // CTAs); 9 (576 CTAs, three waves, the last 18% full) would be worse.
  p = cuda::plan_latent_splits(64, 16, 8192, 0, 132, 2);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.chunk, 2048);
  // 3/4 of a wave of CTAs already (198 of 264), or a short context: no split.
  EXPECT_EQ(cuda::plan_latent_splits(256, 16, 8192, 0, 132, 2).splits, 1);
  EXPECT_EQ(cuda::plan_latent_splits(200, 16, 8192, 0, 132, 2).splits, 1);
  EXPECT_EQ(cuda::plan_latent_splits(64, 128, 8192, 0, 132, 2).splits, 1);
  EXPECT_EQ(cuda::plan_latent_splits(1, 16, 300, 0, 132, 2).splits, 1);
  EXPECT_EQ(cuda::plan_latent_splits(1, 16, 300, 0, 132, 2).workspace_floats, 0u);
  // Requested: chunks rounded up to whole 32-token tiles, then as many splits as they make.
  p = cuda::plan_latent_splits(1, 16, 100, 5, 132, 2);
  EXPECT_EQ(p.chunk, 32);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(cuda::plan_latent_splits(1, 16, 1, 8, 132, 2).splits, 1);  // at most one split per token
}

TEST(LatentSplits, UnsupportedShapesSayWhatIsSupported) {
  EXPECT_FALSE(cuda::latent_attention_unsupported(DType::bf16, 16, 512, 64).has_value());
  EXPECT_FALSE(cuda::latent_attention_unsupported(DType::fp16, 20, 512, 64).has_value());
  const auto why = cuda::latent_attention_unsupported(DType::bf16, 16, 256, 64);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("kv_lora_rank 512 with qk_rope_head_dim 64"), std::string::npos) << *why;
  EXPECT_TRUE(cuda::latent_attention_unsupported(DType::fp32, 16, 512, 64).has_value());
}

// ---- on the device ------------------------------------------------------------------

struct LatentCase {
  DType dtype;
  std::uint64_t B, H, L;
  bool paged;
  std::uint64_t page_size, splits;
};

std::ostream& operator<<(std::ostream& os, const LatentCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " H=" << c.H << " L=" << c.L
            << (c.paged ? " paged " + std::to_string(c.page_size) : std::string(" contiguous")) << " splits=" << c.splits;
}

class LatentAttention : public test::CudaContextTest, public ::testing::WithParamInterface<LatentCase> {};

TEST_P(LatentAttention, MatchesReference) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), latent_request(c.paged, c.dtype, c.B, c.H, c.L, c.page_size, c.splits));
  if (c.splits > 1) {
    EXPECT_GT(access(*op).splits(), 1);
  }
  EXPECT_NO_THROW(op->verify()) << c;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LatentAttention,
    ::testing::Values(LatentCase{DType::bf16, 1, 16, 1, false, 64, 0},    // a single cached token
                      LatentCase{DType::fp16, 1, 16, 1, true, 64, 0},
                      LatentCase{DType::bf16, 3, 20, 77, false, 64, 2},   // H=20: a masked head tile; L % 32 != 0
                      LatentCase{DType::fp16, 2, 16, 200, true, 64, 3},   // forced splits over pages of 64
                      LatentCase{DType::bf16, 1, 5, 130, true, 48, 0},    // a page that is not the tile
                      LatentCase{DType::fp16, 3, 20, 100, true, 7, 2},    // tiles straddle odd pages
                      LatentCase{DType::fp16, 2, 1, 33, false, 64, 0},    // one head
                      LatentCase{DType::bf16, 1, 128, 150, true, 64, 2}   // DeepSeek-V3's 128 heads, once
                      ));

// ---- every position of the 32-token tile ---------------------------------------------
//
// The kernel masks each score on its own: lane (g, t) holds tokens 8j + 2t and 8j + 2t + 1
// (a column pair) of each of the tile's four n8 blocks j, for heads g and g + 8 of the head
// tile (the m16 fragment's two halves). Every context from 1 to 96 tokens, so the context's
// end lands on every position of a tile (and the masked tile holds 1 to 32 tokens); with
// splits, the last split's chunk ends there too (chunks are whole tiles, the others end on
// tile boundaries), in the second or the third split. Head counts that fill a tile (16) and that do not: 24 (the second tile's upper
// half masked), 9, 17 (one head in the second tile) and 31.
struct LatentSweepCase {
  DType dtype;
  std::uint64_t B, H;
  bool paged;
  std::uint64_t page_size, splits;
};
std::ostream& operator<<(std::ostream& os, const LatentSweepCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " H=" << c.H
            << (c.paged ? " paged " + std::to_string(c.page_size) : std::string(" contiguous")) << " splits=" << c.splits;
}

class LatentTilePositions : public test::CudaContextTest, public ::testing::WithParamInterface<LatentSweepCase> {};

TEST_P(LatentTilePositions, EveryPositionOfTheTileMatchesReference) {
  const auto& c = GetParam();
  for (std::uint64_t L = 1; L <= 96; ++L) {
    SCOPED_TRACE(::testing::Message() << "L=" << L << ": " << (L - 1) % 32 + 1 << " tokens in the last tile");
    auto op = cuda::make_op(ctx(), latent_request(c.paged, c.dtype, c.B, c.H, L, c.page_size, c.splits));
    // Chunks of 32 tokens (64 when 2 splits are asked of more than 64 tokens).
    EXPECT_EQ(access(*op).splits(), static_cast<int>(std::min<std::uint64_t>(c.splits, (L + 31) / 32)));
    EXPECT_NO_THROW(op->verify());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Heads, LatentTilePositions,
    ::testing::Values(LatentSweepCase{DType::bf16, 1, 16, false, 64, 3},  // one whole head tile, splits
                      LatentSweepCase{DType::fp16, 1, 24, true, 64, 2},   // heads 16-23: rows g only
                      LatentSweepCase{DType::bf16, 2, 9, true, 48, 3},    // 9 heads, pages that are not the tile
                      LatentSweepCase{DType::fp16, 1, 31, false, 64, 1},  // unsplit, 15 heads in the second tile
                      LatentSweepCase{DType::bf16, 1, 17, true, 7, 4}));  // one head in the second tile, odd pages

using LatentAttentionMisc = test::CudaContextTest;

TEST_F(LatentAttentionMisc, AutomaticSplitsForSmallBatchAndThePagedCacheAgrees) {
  // One sequence of 1000 tokens: the plan splits it (chunks of >= 256 tokens);
  // the paged cache holds the same values, and every row is read through the
  // table, so the outputs are bit-identical.
  auto c = cuda::make_op(ctx(), latent_request(false, DType::bf16, 1, 16, 1000));
  auto p = cuda::make_op(ctx(), latent_request(true, DType::bf16, 1, 16, 1000, 64));
  EXPECT_GT(access(*c).splits(), 1);
  EXPECT_EQ(access(*c).splits(), access(*p).splits());
  EXPECT_NO_THROW(c->verify());
  EXPECT_NO_THROW(p->verify());
  EXPECT_EQ(access(*c).output_as_float(), access(*p).output_as_float());
}

TEST_F(LatentAttentionMisc, SplitAndUnsplitAgree) {
  auto one = cuda::make_op(ctx(), latent_request(true, DType::fp16, 2, 20, 300, 64, 1));
  auto many = cuda::make_op(ctx(), latent_request(true, DType::fp16, 2, 20, 300, 64, 5));
  EXPECT_EQ(access(*one).splits(), 1);
  EXPECT_EQ(access(*many).splits(), 5);
  one->run();
  many->run();
  const auto a = access(*one).output_as_float(), b = access(*many).output_as_float();
  ASSERT_EQ(a.size(), b.size());
  auto tol = reference::tolerance_for(DType::fp16);
  EXPECT_NO_THROW(reference::check_rows_close(b, std::vector<double>(a.begin(), a.end()), 512,
                                              {2 * tol.atol, 2 * tol.rtol}, "split vs unsplit"));
}

TEST_F(LatentAttentionMisc, WrongOutputIsCaught) {
  for (const bool paged : {false, true})
    for (const std::uint64_t splits : {1u, 3u}) {
      auto op = cuda::make_op(ctx(), latent_request(paged, DType::bf16, 2, 20, 150, 64, splits));
      EXPECT_NO_THROW(op->verify());
      access(*op).set_fault_injection(true);
      EXPECT_THROW(op->verify(), VerificationError) << (paged ? "paged" : "contiguous") << " splits " << splits;
    }
}

TEST_F(LatentAttentionMisc, RunIsRepeatable) {
  auto op = cuda::make_op(ctx(), latent_request(false, DType::bf16, 1, 16, 300, 64, 3));
  op->run();
  const auto a = access(*op).output_as_float();
  op->run();
  op->run();
  EXPECT_EQ(a, access(*op).output_as_float());  // no atomics: deterministic
}

TEST_F(LatentAttentionMisc, UnsupportedRequestsThrowUnsupported) {
  EXPECT_THROW(cuda::make_op(ctx(), latent_request(false, DType::bf16, 1, 16, 100, 64, 0, 256, 64)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), latent_request(false, DType::fp32, 1, 16, 100)), Unsupported);
  auto blas = latent_request(false, DType::bf16, 1, 16, 100);
  blas.impl = Impl::blas;
  EXPECT_THROW(cuda::make_op(ctx(), blas), Unsupported);
  try {
    cuda::make_op(ctx(), latent_request(true, DType::bf16, 1, 16, 100, 64, 0, 512, 32));
    ADD_FAILURE() << "R=512 P=32 should be unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("supports kv_lora_rank 512 with qk_rope_head_dim 64"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace phasebench
