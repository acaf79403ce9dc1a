// Shipped configs: parameter counts against the published ones, derived
// shapes, and every kind of bad config.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "phasebench/error.hpp"
#include "phasebench/model.hpp"
#include "phasebench/workload.hpp"

using namespace phasebench;

namespace {

// Whether `count` is a published figure such as "8.2B" or "46.7B" to as many
// decimals as written, rounded or cut (Qwen writes 3.35B as "3.3B").
bool rounds_to(std::uint64_t count, const std::string& published) {
  if (published.empty() || published.back() != 'B') return false;
  const std::string num = published.substr(0, published.size() - 1);
  const auto dot = num.find('.');
  const int decimals = dot == std::string::npos ? 0 : static_cast<int>(num.size() - dot - 1);
  const double scale = std::pow(10.0, decimals), x = static_cast<double>(count) / 1e9 * scale;
  const auto want = std::llround(std::stod(num) * scale);
  return std::llround(x) == want || static_cast<long long>(std::floor(x)) == want;
}

}  // namespace

TEST(Models, ParameterCountsMatchPublishedCounts) {
  const auto shipped = shipped_models();
  ASSERT_GE(shipped.size(), 10u);
  for (const auto& s : shipped) {
    const auto m = load_model(s.name);
    if (s.published_params)
      EXPECT_EQ(parameter_count(m), s.published_params) << s.name;
    else
      EXPECT_TRUE(rounds_to(parameter_count(m), s.published)) << s.name << ": " << parameter_count(m) << " vs " << s.published;
    if (!s.published_active.empty()) {
      const auto active = active_parameter_count(m) - (s.active_without_input_embedding ? m.vocab * m.hidden : 0);
      EXPECT_TRUE(rounds_to(active, s.published_active)) << s.name << ": " << active << " vs " << s.published_active;
    }
  }
  EXPECT_FALSE(rounds_to(8030261248ull, "8.2B"));  // the check can fail
}

TEST(Models, ExactCountsOfThe2026Families) {
  // The formulas of docs/model-research figures: per family, weights + biases.
  EXPECT_EQ(parameter_count(load_model("qwen3-8b")), 8190735360ull);  // q/k norms included
  const auto q = load_model("qwen3-30b-a3b");
  EXPECT_EQ(parameter_count(q), 30532122624ull);
  EXPECT_EQ(active_parameter_count(q), 3353032704ull);
  const auto x = load_model("mixtral-8x7b");
  EXPECT_EQ(parameter_count(x), 46702792704ull);
  EXPECT_EQ(active_parameter_count(x), 12879925248ull);
  const auto g = load_model("gpt-oss-20b");
  EXPECT_EQ(parameter_count(g), 20914757184ull);  // biases, sinks, router bias
  EXPECT_EQ(active_parameter_count(g) - g.vocab * g.hidden, 3608307264ull);
  // MXFP4 experts (17 bytes per 32 weights), everything else bf16: the 12.82 GiB checkpoint.
  ASSERT_TRUE(g.quantization.has_value());
  Precision p = Precision::from(DType::bf16, DType::bf16);
  p.linear = *g.quantization;
  p.plain_modules = g.not_quantized;
  EXPECT_EQ(weight_bytes(g, p), 13761264768ull);
  // Its attention reads the 64 sink logits of the layer (bf16).
  for (const auto& op : step_ops(g, {Phase::decode, 1, 1, 1024}, p))
    if (op.name == "attention") {
      EXPECT_EQ(op.cost.bytes.weights, 64u * 2) << op.variant;
    }
  // Gemma 3: the 4B's sparse text_config takes Gemma3TextConfig's defaults; tied.
  const auto g4 = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/gemma-3-4b-it.json");
  EXPECT_EQ(g4.heads, 8u);
  EXPECT_EQ(g4.kv_heads, 4u);
  EXPECT_EQ(g4.head_dim, 256u);
  EXPECT_EQ(g4.vocab, 262208u);
  EXPECT_EQ(parameter_count(g4), 3880263168ull);  // the text model (the vision tower is not counted)
  const auto g1 = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/gemma-3-1b-it.json");
  EXPECT_EQ(parameter_count(g1), 999885952ull);
}

TEST(Models, SlidingWindowsCapTheKvCacheAndAttention) {
  // Gemma 2 9B: 21 of 42 layers slide over 4096 tokens: 2.114 GB at 8k, not 2.819.
  const auto g = load_model("gemma-2-9b");
  EXPECT_EQ(std::count(g.windows.begin(), g.windows.end(), 4096u), 21);
  EXPECT_EQ(g.windows[0], 4096u);  // even layers slide
  EXPECT_EQ(g.windows[1], 0u);
  EXPECT_EQ(kv_cache_bytes(g, 8192, 1, 2), 21ull * 8192 * 8192 + 21ull * 8192 * 4096);
  EXPECT_EQ(kv_cache_bytes(g, 4096, 1, 2), 42ull * 8192 * 4096);  // no window is full yet
  // Mistral 7B v0.1: every layer slides over 4096: half the full-attention KV at 8k.
  const auto m = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/mistral-7b-v0.1.json");
  EXPECT_EQ(kv_cache_bytes(m, 8192, 1, 2), kv_cache_bytes(32, 8, 128, 4096, 1, 2));
  // Gemma 3 1B: global layers 5, 11, 17, 23; the rest slide over 512.
  const auto g1 = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/gemma-3-1b-it.json");
  for (std::uint64_t i = 0; i < g1.layers; ++i) EXPECT_EQ(g1.windows[i], (i + 1) % 6 ? 512u : 0u) << i;
  // gpt-oss: layer_types as listed.
  const auto o = load_model("gpt-oss-20b");
  EXPECT_EQ(o.windows[0], 128u);
  EXPECT_EQ(o.windows[1], 0u);
  // Decode attention reads at most the window; prefill attention sees at most it.
  const auto p = Precision::from(DType::bf16, DType::bf16);
  std::uint64_t kv_read = 0, flops_prefill = 0;
  for (const auto& op : step_ops(g, {Phase::decode, 1, 1, 8192}, p)) kv_read += op.cost.bytes.kv_cache * op.count;
  EXPECT_EQ(kv_read, kv_cache_bytes(g, 8192, 1, 2));
  for (const auto& op : step_ops(g, {Phase::prefill, 1, 8192, 0}, p))
    if (op.kind == "prefill_attention") flops_prefill += op.cost.flops * op.count;
  EXPECT_EQ(flops_prefill, 4ull * 16 * 256 * (21 * causal_pairs(8192, 4096) + 21 * causal_pairs(8192, 0)));
}

TEST(Models, DeepSeekLatentAttention) {
  // Published: V2-Lite 15.7B total, 2.4B active; V3 671B, 37B (both active
  // counts without the input embedding; V3's MTP layer is not in the 671B).
  const auto v2 = load_model("deepseek-v2-lite");
  EXPECT_EQ(parameter_count(v2), 15706484224ull);
  EXPECT_EQ(active_parameter_count(v2) - v2.vocab * v2.hidden, 2451435008ull);
  EXPECT_EQ(v2.moe_layers[0], false);  // first_k_dense_replace 1
  EXPECT_EQ(std::count(v2.moe_layers.begin(), v2.moe_layers.end(), true), 26);
  EXPECT_EQ(v2.shared_intermediate, 2816u);  // 2 shared experts of 1408 as one MLP
  const auto v3 = load_model("deepseek-v3");
  EXPECT_EQ(parameter_count(v3), 671026419200ull);
  EXPECT_EQ(active_parameter_count(v3) - v3.vocab * v3.hidden, 36625618432ull);
  EXPECT_EQ(v3.mtp_layers, 1u);
  // fp8 e4m3 in 128x128 blocks with an fp32 scale each, the rest bf16, the
  // correction bias fp32: the main model's tensors summed from the checkpoint's layout.
  ASSERT_TRUE(v3.quantization.has_value());
  Precision p8 = Precision::from(DType::bf16, DType::bf16);
  p8.linear = *v3.quantization;
  p8.plain_modules = v3.not_quantized;
  EXPECT_EQ(weight_bytes(v3, p8), 673150611808ull);
  // The latent cache: (512 + 64) elements per token and layer, not 2 * 16 heads * 192.
  EXPECT_EQ(kv_cache_bytes(v2, 8192, 1, 2), 27ull * 576 * 8192 * 2);
  EXPECT_EQ(kv_bytes_per_token(v3, 2), 61u * 576 * 2);
  // Decode, absorbed: the latent cache read once for all heads; W_UK and W_UV
  // together are kv_b_proj.
  const auto p = Precision::from(DType::bf16, DType::bf16);
  std::uint64_t kv = 0, attn_flops = 0, absorbed = 0;
  for (const auto& op : step_ops(v2, {Phase::decode, 2, 1, 4096}, p)) {
    kv += op.cost.bytes.kv_cache * op.count;
    if (op.name == "attention") {
      EXPECT_EQ(op.variant, "MLA, absorbed");
      attn_flops = op.cost.flops;
    }
    if (op.kind == "batched_linear") absorbed += op.cost.bytes.weights;
  }
  EXPECT_EQ(kv, kv_cache_bytes(v2, 4096, 2, 2));
  EXPECT_EQ(attn_flops, 2ull * 2 * 16 * 4096 * (2 * 512 + 64));
  EXPECT_EQ(absorbed, 2ull * 16 * (128 + 128) * 512);
  // Prefill, expanded: MHA with q/k dim 192 and v dim 128 over the causal pairs.
  for (const auto& op : step_ops(v2, {Phase::prefill, 1, 1024, 0}, p))
    if (op.name == "attention") {
      EXPECT_EQ(op.variant, "MLA, expanded");
      EXPECT_EQ(op.cost.flops, 2ull * 16 * (192 + 128) * (1024ull * 1025 / 2));
    }
}

TEST(Models, Llama70bKvCacheAsTheFormulaGivesIt) {
  // A widely read post says "Llama 3 70B, batch 16, 8k context: 22.5 GB of KV";
  // its own formula 2 * layers * Hkv * D * context * batch * bytes gives 42.95 GB
  // at 2-byte KV (80 layers, 8 KV heads of 128) and 21.47 GB at fp8.
  const auto m = load_model("llama-3.1-70b");
  EXPECT_EQ(kv_cache_bytes(m, 8192, 16, 2), 2ull * 80 * 8 * 128 * 8192 * 16 * 2);
  EXPECT_EQ(kv_cache_bytes(m, 8192, 16, 2), 42949672960ull);
  EXPECT_EQ(kv_cache_bytes(m, 8192, 16, 1), 21474836480ull);
}

TEST(Models, TiedEmbeddingsDefaultAsTransformersHasThem) {
  // Without the key: llama, mistral, qwen2/3, phi3 untie (transformers' default
  // False); the Gemma families tie.
  const char* llama = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})";
  EXPECT_FALSE(parse_model_config(llama, "t").tie_word_embeddings);
  std::string gemma = llama;
  gemma.replace(gemma.find("llama"), 5, "gemma");
  EXPECT_TRUE(parse_model_config(gemma, "t").tie_word_embeddings);
}

TEST(Models, QuantizedWeightsFromTheConfig) {
  // An AWQ int4 Llama-3.1-8B (AutoAWQ's form): 4 bits + an fp16 scale and a 4-bit
  // zero per 128 weights; lm_head, embedding and norms in fp16: 5.73 GB, as its shards.
  const auto m = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/llama-3.1-8b-awq.json");
  ASSERT_TRUE(m.quantization.has_value());
  EXPECT_EQ(m.quantization->bits, 4u);
  EXPECT_EQ(m.quantization->group, 128u);
  Precision p = Precision::from(DType::bf16, DType::bf16);
  p.linear = *m.quantization;
  p.plain_modules = m.not_quantized;
  EXPECT_EQ(weight_bytes(m, p), 5727854592ull);
  // The same from --weight-dtype int4 on the plain config.
  Precision q = Precision::from(DType::bf16, DType::bf16);
  q.linear = WeightFormat::parse("int4");
  q.plain_modules = {"lm_head"};
  EXPECT_EQ(weight_bytes(load_model("llama-3.1-8b"), q), 5727854592ull);
  // Sizes below a byte are exact: 33 weights of 4 bits and one 8-bit scale per 32 = 16.5 + 2 bytes, rounded up once.
  EXPECT_EQ(WeightFormat::parse("mxfp4").bytes(1, 33), 19u);
  EXPECT_EQ(WeightFormat::parse("mxfp4").bytes(2, 32), 34u);
}

TEST(Models, MixtureOfExpertsTouchesTheExpectedExperts) {
  EXPECT_DOUBLE_EQ(expected_experts_touched(8, 2, 1), 2.0);
  EXPECT_NEAR(expected_experts_touched(8, 2, 64), 8.0 * (1 - std::pow(0.75, 64)), 1e-12);
  EXPECT_NEAR(expected_experts_touched(128, 8, 1), 8.0, 1e-12);
  // Mixtral decode: a sequence reads 2 of 8 experts per layer; a batch of 64 reads nearly all.
  const auto x = load_model("mixtral-8x7b");
  const auto p = Precision::from(DType::bf16, DType::bf16);
  auto expert_bytes = [&](std::uint64_t B) {
    std::uint64_t b = 0;
    for (const auto& op : step_ops(x, {Phase::decode, B, 1, 1024}, p))
      if (op.kind == "grouped_linear") b += op.cost.bytes.weights * op.count;
    return b;
  };
  const std::uint64_t one_expert_layer = 2ull * 3 * 4096 * 14336;
  EXPECT_EQ(expert_bytes(1), 32 * 2 * one_expert_layer);
  EXPECT_NEAR(static_cast<double>(expert_bytes(64)), 32 * 8 * (1 - std::pow(0.75, 64)) * one_expert_layer, 64.0);
  // Prefill FLOPs: the active experts only.
  std::uint64_t f = 0;
  for (const auto& op : step_ops(x, {Phase::prefill, 1, 100, 0}, p))
    if (op.kind == "grouped_linear") f += op.cost.flops * op.count;
  EXPECT_EQ(f, 32ull * 2 * 100 * 2 * 3 * 4096 * 14336);
}

TEST(Models, SkewedRoutingTouchesFewerExperts) {
  // One token always picks exactly k, however skewed (the chances sum to k).
  for (double s : {0.0, 0.5, 1.0, 3.0}) EXPECT_NEAR(expected_experts_touched(128, 8, 1, s), 8.0, 1e-9) << s;
  // Many tokens: uniform reads nearly all; a skew leaves the unpopular experts
  // out, and a steep one reads little beyond the k favourites (16 tokens: about
  // 10.4 of 128, the next-ranked ones still picked now and then).
  const double uniform = expected_experts_touched(128, 8, 64), zipf1 = expected_experts_touched(128, 8, 64, 1.0);
  EXPECT_NEAR(uniform, 128 * (1 - std::pow(1 - 8.0 / 128, 64)), 1e-9);
  EXPECT_LT(zipf1, uniform - 10);
  EXPECT_GT(zipf1, 8.0);
  EXPECT_LT(expected_experts_touched(128, 8, 16, 10.0), 11.0);
  // Two experts of which one gets the cap: the other gets the rest (pi = 1, 1).
  EXPECT_NEAR(expected_experts_touched(2, 2, 5, 2.0), 2.0, 1e-12);
  EXPECT_EQ(parse_routing("uniform"), Routing{});
  EXPECT_EQ(parse_routing("zipf:1.5"), (Routing{Routing::Kind::zipf, 1.5}));
  EXPECT_EQ(parse_routing("hot:0.5"), (Routing{Routing::Kind::hot, 0.5}));
  EXPECT_EQ(parse_routing("hot:0.5").text(), "hot:0.5");
  for (const char* bad : {"zipf", "zipf:", "zipf:-1", "zipf:1x", "skewed", "zipf:99", "hot:", "hot:1.5", "hot:-0.1",
                          "hot:nan", "zipf:inf"})
    EXPECT_THROW(parse_routing(bad), InputError) << bad;
  // The decode step reads fewer expert bytes under a skew.
  auto q = load_model("qwen3-30b-a3b");
  const auto p = Precision::from(DType::bf16, DType::bf16);
  auto expert_bytes = [&] {
    std::uint64_t b = 0;
    for (const auto& op : step_ops(q, {Phase::decode, 16, 1, 1024}, p))
      if (op.kind == "grouped_linear") b += op.cost.bytes.weights * op.count;
    return b;
  };
  const auto even = expert_bytes();
  q.routing = Routing{Routing::Kind::zipf, 1.0};
  EXPECT_LT(expert_bytes(), even * 3 / 4);
}

TEST(Models, ExactCountsOfTheLlamas) {
  EXPECT_EQ(parameter_count(load_model("llama-3.1-8b")), 8030261248ull);
  EXPECT_EQ(parameter_count(load_model("llama-3.1-70b")), 70553706496ull);
}

TEST(Models, DerivedShapes) {
  const auto m = load_model("llama-3.1-8b");
  EXPECT_EQ(m.hidden, 4096u);
  EXPECT_EQ(m.kv_heads, 8u);
  EXPECT_EQ(m.head_dim, 128u);  // no head_dim key: hidden / heads
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_EQ(kv_bytes_per_token(m, 2), 131072u);
  const auto g = load_model("gemma-2-9b");
  EXPECT_EQ(g.head_dim, 256u);  // explicit head_dim, not 3584/16
  EXPECT_EQ(g.norms_per_layer, 4);
  EXPECT_TRUE(g.tie_word_embeddings);
  const auto q = load_model("qwen2.5-7b");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
  EXPECT_TRUE(load_model("phi-3-mini-4k").fused_qkv_checkpoint);
}

TEST(Models, LinearOpsOfAStep) {
  const auto m = load_model("llama-3.1-8b");
  const auto p = Precision::from(DType::bf16, DType::bf16);
  const auto lin = linear_ops(m, 8, p);
  ASSERT_EQ(lin.size(), 5u);
  EXPECT_EQ(lin[0].name, "qkv_proj");
  EXPECT_EQ(lin[0].shape["N"], (32u + 16u) * 128u);
  EXPECT_EQ(lin[2].shape["N"], 2u * 14336u);
  EXPECT_EQ(lin[3].shape["K"], 14336u);
  EXPECT_EQ(lin[4].shape["N"], 128256u);
  // Decode step: per-layer ops counted `layers` times; attention reads the whole cache.
  const auto ops = step_ops(m, {Phase::decode, 4, 1, 1024}, p);
  std::uint64_t kv = 0;
  for (const auto& op : ops) kv += op.cost.bytes.kv_cache * op.count;
  EXPECT_EQ(kv, kv_cache_bytes(32, 8, 128, 1024, 4, 2));
  // The weights read in a decode step are all parameters but the embedding
  // table (gathered: only the rows used) and the final norm counted once.
  std::uint64_t w = 0;
  for (const auto& op : ops) w += op.cost.bytes.weights * op.count;
  const std::uint64_t embed_rows_read = 2ull * 4 * 4096;
  EXPECT_EQ(w, 2 * (parameter_count(m) - 128256ull * 4096) + embed_rows_read);
}

TEST(Models, ConfigByPath) {
  const auto dir = std::filesystem::temp_directory_path() / "phasebench-test-model";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "tie_word_embeddings": false})";
  const auto m = load_model(dir.string());
  EXPECT_EQ(m.kv_heads, 4u);  // absent num_key_value_heads: equal to the heads
  EXPECT_EQ(m.head_dim, 16u);
  EXPECT_EQ(m.name, "phasebench-test-model");
  // 2*100*64 + 2*(64*(4+8)*16 + 4*16*64 + 3*64*128 + 2*64) + 64
  EXPECT_EQ(parameter_count(m), 2u * 100 * 64 + 2u * (64 * 12 * 16 + 4 * 16 * 64 + 3 * 64 * 128 + 2 * 64) + 64);
  std::filesystem::remove_all(dir);
}

namespace {
std::string error_of(const std::string& text) {
  try {
    parse_model_config(text, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
const char* kGood = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100})";
}  // namespace

TEST(Models, BadConfigsAreClearErrors) {
  EXPECT_EQ(error_of(kGood), "");
  EXPECT_NE(error_of("{ not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "llama"})").find("missing required field \"hidden_size\""), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "bert", "hidden_size": 64})").find("not supported"), std::string::npos);
  std::string zero = kGood;
  zero.replace(zero.find("\"num_attention_heads\": 4"), 24, "\"num_attention_heads\": 0");
  EXPECT_NE(error_of(zero).find("num_attention_heads\" must be a positive integer"), std::string::npos);
  std::string neg = kGood;
  neg.replace(neg.find("\"hidden_size\": 64"), 17, "\"hidden_size\": -64");
  EXPECT_NE(error_of(neg).find("hidden_size"), std::string::npos);
  std::string str = kGood;
  str.replace(str.find("\"vocab_size\": 100"), 17, "\"vocab_size\": \"100\"");
  EXPECT_NE(error_of(str).find("vocab_size"), std::string::npos);
  std::string gqa = kGood;
  gqa.replace(gqa.find("\"num_key_value_heads\": 2"), 24, "\"num_key_value_heads\": 3");
  EXPECT_NE(error_of(gqa).find("not a multiple"), std::string::npos);
  std::string nodiv = R"({"model_type": "llama", "hidden_size": 66, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})";
  EXPECT_NE(error_of(nodiv).find("head_dim"), std::string::npos);
  std::string badbool = kGood;
  badbool.insert(badbool.size() - 1, R"(, "tie_word_embeddings": "yes")");
  EXPECT_NE(error_of(badbool).find("true or false"), std::string::npos);
  // Mixtures of experts, windows and quantization that do not hold together.
  const std::string moe = R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 6})";
  EXPECT_NE(error_of(moe).find("6 experts per token of 4 experts"), std::string::npos) << error_of(moe);
  std::string types = kGood;
  types.insert(types.size() - 1, R"(, "sliding_window": 16, "layer_types": ["full_attention"])");
  types.replace(types.find("\"llama\""), 7, "\"gpt_oss\"");
  EXPECT_NE(error_of(types).find("one type per layer"), std::string::npos) << error_of(types);
  std::string wide = kGood;
  wide.replace(wide.find("\"llama\""), 7, "\"mistral\"");
  wide.insert(wide.size() - 1, R"(, "sliding_window": 9000, "max_position_embeddings": 4096)");
  EXPECT_NE(error_of(wide).find("sliding_window 9000 is larger than max_position_embeddings 4096"), std::string::npos)
      << error_of(wide);
  const std::string ds = R"({"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100, "q_lora_rank": 32, "kv_lora_rank": 16,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2})";
  EXPECT_EQ(error_of(ds), "");
  auto ds_with = [&](const std::string& from, const std::string& to) {
    std::string t = ds;
    t.replace(t.find(from), from.size(), to);
    return error_of(t);
  };
  EXPECT_NE(ds_with("\"n_group\": 4", "\"n_group\": 3").find("n_group 3 does not divide n_routed_experts 8"), std::string::npos);
  EXPECT_NE(ds_with("\"topk_group\": 2", "\"topk_group\": 5").find("topk_group 5 is more than n_group 4"), std::string::npos);
  EXPECT_NE(ds_with("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9").find("9 experts per token of 8"),
            std::string::npos);
  EXPECT_NE(ds_with("\"first_k_dense_replace\": 1", "\"first_k_dense_replace\": 5").find("first_k_dense_replace 5"),
            std::string::npos);
  EXPECT_NE(ds_with("\"kv_lora_rank\": 16", "\"kv_lora_rank\": 0").find("kv_lora_rank"), std::string::npos);
  // A quantization group that does not divide a layer's inputs (hidden 64, groups of 48).
  std::string group = kGood;
  group.insert(group.size() - 1, R"(, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 48})");
  EXPECT_NE(error_of(group).find("group size 48 does not divide the 64 inputs of qkv_proj"), std::string::npos)
      << error_of(group);
  std::string quant = kGood;
  quant.insert(quant.size() - 1, R"(, "quantization_config": {"quant_method": "bitsandbytes"})");
  EXPECT_NE(error_of(quant).find("quant_method 'bitsandbytes' is not supported"), std::string::npos) << error_of(quant);
}

TEST(Models, UnknownModelAndMissingFile) {
  try {
    load_model("llama-9000");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'llama-9000'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("llama-3.1-8b"), std::string::npos);  // lists the known ones
  }
  EXPECT_THROW(load_model(""), InputError);
  EXPECT_THROW(load_model("/nonexistent/config.json"), InputError);
}

TEST(Models, Llama4ChunkedAttentionAndInterleavedExperts) {
  // Llama-4-Scout-17B-16E's text_config (a trimmed copy of the Instruct config:
  // every field the language model uses). Published: 17B active, 109B total,
  // which counts the 0.87B vision encoder this model leaves out.
  const auto m = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/llama-4-scout-17b-16e-text.json");
  EXPECT_EQ(m.model_type, "llama4");
  EXPECT_EQ(parameter_count(m), 107769861120ull);
  EXPECT_EQ(active_parameter_count(m), 17172894720ull);  // shared + 1 routed expert, embedding and head included
  EXPECT_TRUE(rounds_to(active_parameter_count(m), "17B"));
  EXPECT_EQ(std::count(m.moe_layers.begin(), m.moe_layers.end(), true), 48);  // interleave_moe_layer_step 1
  // Every fourth layer is NoPE and global; the other 36 attend within 8192-token chunks.
  for (std::uint64_t i = 0; i < m.layers; ++i) EXPECT_EQ(m.chunks[i], (i + 1) % 4 ? 8192u : 0u) << i;
  // KV at 20000 tokens: 12 global layers keep all of it, 36 chunked ones one chunk.
  const std::uint64_t per_token_layer = 2ull * 8 * 128 * 2;
  EXPECT_EQ(kv_cache_bytes(m, 20000, 1, 2), per_token_layer * (12 * 20000 + 36 * 8192));
  EXPECT_EQ(chunked_causal_pairs(20000, 8192), 2 * (8192ull * 8193 / 2) + 3616ull * 3617 / 2);
  // Decode at context 20000: a chunked layer reads the 20000 mod 8192 = 3616 tokens of its chunk.
  const auto p = Precision::from(DType::bf16, DType::bf16);
  std::uint64_t kv = 0;
  for (const auto& op : step_ops(m, {Phase::decode, 1, 1, 20000}, p)) kv += op.cost.bytes.kv_cache * op.count;
  EXPECT_EQ(kv, per_token_layer * (12 * 20000 + 36 * 3616));
  // Bad: no text_config, a chunk beyond the context limit.
  EXPECT_NE(error_of(R"({"model_type": "llama4"})").find("needs its \"text_config\""), std::string::npos);
  const std::string big = R"({"model_type": "llama4", "text_config": {"hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100, "num_local_experts": 4,
    "attention_chunk_size": 8192, "max_position_embeddings": 4096}})";
  EXPECT_NE(error_of(big).find("attention_chunk_size 8192 is larger than max_position_embeddings 4096"), std::string::npos)
      << error_of(big);
}
