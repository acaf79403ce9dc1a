// The CPU backend's kernels against the reference, through the seam.
#include <gtest/gtest.h>

#include <cmath>

#include "backend.hpp"
#include "common/numeric.hpp"
#include "reference/common.hpp"
#include "reference/decode_attention.hpp"
#include "reference/prefill_attention.hpp"
#include "cpu/simd.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/prefill_attention.hpp"
#include "phasebench/ops/kv_append.hpp"
#include "phasebench/ops/linear.hpp"
#include "phasebench/ops/linear_int4.hpp"

using namespace phasebench;

namespace {

OpRequest linear(std::uint64_t M, std::uint64_t N, std::uint64_t K, DType t, Impl impl) {
  return linear_request({M, N, K}, t, impl);
}

OpRequest attention(std::uint64_t B, std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t L, std::uint64_t D, DType t,
                    bool paged) {
  return decode_attention_request({B, Hq, Hkv, L, D}, t, paged, 16);
}

}  // namespace

TEST(CpuBackend, DescribesItself) {
  auto b = make_cpu_backend();
  EXPECT_EQ(b->device().backend, "cpu");
  EXPECT_FALSE(b->device().name.empty());
  EXPECT_EQ(b->device().slug.rfind("cpu-", 0), 0u);
  EXPECT_FALSE(b->device().spec.has_value());  // no datasheet for CPUs
}

TEST(CpuBackend, GemvMatchesReferenceForEveryBatch) {
  auto b = make_cpu_backend();
  for (DType t : {DType::fp32, DType::bf16, DType::fp16})
    for (std::uint64_t M = 1; M <= 16; ++M) {
      auto op = b->prepare(linear(M, 67, 136, t, Impl::own));  // odd N, K not a multiple of 16
      EXPECT_NO_THROW(op->verify()) << to_string(t) << " M=" << M;
    }
}

TEST(CpuBackend, Int4GemvMatchesReference) {
  // Tails: odd N; K of 3 groups (not a multiple of 128 or 256 for G = 32); groups
  // of 32 (the scalar widening path's edge) to 256; every batch.
  auto b = make_cpu_backend();
  for (std::uint64_t G : {32u, 64u, 128u, 256u})
    for (std::uint64_t M : {1u, 2u, 3u, 5u, 8u, 16u}) {
      auto op = b->prepare(linear_int4_request({M, 67, 3 * G}, G, Impl::own));
      EXPECT_NO_THROW(op->verify()) << "G=" << G << " M=" << M;
    }
  // The weights' bytes are the packed layout's, exactly WeightFormat int4's.
  const Int4Layout l{4096, 14336, 128};
  EXPECT_EQ(l.total_bytes(), int4_weight_format(128).bytes(4096, 14336));
  EXPECT_EQ(linear_int4_request({1, 4096, 14336}, 128, Impl::own).cost().bytes.weights, l.total_bytes());
  // The analytical model's --weight-dtype int4 costs the same bytes as this benchmark's layout.
  EXPECT_EQ(WeightFormat::parse("int4").bytes(4096, 14336), l.total_bytes());
  const Int4Layout odd{3, 96, 32};  // 9 zero points: 5 bytes
  EXPECT_EQ(odd.zero_bytes(), 5u);
  EXPECT_EQ(odd.total_bytes(), int4_weight_format(32).bytes(3, 96));
  // Bad shapes: a group that does not divide K, a group size not offered; batch over 16.
  EXPECT_THROW(linear_int4_request({1, 64, 200}, 128, Impl::own), InputError);
  EXPECT_THROW(linear_int4_request({1, 64, 384}, 96, Impl::own), InputError);
  EXPECT_TRUE(b->cannot_run(linear_int4_request({17, 64, 128}, 128, Impl::own)).has_value());
}

TEST(CpuBackend, BlasLinearMatchesReference) {
  auto b = make_cpu_backend();
  for (auto s : std::vector<LinearShape>{{1, 33, 17}, {64, 128, 256}, {100, 300, 1000}}) {
    auto op = b->prepare(linear(s.M, s.N, s.K, DType::fp32, Impl::blas));
    EXPECT_NO_THROW(op->verify());
  }
}

TEST(CpuBackend, OwnGemvAndBlasAgree) {
  auto b = make_cpu_backend();
  auto own = b->prepare(linear(8, 96, 512, DType::fp32, Impl::own));
  auto blas = b->prepare(linear(8, 96, 512, DType::fp32, Impl::blas));
  own->run();
  blas->run();
  const auto x = own->output_values(), y = blas->output_values();
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-3 * (1 + std::abs(y[i])));
}

TEST(CpuBackend, DecodeAttentionContiguousAndPaged) {
  auto b = make_cpu_backend();
  struct Case {
    std::uint64_t B, Hq, Hkv, L, D;
  };
  // Query heads per KV head 1, 4, 8, 7 (4+2+1 tiles), 2 and 3; head_dim 64, 128,
  // 256 and 96 (Phi-3); contexts that are not multiples of the 16-token block.
  // head_dim 72 takes the vector scores and the scalar P*V, 20 the scalar loops
  // of both passes; a single cached token and a context shorter than a block.
  for (auto c : std::vector<Case>{{1, 4, 4, 17, 64},
                                  {3, 32, 8, 1000, 128},
                                  {2, 8, 1, 33, 256},
                                  {2, 28, 4, 77, 128},
                                  {1, 16, 8, 300, 96},
                                  {2, 8, 2, 40, 72},
                                  {1, 6, 2, 19, 20},
                                  {3, 32, 8, 1, 128},
                                  {1, 32, 8, 5, 128}})
    for (DType t : {DType::fp32, DType::bf16, DType::fp16})
      for (bool paged : {false, true}) {
        auto op = b->prepare(attention(c.B, c.Hq, c.Hkv, c.L, c.D, t, paged));
        EXPECT_NO_THROW(op->verify()) << "L=" << c.L << " paged=" << paged << " " << to_string(t);
      }
}

TEST(CpuBackend, PagedAttentionWithOtherPageSizes) {
  // Blocks of 16 tokens are cut at page ends: pages of 48 (three blocks) and of
  // 8 (half a block) walk the same pool correctly, with a partial last page.
  auto b = make_cpu_backend();
  for (std::uint64_t page : {48u, 8u})
    for (DType t : {DType::fp32, DType::bf16}) {
      auto r = attention(3, 32, 8, 1001, 128, t, true);
      r.options.edit<DecodeAttentionOptions>().page_size = page;
      auto op = b->prepare(r);
      EXPECT_NO_THROW(op->verify()) << "page " << page << " " << to_string(t);
    }
}

TEST(CpuBackend, PagedAndContiguousGiveTheSameAnswer) {
  auto b = make_cpu_backend();
  auto c = b->prepare(attention(2, 16, 4, 1000, 128, DType::bf16, false));
  auto p = b->prepare(attention(2, 16, 4, 1000, 128, DType::bf16, true));
  c->run();
  p->run();
  EXPECT_EQ(c->output_values(), p->output_values());
}

TEST(CpuBackend, AttentionOverAnFp8Cache) {
  // e4m3 K and V with a scale per KV head (reference::kv_head_scales), fp32 and
  // bf16 queries, the shapes of the 16-bit test: group tails, odd head_dims,
  // contexts off the 16-token block, one token; contiguous and paged.
  struct Case {
    std::uint64_t B, Hq, Hkv, L, D;
  };
  auto b = make_cpu_backend();
  for (auto c : std::vector<Case>{{1, 4, 4, 17, 64}, {3, 32, 8, 1000, 128}, {2, 28, 4, 77, 128}, {1, 16, 8, 300, 96},
                                  {2, 8, 2, 40, 72}, {1, 6, 2, 19, 20}, {3, 32, 8, 1, 128}})
    for (DType t : {DType::fp32, DType::bf16})
      for (bool paged : {false, true}) {
        auto op = b->prepare(decode_attention_request({c.B, c.Hq, c.Hkv, c.L, c.D}, t, paged, 16, 0, 0x5eed, true));
        EXPECT_NO_THROW(op->verify()) << "L=" << c.L << " D=" << c.D << " paged=" << paged << " " << to_string(t);
      }
  // Paged and contiguous read the same values.
  auto c = b->prepare(decode_attention_request({2, 16, 4, 1000, 128}, DType::bf16, false, 16, 0, 0x5eed, true));
  auto p = b->prepare(decode_attention_request({2, 16, 4, 1000, 128}, DType::bf16, true, 16, 0, 0x5eed, true));
  c->run();
  p->run();
  EXPECT_EQ(c->output_values(), p->output_values());
  // fp16 queries over an fp8 cache are refused with the reason (the fp16 path is plain loops).
  const auto r16 = decode_attention_request({1, 8, 2, 64, 128}, DType::fp16, false, 16, 0, 0x5eed, true);
  EXPECT_FALSE(b->applies(r16));
  ASSERT_TRUE(b->cannot_run(r16).has_value());
  EXPECT_NE(b->cannot_run(r16)->find("fp32 or bf16 queries"), std::string::npos);
}

TEST(CpuBackend, KvAppend) {
  auto b = make_cpu_backend();
  // Rows of 256 and 512 bytes and 96 (streaming stores), 40 bytes (memcpy);
  // batch 64 appends enough to run on all threads.
  struct Case {
    DType t;
    std::uint64_t B, D;
  };
  for (const Case c : {Case{DType::bf16, 3, 128}, Case{DType::fp32, 3, 128}, Case{DType::fp32, 3, 24},
                       Case{DType::bf16, 3, 20}, Case{DType::fp32, 64, 128}})
    for (bool paged : {false, true})
      for (std::uint64_t S : {1u, 5u}) {
        // A capacity of 1000: not a multiple of the page size.
        auto op = b->prepare(kv_append_request({c.B, S, 8, c.D}, c.t, 1000, paged, 16));
        EXPECT_NO_THROW(op->verify()) << to_string(c.t) << " B=" << c.B << " D=" << c.D << " S=" << S
                                      << (paged ? " paged" : "");
      }
}

TEST(CpuBackend, RefusesWhatItCannotRun) {
  auto b = make_cpu_backend();
  EXPECT_TRUE(b->cannot_run(linear(17, 64, 64, DType::fp32, Impl::own)).has_value());  // GEMV is batch <= 16
  auto huge = linear(1, 1ull << 20, 1ull << 20, DType::fp32, Impl::blas);
  const auto why = b->cannot_run(huge);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("GiB"), std::string::npos);
  EXPECT_THROW(b->prepare(huge), Unsupported);
  EXPECT_FALSE(b->implements(kPrefillAttention, DType::bf16, Impl::own));  // fp32 only
  EXPECT_FALSE(b->implements(kPrefillAttention, DType::fp32, Impl::blas));
}

OpRequest prefill(std::uint64_t B, std::uint64_t S, std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t D) {
  return prefill_attention_request({B, Hq, Hkv, S, D}, DType::fp32, Impl::own);
}

TEST(CpuBackend, PrefillAttentionMatchesReference) {
  // Query heads per KV head 4, 1 and 7; prompts shorter than a 64-row block, a
  // multiple of it, and one with a partial last block.
  auto b = make_cpu_backend();
  ASSERT_TRUE(b->implements(kPrefillAttention, DType::fp32, Impl::own));
  struct Case {
    std::uint64_t B, S, Hq, Hkv, D;
  };
  // ... and a one-token prompt, head_dim 24 (vector scores, scalar P*V) and 20 (scalar both).
  for (auto c : std::vector<Case>{
           {1, 40, 8, 2, 64}, {2, 128, 4, 4, 128}, {1, 200, 28, 4, 128}, {1, 1, 2, 1, 64}, {1, 33, 4, 2, 24}, {2, 17, 3, 1, 20}}) {
    auto op = b->prepare(prefill(c.B, c.S, c.Hq, c.Hkv, c.D));
    EXPECT_NO_THROW(op->verify()) << "S=" << c.S << " Hq=" << c.Hq << " Hkv=" << c.Hkv;
  }
  EXPECT_TRUE(b->cannot_run(prefill(1, 64, 6, 4, 64)).has_value());  // 6 heads over 4 KV heads
}

TEST(CpuBackend, TimingReturnsPositiveSamples) {
  auto b = make_cpu_backend();
  auto op = b->prepare(linear(4, 256, 256, DType::fp32, Impl::own));
  TimingOptions o;
  o.range_name = "test";
  for (bool cold : {true, false}) {
    o.cold_cache = cold;
    const auto s = b->time(*op, o);
    EXPECT_GT(s.seconds, 0.0);
    EXPECT_EQ(s.runs, 1u);
  }
}

TEST(Reference, CheckCloseNamesTheFirstMismatch) {
  std::vector<float> got{1.0f, 2.0f, 3.5f};
  std::vector<double> want{1.0, 2.0, 3.0};
  try {
    reference::check_close(got, want, reference::tolerance_for(DType::bf16), "op");
    FAIL();
  } catch (const VerificationError& e) {
    EXPECT_NE(std::string(e.what()).find("first at 2"), std::string::npos);
  }
  std::vector<float> nan{1.0f, 2.0f, std::nanf("")};
  EXPECT_THROW(reference::check_close(nan, want, reference::tolerance_for(DType::fp32), "op"), VerificationError);
  EXPECT_NO_THROW(reference::check_close({1.0f, 2.0f, 3.0f}, want, reference::tolerance_for(DType::fp32), "op"));
}

TEST(Reference, PrefillRowsToCheckSitAroundTheTiles) {
  using R = std::vector<std::uint64_t>;
  EXPECT_EQ(reference::prefill_rows_to_check(200, 64), (R{0, 1, 63, 64, 65, 100, 192, 193, 198, 199}));
  EXPECT_EQ(reference::prefill_rows_to_check(40, 32), (R{0, 1, 20, 31, 32, 33, 38, 39}));
  EXPECT_EQ(reference::prefill_rows_to_check(1, 32), (R{0}));
}

TEST(Reference, ConversionsRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.333f, 65504.0f, 1e-6f}) {
    EXPECT_NEAR(reference::round_to(v, DType::bf16), v, std::abs(v) * 0.004 + 1e-30);
    EXPECT_NEAR(reference::round_to(v, DType::fp16), v, std::abs(v) * 0.001 + 6e-8);
  }
  EXPECT_EQ(reference::round_to(1.0f, DType::fp8), 1.0f);
  EXPECT_EQ(reference::round_to(448.0f, DType::fp8), 448.0f);
}

// The fp8 e4m3 encoder (round to nearest even, saturating) against an exhaustive
// nearest search over the 127 magnitudes, on every fp8 value, every midpoint
// between neighbours and a million random floats across the range.
TEST(Reference, Fp8EncoderIsTheNearestEvenCode) {
  auto exhaustive = [](float f) {
    const float a = std::abs(f);
    std::uint8_t best = 0;
    float best_err = 3.4e38f;
    for (std::uint8_t m = 0; m < 0x7f; ++m) {
      const float err = std::abs(numeric::fp8e4m3_to_float(m) - a);
      if (err < best_err || (err == best_err && (m & 1u) == 0)) {
        best_err = err;
        best = m;
      }
    }
    return static_cast<std::uint8_t>((std::signbit(f) ? 0x80u : 0u) | best);
  };
  std::vector<float> values;
  for (std::uint8_t m = 0; m < 0x7e; ++m) {  // 0x7f is NaN: no midpoint above 448
    const float v = numeric::fp8e4m3_to_float(m), next = numeric::fp8e4m3_to_float(static_cast<std::uint8_t>(m + 1));
    values.insert(values.end(), {v, -v, 0.5f * (v + next), std::nextafter(0.5f * (v + next), 0.f)});
  }
  for (std::uint64_t i = 0; i < 1000000; ++i)
    values.push_back(numeric::random_value(77, i, 1.0f) * std::ldexp(1.0f, static_cast<int>(i % 30) - 15));
  values.insert(values.end(), {0.f, -0.f, 448.f, 463.9f, 464.f, 1e9f, 1e-30f});
  for (float f : values) ASSERT_EQ(numeric::float_to_fp8e4m3(f), exhaustive(f)) << f;
  // e4m3 back to float through the SIMD decode the CPU kernels use agrees too.
  for (std::uint8_t m = 0; m < 0x7f; ++m)
    EXPECT_EQ(cpu::simd::scalar(cpu::simd::Fp8E4M3{m}), numeric::fp8e4m3_to_float(m)) << int(m);
}

// The attention check must catch a softmax that misses one token of a long
// context, and an all-zero output, yet pass the right answer rounded to the
// storage type: atol scales with each row's RMS (about 1/sqrt(L) here).
TEST(Reference, RowCheckCatchesOneMissingTokenAtLongContext) {
  const std::size_t L = 4096, D = 128;
  std::vector<float> q(D), k(L * D), v(L * D);
  for (std::size_t i = 0; i < D; ++i) q[i] = numeric::random_value(1, i, 1.0f);
  for (std::size_t i = 0; i < L * D; ++i) {
    k[i] = numeric::random_value(2, i, 1.0f);
    v[i] = numeric::random_value(3, i, 1.0f);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto head = [&](std::size_t tokens) {
    std::vector<float> o(D);
    reference::decode_attention_head(
        q.data(), tokens, D, scale, [&](std::size_t l) { return k.data() + l * D; },
        [&](std::size_t l) { return v.data() + l * D; }, o.data());
    return o;
  };
  const auto full = head(L), missing = head(L - 1);
  const std::vector<double> want(full.begin(), full.end());
  for (DType t : {DType::fp32, DType::bf16, DType::fp16}) {
    auto rounded = [&](std::vector<float> x) {
      for (float& e : x) e = reference::round_to(e, t);
      return x;
    };
    const auto tol = reference::tolerance_for(t);
    EXPECT_NO_THROW(reference::check_rows_close(rounded(full), want, D, tol, "right")) << to_string(t);
    EXPECT_THROW(reference::check_rows_close(rounded(missing), want, D, tol, "missing"), VerificationError)
        << to_string(t);
    EXPECT_THROW(reference::check_rows_close(std::vector<float>(D, 0.0f), want, D, tol, "zeros"), VerificationError)
        << to_string(t);
  }
}

// The same for prefill attention: the last row of a 4096-token prompt computed
// without one 64-key tile (what a flash kernel that skips a tile would give)
// fails the row check, where bf16's fixed atol accepted it.
TEST(Reference, RowCheckCatchesADroppedKeyTileInPrefill) {
  const std::size_t S = 4096, D = 128, row = S - 1, tile = 64;
  std::vector<float> q(D), k(S * D), v(S * D);
  for (std::size_t i = 0; i < D; ++i) q[i] = numeric::random_value(4, i, 1.0f);
  for (std::size_t i = 0; i < S * D; ++i) {
    k[i] = numeric::random_value(5, i, 1.0f);
    v[i] = numeric::random_value(6, i, 1.0f);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> full(D), dropped(D);
  reference::prefill_attention_row(
      q.data(), row, D, scale, [&](std::size_t l) { return k.data() + l * D; },
      [&](std::size_t l) { return v.data() + l * D; }, full.data());
  // Keys 0..row without [tile, 2*tile).
  auto skip = [&](std::size_t l) { return l < tile ? l : l + tile; };
  reference::decode_attention_head(
      q.data(), row + 1 - tile, D, scale, [&](std::size_t l) { return k.data() + skip(l) * D; },
      [&](std::size_t l) { return v.data() + skip(l) * D; }, dropped.data());
  const std::vector<double> want(full.begin(), full.end());
  for (DType t : {DType::bf16, DType::fp16}) {
    auto rounded = [&](std::vector<float> x) {
      for (float& e : x) e = reference::round_to(e, t);
      return x;
    };
    const auto tol = reference::tolerance_for(t);
    EXPECT_NO_THROW(reference::check_rows_close(rounded(full), want, D, tol, "right")) << to_string(t);
    EXPECT_THROW(reference::check_rows_close(rounded(dropped), want, D, tol, "dropped tile"), VerificationError)
        << to_string(t);
    if (t == DType::bf16) {  // the hole the row check closes: bf16's fixed atol (8e-3) is wider than these outputs
      EXPECT_NO_THROW(reference::check_close(rounded(dropped), want, tol, "dropped tile, fixed atol"))
          << "the fixed tolerance this test documents no longer accepts a dropped tile";
    }
  }
}
