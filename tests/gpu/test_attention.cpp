// Decode attention (contiguous, paged, split-KV) and prefill attention (flash
// kernel, cuBLAS path) against the CPU reference, through cuda::make_op.
// Skipped, with the reason, where no CUDA device is present; the split
// heuristics and the capability table are host-only and always run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "reference/common.hpp"
#include "reference/prefill_attention.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/decode_attention_plan.hpp"
#include "cuda/prefill_attention.hpp"
#include "cuda/prefill_attention_plan.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench {
namespace {

using cuda::AttentionOpAccess;

OpRequest decode_request(bool paged, DType dt, std::uint64_t B, std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t L,
                         std::uint64_t D, std::uint64_t page_size = 16, std::uint64_t splits = 0, bool kv_fp8 = false) {
  return decode_attention_request({B, Hq, Hkv, L, D}, dt, paged, page_size, splits, 1234 + B * 7 + L, kv_fp8);
}

OpRequest prefill_request(Impl impl, DType dt, std::uint64_t B, std::uint64_t S, std::uint64_t Hq, std::uint64_t Hkv,
                          std::uint64_t D) {
  return prefill_attention_request({B, Hq, Hkv, S, D}, dt, impl, 99 + S);
}

AttentionOpAccess& access(PreparedOp& op) {
  auto* a = dynamic_cast<AttentionOpAccess*>(&op);
  if (!a) throw std::logic_error("op does not implement AttentionOpAccess");
  return *a;
}

// Compares two decode outputs [rows, D] with atol scaled by each row of `want`'s RMS:
// decode outputs shrink like 1/sqrt(L), so a fixed atol would accept nearly anything
// at long contexts (see DecodeAttentionOp::verify).
// `both_approximate`: `want_f` is another kernel's output, not the reference; each
// is within the tolerance of the exact answer, so they are within twice it of each other.
void expect_rows_close(const std::vector<float>& got, const std::vector<float>& want_f, std::size_t D, DType t,
                       const std::string& what, bool both_approximate = false) {
  const std::vector<double> want(want_f.begin(), want_f.end());
  auto tol = reference::tolerance_for(t);
  if (both_approximate) tol = {2 * tol.atol, 2 * tol.rtol};
  EXPECT_NO_THROW(reference::check_rows_close(got, want, D, tol, what));
}

// ---- host-only: heuristics and the capability table ---------------------------

TEST(DecodeSplits, HeuristicSitsJustUnderWholeWaves) {
  // 132 SMs with 4 resident CTAs each: a wave is 528 CTAs.
  // Llama-3.1-8B at B=8, L=32768 (64 CTAs unsplit): 8 splits fill one wave
  // exactly; 17 (two waves wanted) would make 1088 CTAs, 2.06 waves.
  const int s8 = cuda::choose_decode_splits(8, 8, 1, 32768, 64, 132, 4);
  EXPECT_EQ(s8, 8);
  // B=1, L=32768 (8 CTAs): 64 splits of 512 tokens, one wave (128 splits of
  // 256 would take two).
  const int s1 = cuda::choose_decode_splits(1, 8, 1, 32768, 16, 132, 4);
  EXPECT_EQ(s1, 64);
  EXPECT_EQ(cuda::split_kv_chunk(32768, s1, 16), 512);
  // Short contexts split too when the CTAs are few: B=1, L=512 -> 8 chunks of 64.
  EXPECT_EQ(cuda::choose_decode_splits(1, 8, 1, 512, 64, 132, 4), 8);
  EXPECT_EQ(cuda::choose_decode_splits(8, 8, 1, 512, 64, 132, 4), 8);
  // Enough CTAs already, or a context under two minimum chunks: no split.
  EXPECT_EQ(cuda::choose_decode_splits(256, 8, 1, 32768, 16, 132, 4), 1);
  EXPECT_EQ(cuda::choose_decode_splits(1, 1, 1, 100, 16, 132, 4), 1);
  // Chunks are aligned to the page size, tile the context exactly, are at least
  // kMinDecodeChunk tokens, and the grid stays within two waves.
  for (int B : {1, 3, 8})
    for (int L : {130, 1000, 4097, 32768, 12345})
      for (int align : {16, 48, 64}) {
        const int splits = cuda::choose_decode_splits(B, 4, 1, L, align, 132, 3);
        const int chunk = cuda::split_kv_chunk(L, splits, align);
        EXPECT_EQ(chunk % align, 0);
        EXPECT_GE(static_cast<long long>(chunk) * splits, L);
        EXPECT_LT(static_cast<long long>(chunk) * (splits - 1), L);
        if (splits > 1) {
          EXPECT_GE(chunk, cuda::kMinDecodeChunk);
          EXPECT_LE(static_cast<long long>(B) * 4 * splits, 2LL * 132 * 3);
        }
        EXPECT_LE(splits, cuda::kMaxDecodeSplits);
      }
}

TEST(DecodeSplits, HeadsPerCtaCoverTheGroup) {
  for (int G = 1; G <= 64; ++G) {
    const int gt = cuda::decode_heads_per_cta(G);
    const int chunks = cuda::decode_head_chunks(G);
    EXPECT_TRUE(gt == 1 || gt == 2 || gt == 4 || gt == 8) << G;
    EXPECT_GE(gt * chunks, G) << G;
    EXPECT_LT(gt * (chunks - 1), G) << G;  // no empty chunk
  }
  EXPECT_EQ(cuda::decode_heads_per_cta(4), 4);
  EXPECT_EQ(cuda::decode_heads_per_cta(8), 8);
  EXPECT_EQ(cuda::decode_head_chunks(8), 1);
}

// What the files of kernels/cuda/ register (host only: no device needed).
TEST(AttentionOps, RegisteredImplementations) {
  const cuda::Context no_device;
  auto takes = [&](const char* kind, DType t, Impl impl) {
    const auto* i = cuda::all_ops().find(kind, impl);
    return i != nullptr && i->dtypes(t, no_device);
  };
  for (DType t : {DType::bf16, DType::fp16}) {
    EXPECT_TRUE(takes(kDecodeAttention, t, Impl::own));
    EXPECT_TRUE(takes(kDecodeAttentionPaged, t, Impl::own));
    EXPECT_TRUE(takes("kv_append", t, Impl::own));
    EXPECT_TRUE(takes("kv_append_paged", t, Impl::own));
    EXPECT_TRUE(takes(kPrefillAttention, t, Impl::own));
    EXPECT_TRUE(takes(kPrefillAttention, t, Impl::blas));
    EXPECT_FALSE(takes(kDecodeAttention, t, Impl::blas));
  }
  EXPECT_FALSE(takes(kDecodeAttention, DType::fp32, Impl::own));
  EXPECT_FALSE(takes(kPrefillAttention, DType::fp8, Impl::own));
}

TEST(AttentionOps, UnsupportedShapesSayWhatIsSupported) {
  auto says = [](const std::optional<std::string>& why, const char* what) {
    return why.has_value() && why->find(what) != std::string::npos;
  };
  EXPECT_TRUE(says(cuda::decode_attention_unsupported(DType::bf16, 32, 8, 96, false, 16), "64, 128 or 256"));
  EXPECT_TRUE(says(cuda::decode_attention_unsupported(DType::bf16, 10, 4, 128, false, 16), "multiple"));
  EXPECT_TRUE(says(cuda::decode_attention_unsupported(DType::bf16, 32, 8, 128, true, 8), "multiple of 16"));
  EXPECT_TRUE(says(cuda::decode_attention_unsupported(DType::bf16, 32, 8, 128, true, 24), "multiple of 16"));
  EXPECT_FALSE(cuda::decode_attention_unsupported(DType::fp16, 32, 8, 256, true, 48).has_value());
  EXPECT_TRUE(says(cuda::prefill_attention_unsupported(DType::bf16, 32, 8, 96, false), "64, 128 or 256"));
  EXPECT_FALSE(cuda::prefill_attention_unsupported(DType::bf16, 32, 8, 256, false).has_value());
  EXPECT_FALSE(cuda::prefill_attention_unsupported(DType::bf16, 32, 8, 96, true).has_value());
}

TEST(AttentionOps, SharedMemoryBeyondTheDevicesLimitIsRefused) {
  // An sm_80/sm_90 binary also runs on compute capability 8.6/8.9 (A10, L40S,
  // RTX 4090), whose blocks may opt in to 99 KiB: the tensor-core decode kernel
  // at head_dim 256 (133 KiB) must be refused there with the reason, not fail.
  const int small = 99 * 1024, hopper = 227 * 1024;
  const std::size_t d256 = cuda::decode_attention_smem_bytes(256, 8, false);
  EXPECT_EQ(d256, 133u * 1024);
  const auto why = cuda::shared_memory_unsupported("decode attention", d256, small, 8, 9);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("needs 133.0 KiB of shared memory per block"), std::string::npos) << *why;
  EXPECT_NE(why->find("compute capability 8.9) allows 99.0 KiB"), std::string::npos) << *why;
  EXPECT_FALSE(cuda::shared_memory_unsupported("decode attention", d256, hopper, 9, 0).has_value());
  // head_dim 128 (69 KiB) fits everywhere; 4 rows per CTA run the CUDA-core kernel (no dynamic shared memory).
  EXPECT_FALSE(cuda::shared_memory_unsupported("decode attention", cuda::decode_attention_smem_bytes(128, 8, true), small, 8, 9));
  EXPECT_EQ(cuda::decode_attention_smem_bytes(256, 4, false), 0u);
  EXPECT_EQ(cuda::decode_attention_smem_bytes(128, 6, false), cuda::decode_attention_smem_bytes(128, 16, false));
}

// ---- decode attention on the device ---------------------------------------------

struct DecodeCase {
  DType dtype;
  std::uint64_t B, Hq, Hkv, L, D, page_size, splits;
  bool kv_fp8 = false;  // an fp8 e4m3 cache with per-head scales
};
std::ostream& operator<<(std::ostream& os, const DecodeCase& c) {
  return os << to_string(c.dtype) << (c.kv_fp8 ? " fp8 cache" : "") << " B=" << c.B << " Hq=" << c.Hq
            << " Hkv=" << c.Hkv << " L=" << c.L << " D=" << c.D << " page=" << c.page_size << " splits=" << c.splits;
}

class DecodeAttention : public test::CudaContextTest, public ::testing::WithParamInterface<DecodeCase> {};

TEST_P(DecodeAttention, ContiguousMatchesReference) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), decode_request(false, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size, c.splits, c.kv_fp8));
  EXPECT_NO_THROW(op->verify());
}

TEST_P(DecodeAttention, PagedMatchesReference) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), decode_request(true, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size, c.splits, c.kv_fp8));
  EXPECT_NO_THROW(op->verify());
}

TEST_P(DecodeAttention, PagedAndContiguousAgreeOnTheSameData) {
  const auto& c = GetParam();
  auto contiguous =
      cuda::make_op(ctx(), decode_request(false, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size, c.splits, c.kv_fp8));
  auto paged =
      cuda::make_op(ctx(), decode_request(true, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size, c.splits, c.kv_fp8));
  contiguous->run();
  paged->run();
  const std::vector<float> a = access(*contiguous).output_as_float();
  const std::vector<float> b = access(*paged).output_as_float();
  ASSERT_EQ(a.size(), b.size());
  // Same logical K/V (the paged pool is filled by logical index); only the split
  // boundaries may differ, so the outputs agree to within the storage rounding.
  expect_rows_close(b, a, c.D, c.dtype, "paged vs contiguous");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeAttention,
    ::testing::Values(
        // B=1, long context: the automatic split-KV path (GQA 4, Llama-3-8B heads).
        DecodeCase{DType::bf16, 1, 32, 8, 4097, 128, 16, 0},
        // forced splits, context not a multiple of the page or split chunk
        DecodeCase{DType::bf16, 1, 8, 2, 1000, 128, 16, 5},
        DecodeCase{DType::fp16, 3, 8, 8, 1000, 64, 16, 0},     // GQA 1, B=3
        DecodeCase{DType::bf16, 2, 16, 2, 17, 256, 16, 0},     // GQA 8, tiny context (2 pages, 1 partial)
        DecodeCase{DType::fp16, 2, 32, 4, 777, 256, 48, 3},    // GQA 8, D=256, page 48, splits
        DecodeCase{DType::bf16, 4, 8, 2, 1000, 128, 32, 1},    // GQA 4, one split
        DecodeCase{DType::bf16, 1, 12, 1, 333, 64, 16, 0},     // G=12: two head chunks per kv head
        DecodeCase{DType::fp16, 2, 14, 2, 300, 128, 16, 2},    // G=7: a partly idle head slot
        DecodeCase{DType::bf16, 3, 2, 1, 1, 64, 16, 0},        // a single cached token
        DecodeCase{DType::bf16, 40, 16, 8, 129, 128, 32, 0},  // GQA 2 with a real context, B=40
        DecodeCase{DType::bf16, 2, 64, 8, 2048, 128, 16, 0},   // Llama-3-70B heads
        // many splits: 257 of 16 tokens paged (more than the reduce's 128 threads), 65 contiguous
        DecodeCase{DType::bf16, 1, 8, 2, 4097, 128, 16, 300},
        DecodeCase{DType::fp16, 1, 16, 2, 1500, 256, 32, 200},  // D=256 over many splits, page 32 (shift/mask)
        // fp8 caches: 8-byte loads per lane, the K scale in the softmax scale, the V
        // scale on the output (split partials and reduction included); the tails above.
        DecodeCase{DType::bf16, 1, 32, 8, 4097, 128, 16, 0, true},  // automatic splits
        DecodeCase{DType::fp16, 2, 32, 4, 777, 256, 48, 3, true},   // GQA 8, D=256, page 48, forced splits
        DecodeCase{DType::bf16, 3, 8, 8, 1000, 64, 16, 0, true},    // GQA 1, D=64 (8 lanes per token)
        DecodeCase{DType::bf16, 1, 12, 1, 333, 64, 16, 0, true},    // two head chunks per kv head
        DecodeCase{DType::fp16, 2, 14, 2, 300, 128, 16, 2, true},   // G=7, splits
        DecodeCase{DType::bf16, 3, 2, 1, 1, 64, 16, 0, true}        // a single cached token
        ));

// 8 query rows per CTA (G = 8 and 16) run the tensor-core kernel: contexts of 1, 15 and 17
// tokens (a single partial 16-token tile), tiles that end mid-page or mid-chunk, forced and
// automatic splits, pages 16 (shift/mask), 32 and 48 (division), every head_dim, fp8 caches.
INSTANTIATE_TEST_SUITE_P(
    GroupOf8, DecodeAttention,
    ::testing::Values(DecodeCase{DType::bf16, 1, 64, 8, 1, 128, 16, 0},     // Llama-3.1-70B heads, one token
                      DecodeCase{DType::fp16, 2, 64, 8, 15, 128, 16, 0},    // L < 16: one partial tile
                      DecodeCase{DType::bf16, 1, 32, 4, 17, 64, 32, 0},     // a full tile and one token
                      DecodeCase{DType::fp16, 3, 32, 4, 100, 256, 48, 2},   // D=256, page 48, splits
                      DecodeCase{DType::bf16, 1, 64, 8, 257, 128, 32, 5},   // forced splits, page 32
                      DecodeCase{DType::bf16, 2, 32, 2, 1000, 128, 16, 0},  // G=16: two row chunks, auto splits
                      DecodeCase{DType::fp16, 1, 16, 1, 257, 64, 48, 3},    // G=16, D=64, page 48
                      DecodeCase{DType::bf16, 1, 32, 4, 1000, 256, 16, 7},  // D=256, 7 splits
                      DecodeCase{DType::fp16, 1, 64, 8, 1000, 64, 32, 0},   // D=64, automatic splits
                      DecodeCase{DType::bf16, 1, 64, 8, 257, 128, 16, 0, true},  // fp8 cache, 70B heads
                      DecodeCase{DType::fp16, 2, 32, 4, 100, 64, 48, 2, true},   // fp8, D=64, page 48, splits
                      DecodeCase{DType::bf16, 1, 16, 1, 17, 256, 32, 0, true}    // fp8, G=16, D=256
                      ));

using DecodeAttentionMisc = test::CudaContextTest;

TEST_F(DecodeAttentionMisc, SplitAndUnsplitAgree) {
  for (const bool paged : {false, true}) {
    auto one = cuda::make_op(ctx(), decode_request(paged, DType::bf16, 2, 8, 2, 3000, 128, 16, 1));
    auto many = cuda::make_op(ctx(), decode_request(paged, DType::bf16, 2, 8, 2, 3000, 128, 16, 9));
    EXPECT_EQ(access(*one).splits(), 1);
    EXPECT_GT(access(*many).splits(), 1);
    one->run();
    many->run();
    const auto a = access(*one).output_as_float();
    const auto b = access(*many).output_as_float();
    ASSERT_EQ(a.size(), b.size());
    expect_rows_close(b, a, 128, DType::bf16, "split vs unsplit");
    EXPECT_NO_THROW(many->verify());
  }
}

TEST_F(DecodeAttentionMisc, AutomaticSplitsKickInForSmallBatchLongContext) {
  auto op = cuda::make_op(ctx(), decode_request(false, DType::bf16, 1, 8, 1, 16384, 128));
  EXPECT_GT(access(*op).splits(), 1);
  EXPECT_NO_THROW(op->verify());
}

TEST_F(DecodeAttentionMisc, RunIsRepeatableAndAsynchronous) {
  auto op = cuda::make_op(ctx(), decode_request(true, DType::fp16, 2, 16, 4, 1500, 128, 32));
  for (int i = 0; i < 5; ++i) op->run();
  const auto a = access(*op).output_as_float();
  op->run();
  const auto b = access(*op).output_as_float();
  EXPECT_EQ(a, b);  // deterministic: no atomics in the kernel or the reduction
}

TEST_F(DecodeAttentionMisc, WrongOutputIsCaught) {
  for (const bool paged : {false, true}) {
    for (const std::uint64_t splits : {1u, 4u}) {
      // The fp8 cache with the paged layout, the 16-bit one with the contiguous.
      const bool fp8 = paged;
      auto op = cuda::make_op(ctx(), decode_request(paged, DType::bf16, 2, 8, 2, 1000, 128, 16, splits, fp8));
      EXPECT_NO_THROW(op->verify());
      access(*op).set_fault_injection(true);
      EXPECT_THROW(op->verify(), VerificationError) << (paged ? "paged" : "contiguous") << " splits " << splits;
    }
  }
}

TEST_F(DecodeAttentionMisc, UnsupportedRequestsThrowUnsupported) {
  EXPECT_THROW(cuda::make_op(ctx(), decode_request(false, DType::bf16, 1, 8, 8, 100, 96)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), decode_request(false, DType::bf16, 1, 10, 4, 100, 128)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), decode_request(true, DType::bf16, 1, 8, 8, 100, 128, 8)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), decode_request(false, DType::fp32, 1, 8, 8, 100, 128)), Unsupported);
  auto blas = decode_request(false, DType::bf16, 1, 8, 8, 100, 128);
  blas.impl = Impl::blas;
  EXPECT_THROW(cuda::make_op(ctx(), blas), Unsupported);
}

// ---- multi-token and ragged decode steps ---------------------------------------------

struct StepsCase {
  DType dtype;
  std::uint64_t B, Hq, Hkv, L, D, S;
  const char* dist;
  std::uint64_t page_size, splits;
  bool kv_fp8 = false;
};
std::ostream& operator<<(std::ostream& os, const StepsCase& c) {
  return os << to_string(c.dtype) << (c.kv_fp8 ? " fp8 cache" : "") << " B=" << c.B << " Hq=" << c.Hq
            << " Hkv=" << c.Hkv << " L=" << c.L << " D=" << c.D << " S=" << c.S << " " << c.dist
            << " page=" << c.page_size << " splits=" << c.splits;
}

OpRequest steps_request(bool paged, const StepsCase& c) {
  auto r = decode_request(paged, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size, c.splits, c.kv_fp8);
  set_decode_steps(r, c.S, parse_context_dist(c.dist));
  return r;
}

class DecodeSteps : public test::CudaContextTest, public ::testing::WithParamInterface<StepsCase> {};

TEST_P(DecodeSteps, ContiguousAndPagedMatchReference) {
  for (const bool paged : {false, true}) {
    auto op = cuda::make_op(ctx(), steps_request(paged, GetParam()));
    EXPECT_NO_THROW(op->verify()) << (paged ? "paged" : "contiguous");
  }
}

// S*G query rows per KV head go through the head-chunk path (rows per CTA 1..8,
// several chunks, an idle slot); contexts as short as the step, off the page and
// the split chunk; splits that start past a short sequence's end (ragged) or past
// a new token's causal limit.
INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeSteps,
    ::testing::Values(StepsCase{DType::bf16, 2, 32, 8, 1000, 128, 2, "fixed", 16, 0},       // S*G = 8: one chunk
                      StepsCase{DType::fp16, 3, 8, 2, 777, 64, 4, "fixed", 48, 3},         // 16 rows: two chunks
                      StepsCase{DType::bf16, 2, 14, 2, 300, 256, 3, "fixed", 16, 0},       // 21 rows: an idle slot
                      StepsCase{DType::bf16, 3, 8, 8, 4, 128, 4, "fixed", 16, 0},          // context = S
                      StepsCase{DType::bf16, 1, 8, 2, 100, 128, 8, "fixed", 16, 40},       // splits of 16 tokens
                      StepsCase{DType::fp16, 5, 16, 8, 200, 128, 1, "lognormal:1.5", 16, 4},  // ragged, one token
                      StepsCase{DType::bf16, 4, 32, 8, 300, 128, 4, "uniform:0.9", 32, 0},
                      StepsCase{DType::bf16, 6, 8, 1, 500, 64, 5, "lognormal:1", 16, 8},   // G=8: 40 rows
                      StepsCase{DType::bf16, 3, 32, 8, 300, 128, 4, "lognormal:1", 48, 3, true}));  // fp8 cache

// S*G >= 8 rows per KV head from multi-token steps of small groups (G = 4) and of G = 8:
// the tensor-core kernel with causal limits inside a tile, idle row slots (12 rows in two
// chunks), a context as short as the step, ragged contexts, splits and fp8 caches.
INSTANTIATE_TEST_SUITE_P(
    GroupOf8, DecodeSteps,
    ::testing::Values(StepsCase{DType::bf16, 2, 16, 4, 100, 128, 2, "fixed", 16, 0},          // G=4, S=2: 8 rows
                      StepsCase{DType::fp16, 3, 16, 4, 17, 64, 3, "lognormal:1", 48, 2},     // 12 rows, ragged
                      StepsCase{DType::bf16, 2, 64, 8, 257, 128, 4, "uniform:0.9", 32, 5},   // G=8, S=4: 4 chunks
                      StepsCase{DType::bf16, 2, 32, 4, 15, 256, 2, "fixed", 16, 0},          // G=8, L < 16
                      StepsCase{DType::fp16, 3, 32, 8, 4, 128, 4, "fixed", 16, 0},           // G=4, context = S
                      StepsCase{DType::bf16, 4, 64, 8, 1000, 64, 3, "lognormal:1.5", 16, 0, true},  // fp8
                      StepsCase{DType::fp16, 2, 16, 4, 300, 128, 4, "lognormal:1", 48, 0, true}));  // fp8, G=4

// Odd groups on the tensor-core kernel (S*G of 5 to 7 rows rounded up to 8, and 12 in two
// chunks) with ragged contexts: each sequence's end and its new tokens' causal
// limits fall on scattered positions of their 16-token tiles, and forced splits start past
// the short sequences' ends. With G = 1 or 3 the two columns of a lane's pair (rows 2t and
// 2t + 1) are different new tokens, with causal limits one apart.
INSTANTIATE_TEST_SUITE_P(
    OddGroups, DecodeSteps,
    ::testing::Values(StepsCase{DType::bf16, 16, 2, 2, 40, 64, 5, "uniform:1", 16, 6},      // G=1, S=5: 5 rows
                      StepsCase{DType::fp16, 16, 6, 2, 40, 64, 2, "uniform:1", 48, 4},      // G=3, S=2: 6 rows
                      StepsCase{DType::bf16, 12, 5, 1, 40, 128, 1, "lognormal:1", 16, 5},   // G=5
                      StepsCase{DType::fp16, 12, 7, 1, 40, 64, 1, "uniform:1", 32, 3},      // G=7, page 32
                      StepsCase{DType::bf16, 12, 1, 1, 40, 64, 7, "uniform:1", 16, 3, true},  // G=1, S=7, fp8
                      StepsCase{DType::fp16, 8, 3, 1, 60, 64, 4, "uniform:0.9", 16, 4}));   // G=3, S=4: 12 rows

// ---- the tensor-core kernel at every position of its 16-token tile ----------------------
//
// decode_attention_mma_kernel masks each accumulator element on its own: lane (g, t) holds
// tokens g and g + 8 of a tile (the m16 fragment's two halves) for query rows 2t and 2t + 1
// (a column pair, each with its own causal limit). Every context from S to 80 tokens, so
// the context's end (the last split's end) and each new token's causal limit L - S + 1 + i
// land on every position of a tile, in the tiles of each of the four warps (tile j of a
// chunk is warp j % 4's; tile 4 is warp 0's second, in the other pipeline stage); paged and contiguous,
// forced splits (paged chunks of whole pages, so earlier new tokens' limits also fall in an
// earlier split than the context's end). Groups: 8 rows of one token (G = 8),
// and odd ones rounded up to 8 rows (G = 3, 5, 7; G = 1 with S = 5 to 7), where a pair's
// two columns are different tokens; S*G = 9 and 12 (a second row chunk, g0 = 8).
struct TileSweepCase {
  DType dtype;
  std::uint64_t Hq, Hkv, S, D, page_size, splits;
  bool kv_fp8 = false;
};
std::ostream& operator<<(std::ostream& os, const TileSweepCase& c) {
  return os << to_string(c.dtype) << (c.kv_fp8 ? " fp8 cache" : "") << " Hq=" << c.Hq << " Hkv=" << c.Hkv
            << " S=" << c.S << " D=" << c.D << " page=" << c.page_size << " splits=" << c.splits;
}

class DecodeTilePositions : public test::CudaContextTest, public ::testing::WithParamInterface<TileSweepCase> {};

TEST_P(DecodeTilePositions, EveryPositionOfTheTileMatchesReference) {
  const auto& c = GetParam();
  ASSERT_EQ(cuda::decode_heads_per_cta(static_cast<int>(c.S * (c.Hq / c.Hkv))), 8) << "not the tensor-core kernel";
  for (std::uint64_t L = c.S; L <= 80; ++L) {
    for (const bool paged : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (paged ? "paged" : "contiguous") << " L=" << L << ": tile " << (L - 1) / 16
                                        << ", position " << (L - 1) % 16 << " is the last token");
      auto r = decode_request(paged, c.dtype, 1, c.Hq, c.Hkv, L, c.D, c.page_size, c.splits, c.kv_fp8);
      set_decode_steps(r, c.S, parse_context_dist("fixed"));
      auto op = cuda::make_op(ctx(), r);
      if (paged && c.splits > 1 && L > c.page_size) {
        EXPECT_GT(access(*op).splits(), 1);
      }
      EXPECT_NO_THROW(op->verify());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, DecodeTilePositions,
    ::testing::Values(TileSweepCase{DType::bf16, 8, 1, 1, 64, 16, 3},    // G=8: the context's end only
                      TileSweepCase{DType::fp16, 2, 2, 5, 64, 16, 3},    // G=1, S=5: 5 rows, limits one apart
                      TileSweepCase{DType::bf16, 1, 1, 6, 128, 48, 2},   // G=1, S=6, page 48
                      TileSweepCase{DType::fp16, 1, 1, 7, 64, 32, 2},    // G=1, S=7, page 32
                      TileSweepCase{DType::bf16, 6, 2, 2, 64, 16, 4},    // G=3, S=2: pair (2, 3) straddles tokens
                      TileSweepCase{DType::fp16, 5, 1, 1, 64, 16, 2},    // G=5
                      TileSweepCase{DType::bf16, 7, 1, 1, 256, 16, 3},   // G=7, D=256
                      TileSweepCase{DType::fp16, 3, 1, 3, 64, 16, 3},    // G=3, S=3: 9 rows, a 1-row second chunk
                      TileSweepCase{DType::bf16, 1, 1, 12, 64, 16, 5},   // G=1, S=12: rows 8-11 in chunk 2
                      TileSweepCase{DType::bf16, 2, 2, 5, 64, 16, 3, true}));  // fp8 cache, G=1, S=5

TEST_F(DecodeAttentionMisc, OccupancyIsTheLaunchedKernels) {
  // 8 rows per CTA run the tensor-core kernel, whose dynamic shared memory (37 KiB at
  // head_dim 64, 133 KiB at 256) bounds its CTAs per SM; the split planner must see that,
  // not the occupancy of the CUDA-core kernel (a little static shared memory at every head_dim).
  const int d64 = cuda::decode_attention_ctas_per_sm(DType::bf16, 64, 8, false);
  const int d256 = cuda::decode_attention_ctas_per_sm(DType::bf16, 256, 8, false);
  EXPECT_EQ(d256, 1);
  EXPECT_GT(d64, d256);
  EXPECT_EQ(cuda::decode_attention_ctas_per_sm(DType::fp16, 256, 16, true, true), 1);  // two chunks of 8, fp8
}

TEST_F(DecodeAttentionMisc, GroupOf8WrongOutputIsCaught) {
  // The tensor-core kernel's output (70B heads, split and not, paged fp8 and contiguous) is checked.
  for (const bool paged : {false, true}) {
    for (const std::uint64_t splits : {1u, 3u}) {
      auto op = cuda::make_op(ctx(), decode_request(paged, DType::bf16, 1, 64, 8, 300, 128, 16, splits, paged));
      EXPECT_NO_THROW(op->verify());
      access(*op).set_fault_injection(true);
      EXPECT_THROW(op->verify(), VerificationError) << (paged ? "paged" : "contiguous") << " splits " << splits;
    }
  }
}

TEST_F(DecodeAttentionMisc, MultiTokenWrongOutputIsCaught) {
  // A fault in a ragged multi-token step's output fails verification.
  auto op = cuda::make_op(ctx(), steps_request(true, StepsCase{DType::bf16, 2, 8, 2, 90, 128, 4, "uniform:0.5", 16, 3}));
  EXPECT_NO_THROW(op->verify());
  access(*op).set_fault_injection(true);
  EXPECT_THROW(op->verify(), VerificationError);
}

TEST_F(DecodeAttentionMisc, MultiTokenPagedAndContiguousAgree) {
  const StepsCase c{DType::bf16, 4, 16, 4, 700, 128, 4, "lognormal:1", 16, 0};
  auto a = cuda::make_op(ctx(), steps_request(false, c));
  auto b = cuda::make_op(ctx(), steps_request(true, c));
  a->run();
  b->run();
  expect_rows_close(access(*b).output_as_float(), access(*a).output_as_float(), c.D, c.dtype, "paged vs contiguous");
}

TEST(AttentionOps, TooManyNewTokensSaysWhatIsSupported) {
  EXPECT_FALSE(cuda::decode_attention_unsupported(DType::bf16, 32, 8, 128, false, 16, 16).has_value());
  const auto why = cuda::decode_attention_unsupported(DType::bf16, 32, 8, 128, false, 16, 17);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("1 to 16"), std::string::npos) << *why;
}

// ---- prefill attention on the device ----------------------------------------------

struct PrefillCase {
  Impl impl;
  DType dtype;
  std::uint64_t B, S, Hq, Hkv, D;
};
std::ostream& operator<<(std::ostream& os, const PrefillCase& c) {
  return os << to_string(c.impl) << " " << to_string(c.dtype) << " B=" << c.B << " S=" << c.S << " Hq=" << c.Hq
            << " Hkv=" << c.Hkv << " D=" << c.D;
}

class PrefillAttention : public test::CudaContextTest, public ::testing::WithParamInterface<PrefillCase> {};

TEST_P(PrefillAttention, MatchesReference) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), prefill_request(c.impl, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D));
  EXPECT_NO_THROW(op->verify());
}

TEST_P(PrefillAttention, WrongOutputIsCaught) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), prefill_request(c.impl, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D));
  access(*op).set_fault_injection(true);
  EXPECT_THROW(op->verify(), VerificationError);
}

std::vector<PrefillCase> prefill_cases() {
  std::vector<PrefillCase> v;
  for (Impl impl : {Impl::own, Impl::blas})
    for (std::uint64_t S : {1u, 63u, 64u, 65u, 200u}) {
      v.push_back({impl, DType::bf16, 1, S, 4, 4, 128});  // GQA 1
      v.push_back({impl, DType::fp16, 2, S, 8, 2, 64});   // GQA 4, B=2
    }
  // The flash kernel's tiling: 128 query rows per CTA in 8 warps of 16 (head_dim 64,
  // 256) or 4 warps of 32 (head_dim 128), key tiles of 64 (head_dim 64, 128) or 32 (256). Prompts that are not multiples of any
  // of them, one or two CTAs along the prompt, B = 1 and odd B, every head_dim, GQA
  // 1, 4 and 8, both types.
  for (std::uint64_t S : {1u, 17u, 129u, 200u, 300u}) {
    v.push_back({Impl::own, DType::bf16, 1, S, 4, 4, 128});  // GQA 1
    v.push_back({Impl::own, DType::fp16, 3, S, 8, 2, 64});   // GQA 4, B=3
    v.push_back({Impl::own, DType::bf16, 1, S, 8, 1, 256});  // GQA 8
  }
  v.push_back({Impl::own, DType::fp16, 1, 127, 8, 1, 128});  // one row short of a CTA, GQA 8
  v.push_back({Impl::own, DType::fp16, 1, 128, 4, 1, 256});  // exactly one CTA, GQA 4
  v.push_back({Impl::own, DType::bf16, 3, 97, 4, 1, 64});    // GQA 4, B=3, a partial 32/64-key tile
  v.push_back({Impl::own, DType::fp16, 1, 255, 2, 2, 256});  // the last key tile of 32 one short
  v.push_back({Impl::own, DType::bf16, 1, 1000, 8, 1, 128});  // GQA 8, many tiles, partial last tile
  v.push_back({Impl::blas, DType::bf16, 1, 1000, 8, 1, 128});
  v.push_back({Impl::own, DType::fp16, 3, 129, 4, 2, 64});
  v.push_back({Impl::blas, DType::fp16, 1, 77, 2, 1, 256});  // the cuBLAS path takes any multiple of 8
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillAttention, ::testing::ValuesIn(prefill_cases()));

using PrefillAttentionMisc = test::CudaContextTest;

// Every output element (not only the rows verify() checks) of the flash kernel
// against the cuBLAS path.
TEST_F(PrefillAttentionMisc, FlashAndCublasAgree) {
  struct Shape {
    DType t;
    std::uint64_t B, S, Hq, Hkv, D;
  };
  for (const Shape& c : {Shape{DType::bf16, 2, 300, 8, 2, 128}, Shape{DType::fp16, 1, 200, 4, 1, 256},
                         Shape{DType::fp16, 3, 150, 2, 1, 64}}) {
    auto own = cuda::make_op(ctx(), prefill_request(Impl::own, c.t, c.B, c.S, c.Hq, c.Hkv, c.D));
    auto blas = cuda::make_op(ctx(), prefill_request(Impl::blas, c.t, c.B, c.S, c.Hq, c.Hkv, c.D));
    own->run();
    blas->run();
    const auto a = access(*own).output_as_float();
    const auto b = access(*blas).output_as_float();
    expect_rows_close(a, b, c.D, c.t,
                      "flash vs cuBLAS, " + std::string(to_string(c.t)) + " S=" + std::to_string(c.S) +
                          " D=" + std::to_string(c.D),
                      true);
  }
}

// The flash kernel's every output row against the CPU reference (verify() checks rows
// around the tiles; FlashAndCublasAgree compares every row at one prompt per head_dim).
// Prompts S = 17p + 1 for p = 0..15 (1 to 256): S mod 16 takes every value, so the prompt's
// tail ends on every row of a warp's m16 row block (both 8-row halves, odd and even rows)
// and in the first or the second 128-row CTA, with the causal diagonal crossing every
// position of the 64-key (head_dim 64, 128) or 32-key (256) tiles in every row block.
// B = 2: a row past one sequence's tail written lands on the next sequence's first rows.
struct PrefillRowsCase {
  DType dtype;
  std::uint64_t B, Hq, Hkv, D;
};
std::ostream& operator<<(std::ostream& os, const PrefillRowsCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " Hq=" << c.Hq << " Hkv=" << c.Hkv << " D=" << c.D;
}

class PrefillFlashEveryRow : public test::CudaContextTest, public ::testing::WithParamInterface<PrefillRowsCase> {};

TEST_P(PrefillFlashEveryRow, EveryRowMatchesReferenceForEveryTail) {
  const auto& c = GetParam();
  const std::size_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, D = c.D, G = Hq / Hkv;
  const std::size_t es = element_bytes(c.dtype);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  for (std::size_t p = 0; p < 16; ++p) {
    const std::size_t S = 17 * p + 1;
    SCOPED_TRACE(::testing::Message() << "S=" << S << " (S mod 16 = " << S % 16 << ")");
    const std::size_t q_elems = B * S * Hq * D, kv_elems = B * S * Hkv * D;
    cuda::DeviceBuffer q(q_elems * es), k(kv_elems * es), v(kv_elems * es), out(q_elems * es);
    cuda::fill_random(q.get(), c.dtype, q_elems, 11 + S, 1.0f, ctx().stream);
    cuda::fill_random(k.get(), c.dtype, kv_elems, 12 + S, 1.0f, ctx().stream);
    cuda::fill_random(v.get(), c.dtype, kv_elems, 13 + S, 1.0f, ctx().stream);
    PB_CUDA_CHECK(cudaMemsetAsync(out.get(), 0, out.bytes(), ctx().stream));
    cuda::PrefillAttentionParams prm;
    prm.dtype = c.dtype;
    prm.q = q.get();
    prm.k = k.get();
    prm.v = v.get();
    prm.out = out.get();
    prm.B = static_cast<int>(B);
    prm.S = static_cast<int>(S);
    prm.Hq = static_cast<int>(Hq);
    prm.Hkv = static_cast<int>(Hkv);
    prm.D = static_cast<int>(D);
    cuda::launch_prefill_flash(prm, ctx().stream);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx().stream));
    const auto qf = cuda::download_as_float(q.get(), c.dtype, q_elems, ctx().stream);
    const auto kf = cuda::download_as_float(k.get(), c.dtype, kv_elems, ctx().stream);
    const auto vf = cuda::download_as_float(v.get(), c.dtype, kv_elems, ctx().stream);
    const auto of = cuda::download_as_float(out.get(), c.dtype, q_elems, ctx().stream);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t hq = 0; hq < Hq; ++hq) {
        // Layouts [B, S, H, D]: row i of a head is S*H*D*b + (i*H + h)*D.
        auto at = [&](const std::vector<float>& x, std::size_t H, std::size_t h, std::size_t i) {
          return x.data() + ((b * S + i) * H + h) * D;
        };
        std::vector<float> got(S * D);
        std::vector<double> want(S * D);
        std::vector<float> ref(D);
        for (std::size_t i = 0; i < S; ++i) {
          reference::prefill_attention_row(
              at(qf, Hq, hq, i), i, D, scale, [&](std::size_t l) { return at(kf, Hkv, hq / G, l); },
              [&](std::size_t l) { return at(vf, Hkv, hq / G, l); }, ref.data());
          std::copy(ref.begin(), ref.end(), want.begin() + static_cast<std::ptrdiff_t>(i * D));
          const float* o = at(of, Hq, hq, i);
          std::copy(o, o + D, got.begin() + static_cast<std::ptrdiff_t>(i * D));
        }
        EXPECT_NO_THROW(reference::check_rows_close(
            got, want, D, reference::tolerance_for(c.dtype),
            "flash prefill, batch " + std::to_string(b) + ", query head " + std::to_string(hq) +
                " (rows are prompt positions, elements head_dim indices)"));
      }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, PrefillFlashEveryRow,
                         ::testing::Values(PrefillRowsCase{DType::fp16, 2, 2, 1, 64},    // 8 warps of 16 rows
                                           PrefillRowsCase{DType::bf16, 2, 2, 2, 128},   // 4 warps of 2 x 16 rows
                                           PrefillRowsCase{DType::fp16, 2, 2, 1, 256}));  // 32-key tiles

TEST_F(PrefillAttentionMisc, UnsupportedRequestsThrowUnsupported) {
  EXPECT_THROW(cuda::make_op(ctx(), prefill_request(Impl::own, DType::bf16, 1, 64, 8, 8, 96)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), prefill_request(Impl::own, DType::bf16, 1, 64, 6, 4, 128)), Unsupported);
  // Scores that cannot fit: B*Hq*S*S*4 bytes far beyond any GPU.
  try {
    cuda::make_op(ctx(), prefill_request(Impl::blas, DType::bf16, 64, 32768, 64, 8, 128));
    ADD_FAILURE() << "expected Unsupported";
  } catch (const Unsupported& e) {
    // The score matrix is the cuBLAS path's scratch, counted with the footprint.
    EXPECT_NE(std::string(e.what()).find("GiB of it scratch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace phasebench
