// Every formula of docs/design.md against values computed by hand.
#include <gtest/gtest.h>

#include "backend.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/prefill_attention.hpp"
#include "phasebench/ops/kv_append.hpp"
#include "phasebench/ops/linear.hpp"
#include "phasebench/workload.hpp"

using namespace phasebench;

TEST(Workload, LinearFlopsAndBytes) {
  // M=2, N=3, K=4, bf16: FLOPs 2*2*3*4 = 48; weights 2*3*4 = 24, input 2*2*4 = 16, output 2*2*3 = 12.
  const auto c = linear_cost({2, 3, 4}, 2, 2);
  EXPECT_EQ(c.flops, 48u);
  EXPECT_EQ(c.bytes.weights, 24u);
  EXPECT_EQ(c.bytes.activations, 16u);
  EXPECT_EQ(c.bytes.writes, 12u);
  EXPECT_EQ(c.bytes.kv_cache, 0u);
  EXPECT_EQ(c.bytes.total(), 52u);
  EXPECT_DOUBLE_EQ(c.intensity(), 48.0 / 52.0);
}

TEST(Workload, LinearMixedElementSizes) {
  // fp8 weights, bf16 in, fp32 out: 1*N*K + 2*M*K + 4*M*N.
  const auto c = linear_cost({8, 16, 32}, 1, 2, 4);
  EXPECT_EQ(c.bytes.weights, 512u);
  EXPECT_EQ(c.bytes.activations, 512u);
  EXPECT_EQ(c.bytes.writes, 512u);
  EXPECT_EQ(c.flops, 2u * 8 * 16 * 32);
}

TEST(Workload, LinearDecodeIntensityIsAboutBatch) {
  // Llama-3.1-8B down_proj at batch 1, bf16: intensity just under 1 FLOP/byte.
  const auto c = linear_cost({1, 4096, 14336}, 2, 2);
  EXPECT_EQ(c.flops, 2ull * 4096 * 14336);
  EXPECT_EQ(c.bytes.total(), 2ull * 4096 * 14336 + 2ull * 14336 + 2ull * 4096);
  EXPECT_NEAR(c.intensity(), 1.0, 1e-3);
}

TEST(Workload, DecodeAttention) {
  // B=2, Hq=32, Hkv=8, L=1000, D=128, c=a=2:
  // FLOPs 4*2*32*1000*128; KV 2*2*2*8*1000*128; q read + out write 2*2*32*128 each.
  const AttentionShape s{2, 32, 8, 1000, 128};
  const auto c = decode_attention_cost(s, 2, 2);
  EXPECT_EQ(c.flops, 4ull * 2 * 32 * 1000 * 128);
  EXPECT_EQ(c.bytes.kv_cache, 2ull * 2 * 2 * 8 * 1000 * 128);
  EXPECT_EQ(c.bytes.activations, 2ull * 2 * 32 * 128);
  EXPECT_EQ(c.bytes.writes, 2ull * 2 * 32 * 128);
  EXPECT_EQ(c.bytes.activations + c.bytes.writes, 2ull * 2 * 2 * 32 * 128);  // a*2*B*Hq*D
  // Intensity about Hq/Hkv * (2/c) = 4 FLOP/byte whatever the batch.
  EXPECT_NEAR(c.intensity(), 4.0, 0.05);
  const auto big = decode_attention_cost({256, 32, 8, 1000, 128}, 2, 2);
  EXPECT_NEAR(big.intensity(), c.intensity(), 1e-9);
  // An fp8 cache: half the KV bytes plus an fp32 scale per KV head for K and V;
  // the same FLOPs, twice the intensity.
  const auto f8 = decode_attention_cost(s, 1, 2);
  EXPECT_EQ(f8.flops, c.flops);
  EXPECT_EQ(f8.bytes.kv_cache, 2ull * 2 * 8 * 1000 * 128 + 2 * 8 * 4);
  EXPECT_NEAR(f8.intensity(), 2 * c.intensity(), 0.05);  // q and out stay 16-bit
  // The op's declared cost is the same formula.
  const auto r = decode_attention_request(s, DType::bf16, false, 16, 0, 0x5eed, true);
  EXPECT_EQ(decode_attention_kv_dtype(r), DType::fp8);
  EXPECT_EQ(r.cost().bytes.kv_cache, f8.bytes.kv_cache);
  EXPECT_EQ(r.cost().bytes.total(), f8.bytes.total());
}

TEST(Workload, PagedAttentionAddsBlockTable) {
  EXPECT_EQ(pages_per_sequence(1000, 16), 63u);  // 62.5 rounded up
  EXPECT_EQ(pages_per_sequence(1024, 16), 64u);
  const AttentionShape s{3, 32, 8, 1000, 128};
  const auto plain = decode_attention_cost(s, 2, 2);
  const auto paged = decode_attention_paged_cost(s, 2, 2, 16);
  EXPECT_EQ(paged.flops, plain.flops);
  EXPECT_EQ(paged.bytes.kv_cache, plain.bytes.kv_cache);
  EXPECT_EQ(paged.bytes.block_table, 4u * 3 * 63);
  EXPECT_EQ(paged.bytes.total(), plain.bytes.total() + 4u * 3 * 63);
  EXPECT_THROW(pages_per_sequence(10, 0), InputError);
}

TEST(Workload, PrefillAttentionCausal) {
  // B=1, Hq=32, Hkv=8, S=4096, D=128: FLOPs 2*B*Hq*D*S*(S+1); bytes a*B*S*D*(2Hq+2Hkv).
  const auto c = prefill_attention_cost({1, 32, 8, 4096, 128}, 2);
  EXPECT_EQ(c.flops, 2ull * 32 * 128 * 4096 * 4097);
  EXPECT_EQ(c.bytes.total(), 2ull * 4096 * 128 * (2 * 32 + 2 * 8));
  // S=1: one query, one key: QK and PV are 2*D FLOPs each per head.
  const auto one = prefill_attention_cost({1, 1, 1, 1, 64}, 2);
  EXPECT_EQ(one.flops, 4u * 64);
  // Intensity grows with S.
  EXPECT_GT(prefill_attention_cost({1, 32, 8, 8192, 128}, 2).intensity(), c.intensity());
}

TEST(Workload, KvAppend) {
  const auto c = kv_append_cost({4, 1, 8, 128}, 2, 2);
  EXPECT_EQ(c.flops, 0u);
  EXPECT_EQ(c.bytes.activations, 2u * 2 * 4 * 1 * 8 * 128);
  EXPECT_EQ(c.bytes.writes, 2u * 2 * 4 * 1 * 8 * 128);
  EXPECT_EQ(c.intensity(), 0.0);
  const auto p = kv_append_paged_cost({4, 3, 8, 128}, 2, 1);
  EXPECT_EQ(p.bytes.block_table, 4u * 4 * 3);
  EXPECT_EQ(p.bytes.writes, 1u * 2 * 4 * 3 * 8 * 128);
}

TEST(Workload, Elementwise) {
  const auto n = rmsnorm_cost(10, 4096, 2, 2);
  EXPECT_EQ(n.flops, 0u);
  EXPECT_EQ(n.bytes.activations, 2u * 10 * 4096);
  EXPECT_EQ(n.bytes.weights, 2u * 4096);
  EXPECT_EQ(n.bytes.writes, 2u * 10 * 4096);
  const auto r = rope_cost(10, 32, 8, 128, 2);
  EXPECT_EQ(r.bytes.activations, 2u * 10 * 40 * 128);
  EXPECT_EQ(r.bytes.writes, 2u * 10 * 40 * 128);
  const auto g = gated_activation_cost(10, 14336, 2);
  EXPECT_EQ(g.bytes.activations, 2u * 10 * 2 * 14336);
  EXPECT_EQ(g.bytes.writes, 2u * 10 * 14336);
}

TEST(Workload, KvCacheBytes) {
  // Llama-3.1-8B: 2 * 32 layers * 8 heads * 128 * 2 bytes = 131072 bytes per token.
  EXPECT_EQ(kv_cache_bytes(32, 8, 128, 1, 1, 2), 131072u);
  EXPECT_EQ(kv_cache_bytes(32, 8, 128, 8192, 16, 2), 131072ull * 8192 * 16);
}

TEST(Workload, OverflowIsAnInputError) {
  EXPECT_THROW(kv_cache_bytes(80, 8, 128, 1ull << 40, 1ull << 20, 2), InputError);
  EXPECT_THROW(linear_cost({1ull << 30, 1ull << 30, 1ull << 30}, 2, 2), InputError);
  try {
    kv_cache_bytes(80, 8, 128, 1ull << 40, 1ull << 20, 2);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("overflows 64-bit"), std::string::npos);
  }
}

TEST(Workload, CostsAddAndScale) {
  auto a = linear_cost({1, 2, 3}, 2, 2);
  const auto b = a.scaled(3);
  EXPECT_EQ(b.flops, 3 * a.flops);
  EXPECT_EQ(b.bytes.total(), 3 * a.bytes.total());
  a += b;
  EXPECT_EQ(a.flops, 4 * linear_cost({1, 2, 3}, 2, 2).flops);
}

TEST(Workload, Fp8LinearRequestWritesBf16) {
  // cuBLASLt fp8 GEMMs read fp8 X and W and write bf16 Y: the request's bytes
  // count the output at 2 bytes, the inputs at 1.
  const auto r = linear_request({8, 1024, 4096}, DType::fp8, Impl::blas);
  const auto c = r.cost();
  EXPECT_EQ(c.bytes.weights, 1024u * 4096u);
  EXPECT_EQ(c.bytes.activations, 8u * 4096u);
  EXPECT_EQ(c.bytes.writes, 8u * 1024u * 2u);
  EXPECT_EQ(linear_output_type(DType::fp8), DType::bf16);
  EXPECT_EQ(linear_output_type(DType::bf16), DType::bf16);
  EXPECT_EQ(element_bytes(linear_output_type(DType::tf32)), 4u);
}

TEST(Workload, LinearBatchAtIntensity) {
  // fp32 N = K = 1024: 2M*1024^2 / (4 (1024^2 + 2048 M)) >= 10 first at M = 21.
  EXPECT_EQ(linear_batch_at_intensity(1024, 1024, DType::fp32, 10.0), 21u);
  EXPECT_EQ(linear_batch_at_intensity(1024, 1024, DType::fp32, 0.1), 1u);
  EXPECT_FALSE(linear_batch_at_intensity(1024, 1024, DType::fp32, 1e9).has_value());  // never
  // fp8 writes bf16: the crossing is where the cost of that output says, not a
  // 1-byte output's (a layer with a large N shows the difference).
  const std::uint64_t N = 128256, K = 4096;
  const double ridge = 295.0;
  const auto m = linear_batch_at_intensity(N, K, DType::fp8, ridge);
  ASSERT_TRUE(m.has_value());
  EXPECT_GE(linear_cost({*m, N, K}, 1, 1, 2).intensity(), ridge);
  EXPECT_LT(linear_cost({*m - 1, N, K}, 1, 1, 2).intensity(), ridge);
  std::uint64_t one_byte_out = 1;  // where a 1-byte output would put it (earlier: less traffic)
  while (linear_cost({one_byte_out, N, K}, 1, 1, 1).intensity() < ridge) ++one_byte_out;
  EXPECT_LT(one_byte_out, *m);
}

TEST(OpOptions, EachOperationsOwnTypedOptions) {
  // A request carries its operation's own struct: read back as that type, its
  // defaults when none was set, and a logic_error when read as another operation's.
  auto r = decode_attention_request({2, 8, 2, 64, 64}, DType::bf16, true, 32, 3, 0x5eed, true);
  const auto& o = r.options.as<DecodeAttentionOptions>();
  EXPECT_EQ(o.page_size, 32u);
  EXPECT_EQ(o.splits, 3u);
  EXPECT_TRUE(o.kv_fp8);
  EXPECT_EQ(o.new_tokens, 1u);
  EXPECT_THROW(r.options.as<KvAppendOptions>(), std::logic_error);
  EXPECT_THROW(r.options.edit<KvAppendOptions>(), std::logic_error);
  OpRequest plain;
  EXPECT_EQ(plain.options.as<KvAppendOptions>().capacity, 0u);  // none set: the struct's defaults
  EXPECT_TRUE(plain.options.empty());
  plain.options.edit<KvAppendOptions>().capacity = 7;
  EXPECT_EQ(plain.options.as<KvAppendOptions>().capacity, 7u);
  OpRequest copy = plain;  // requests copy with their options
  EXPECT_EQ(copy.options.as<KvAppendOptions>().capacity, 7u);
  // A copy holds the same options until one of them is edited (copy on write):
  // the CUDA backend keeps a point's plan from cannot_run for the prepare of the same request.
  EXPECT_TRUE(copy.options.same(plain.options));
  copy.options.edit<KvAppendOptions>().capacity = 9;
  EXPECT_FALSE(copy.options.same(plain.options));
  EXPECT_EQ(plain.options.as<KvAppendOptions>().capacity, 7u) << "editing a copy leaves the original";
  EXPECT_EQ(copy.options.as<KvAppendOptions>().capacity, 9u);
  EXPECT_TRUE(OpRequest{}.options.same(OpRequest{}.options));
}
