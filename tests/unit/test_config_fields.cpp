// Every config.json field read through the one checked accessor (JsonFields): a
// wrong type, sign, fraction, size or layer index is one InputError naming the
// file, the field, what it holds and what it should hold; and the attention of
// every windowed and chunked family at its boundary and one token either side.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "phasebench/analytical.hpp"
#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/model.hpp"
#include "phasebench/workload.hpp"

using namespace phasebench;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_model_config(text, "model config 'c.json'");
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT AN InputError: ") + e.what();
  }
  return "";
}

// A config of `family` with `fields` (JSON members, no braces) added to a small valid base.
std::string config(const std::string& family, const std::string& fields) {
  std::string base = R"("model_type": ")" + family + R"(", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100)";
  if (family == "qwen3_moe") base += R"(, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32)";
  if (family == "deepseek_v3")
    base += R"(, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
      "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32)";
  if (family == "llama4") {
    base.replace(base.find("\"llama4\""), 8, "\"llama4_text\"");
    base += R"(, "num_local_experts": 4, "attention_chunk_size": 16)";
  }
  return "{" + base + (fields.empty() ? "" : ", " + fields) + "}";
}

// A field case: the family, the member added, the field the message must name
// and what it must say the field holds.
struct Case {
  std::string family, fields, field, holds;
};

}  // namespace

TEST(ConfigFields, TheBasesAreValid) {
  for (const auto* f : {"llama", "qwen3_moe", "deepseek_v3", "llama4", "gemma3_text", "qwen2"})
    EXPECT_EQ(error_of(config(f, "")), "") << f;
}

TEST(ConfigFields, EveryWrongValueNamesTheFileTheFieldAndWhatItHolds) {
  const std::vector<Case> cases{
      // The fields every family shares.
      {"llama", R"("hidden_size": "64")", "hidden_size", "'\"64\"' (a string)"},
      {"llama", R"("intermediate_size": -128)", "intermediate_size", "'-128' (a negative number)"},
      {"llama", R"("num_hidden_layers": 2.5)", "num_hidden_layers", "'2.5' (a fraction)"},
      {"llama", R"("num_attention_heads": true)", "num_attention_heads", "(true or false)"},
      {"llama", R"("vocab_size": [100])", "vocab_size", "(a list)"},
      {"llama", R"("max_position_embeddings": "4096")", "max_position_embeddings", "(a string)"},
      {"llama", R"("num_key_value_heads": -2)", "num_key_value_heads", "(a negative number)"},
      {"llama", R"("head_dim": 1e30)", "head_dim", "(a number written with a fraction or exponent)"},
      {"llama", R"("tie_word_embeddings": "yes")", "tie_word_embeddings", "(a string)"},
      {"llama", R"("attention_bias": 1)", "attention_bias", "(a number)"},
      {"llama", R"("mlp_bias": {})", "mlp_bias", "(an object)"},
      {"llama", R"("hidden_size": 1099511627776)", "hidden_size", "'1099511627776' (a number)"},
      {"llama", R"("model_type": 5)", "model_type", "(a number)"},
      // Sliding windows.
      {"qwen2", R"("sliding_window": 16, "use_sliding_window": true, "max_window_layers": "2")", "max_window_layers",
       "(a string)"},
      {"qwen2", R"("max_window_layers": -1)", "max_window_layers", "(a negative number)"},
      {"qwen2", R"("sliding_window": 16, "use_sliding_window": "true")", "use_sliding_window", "(a string)"},
      {"qwen2", R"("sliding_window": "16")", "sliding_window", "(a string)"},
      {"gemma3_text", R"("sliding_window_pattern": "6")", "sliding_window_pattern", "(a string)"},
      {"gemma3_text", R"("layer_types": "sliding_attention")", "layer_types", "(a string)"},
      {"gemma3_text", R"("layer_types": ["full_attention", "full_attention", "full_attention", 3])", "layer_types",
       "item 3 is '3' (a number)"},
      // Mixtures of experts: lists of layer indices, counts that may be 0, never a string or below 0.
      {"qwen3_moe", R"("mlp_only_layers": "3")", "mlp_only_layers", "(a string)"},
      {"qwen3_moe", R"("mlp_only_layers": ["3"])", "mlp_only_layers", "item 0 is '\"3\"' (a string)"},
      {"qwen3_moe", R"("mlp_only_layers": [-1])", "mlp_only_layers", "item 0 is '-1' (a negative number)"},
      {"qwen3_moe", R"("mlp_only_layers": [1, 4])", "mlp_only_layers", "item 1 is '4' (a number)"},
      {"qwen3_moe", R"("mlp_only_layers": [1, 1])", "mlp_only_layers", "each once"},
      {"qwen3_moe", R"("decoder_sparse_step": "2")", "decoder_sparse_step", "(a string)"},
      {"qwen3_moe", R"("num_experts": "8")", "num_experts", "(a string)"},
      {"deepseek_v3", R"("n_shared_experts": "1")", "n_shared_experts", "(a string)"},
      {"deepseek_v3", R"("n_shared_experts": -1)", "n_shared_experts", "(a negative number)"},
      {"deepseek_v3", R"("first_k_dense_replace": -1)", "first_k_dense_replace", "(a negative number)"},
      {"deepseek_v3", R"("num_nextn_predict_layers": "1")", "num_nextn_predict_layers", "(a string)"},
      {"deepseek_v3", R"("num_nextn_predict_layers": -1)", "num_nextn_predict_layers", "(a negative number)"},
      {"deepseek_v3", R"("topk_method": 5)", "topk_method", "(a number)"},
      {"deepseek_v3", R"("q_lora_rank": "32")", "q_lora_rank", "(a string)"},
      {"deepseek_v3", R"("n_group": 2.0)", "n_group", "(a number written with a fraction or exponent)"},
      {"llama4", R"("moe_layers": [0, 9])", "moe_layers", "item 1 is '9' (a number)"},
      {"llama4", R"("moe_layers": 1)", "moe_layers", "(a number)"},
      {"llama4", R"("interleave_moe_layer_step": "1")", "interleave_moe_layer_step", "(a string)"},
      // Llama 4's chunks.
      {"llama4", R"("no_rope_layers": "1")", "no_rope_layers", "(a string)"},
      {"llama4", R"("no_rope_layers": [1, 1, 2, 0])", "no_rope_layers", "item 2 is '2' (a number)"},
      {"llama4", R"("no_rope_layers": [1, 1, 1])", "no_rope_layers", "(a list)"},
      {"llama4", R"("attention_chunk_size": "16")", "attention_chunk_size", "(a string)"},
      // Quantization.
      {"llama", R"("quantization_config": "awq")", "quantization_config", "(a string)"},
      {"llama", R"("quantization_config": {"quant_method": 4})", "quant_method", "(a number)"},
      {"llama", R"("quantization_config": {"quant_method": "awq", "bits": "4"})", "bits", "(a string)"},
      {"llama", R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": "32"})", "group_size",
       "(a string)"},
      {"llama", R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 0})", "group_size",
       "'0' (a number)"},
      {"llama", R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 1e30})", "group_size",
       "'1e+30' (a number written with a fraction or exponent)"},
      {"llama", R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128.5})", "group_size",
       "'128.5' (a fraction)"},
      {"llama", R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -2})", "group_size",
       "(a negative number)"},
      {"llama", R"("quantization_config": {"quant_method": "awq", "q_group_size": 12.5})", "q_group_size", "(a fraction)"},
      {"llama", R"("quantization_config": {"quant_method": "awq", "zero_point": "yes"})", "zero_point", "(a string)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 0]})", "weight_block_size",
       "item 0 is '0' (a number)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 0]})", "weight_block_size",
       "item 1 is '0' (a number)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [-128, 128]})",
       "weight_block_size", "item 0 is '-128' (a negative number)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "weight_block_size": ["128", 128]})",
       "weight_block_size", "item 0 is '\"128\"' (a string)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128]})", "weight_block_size",
       "(a list)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "weight_block_size": 128})", "weight_block_size",
       "(a number)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "modules_to_not_convert": "lm_head"})",
       "modules_to_not_convert", "(a string)"},
      {"llama", R"("quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["lm_head", 3]})",
       "modules_to_not_convert", "item 1 is '3' (a number)"},
  };
  for (const auto& c : cases) {
    const auto text = config(c.family, c.fields);
    const auto e = error_of(text);
    SCOPED_TRACE(c.fields);
    EXPECT_EQ(e.rfind("model config 'c.json'", 0), 0u) << e;  // the file
    EXPECT_NE(e.find("\"" + c.field + "\" must be "), std::string::npos) << e;  // the field and what it should hold
    EXPECT_NE(e.find(c.holds), std::string::npos) << e;                       // what it holds
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(ConfigFields, WhatIsValidStaysValid) {
  // null is "not given"; -1 is GPTQ's one group per row; 0 shared experts, an empty
  // list of dense layers, a max_window_layers beyond the layers (no layer slides).
  for (const auto& [family, fields] : std::vector<std::pair<std::string, std::string>>{
           {"llama", R"("max_position_embeddings": null, "head_dim": null, "mlp_bias": null)"},
           {"llama", R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1})"},
           {"llama", R"("quantization_config": {"quant_method": "awq", "q_group_size": 32, "modules_to_not_convert": null})"},
           {"deepseek_v3", R"("n_shared_experts": 0, "num_nextn_predict_layers": 0, "first_k_dense_replace": 0)"},
           {"qwen3_moe", R"("mlp_only_layers": [], "sliding_window": 16, "use_sliding_window": true, "max_window_layers": 70)"},
           {"llama4", R"("no_rope_layers": [], "moe_layers": [1, 3])"},
           {"llama4", R"("no_rope_layers": [1, 1, true, false])"},
       })
    EXPECT_EQ(error_of(config(family, fields)), "") << fields;
  const auto qwen = parse_model_config(
      config("qwen3_moe", R"("sliding_window": 16, "use_sliding_window": true, "max_window_layers": 70)"), "c");
  EXPECT_TRUE(qwen.windows.empty());  // max_window_layers 70 of 4 layers: none slides
  const auto rows = parse_model_config(
      config("llama", R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1})"), "c");
  EXPECT_EQ(rows.quantization->name, "gptq int4 (groups of a row, fp16 scale + zero point)");
}

TEST(ConfigFields, Fp8WithoutABlockSizeIsPerTensor) {
  const auto m = parse_model_config(config("llama", R"("quantization_config": {"quant_method": "fp8"})"), "c");
  ASSERT_TRUE(m.quantization.has_value());
  EXPECT_EQ(m.quantization->name, "fp8 e4m3 (one fp32 scale per tensor)");
  // One 4-byte scale per matrix, whatever its size.
  EXPECT_EQ(m.quantization->bytes(64, 64), 64u * 64 + 4);
  EXPECT_EQ(m.quantization->bytes(1000, 3000), 1000u * 3000 + 4);
  const auto b = parse_model_config(
      config("llama", R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [32, 64]})"), "c");
  EXPECT_EQ(b.quantization->name, "fp8 e4m3 (32x64 blocks, fp32 scale)");
  EXPECT_EQ(b.quantization->bytes(64, 64), 64u * 64 + 2 * 4);
}

TEST(ConfigFields, AnOverflowNamesTheFields) {
  // Each size within its limit, their product beyond 64 bits: the message names them.
  const std::string big = R"({"model_type": "llama", "hidden_size": 16777216, "intermediate_size": 16777216,
    "num_hidden_layers": 16777216, "num_attention_heads": 16, "vocab_size": 100})";
  const auto e = error_of(big);
  EXPECT_NE(e.find("overflows 64-bit arithmetic"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size 16777216"), std::string::npos) << e;
  EXPECT_NE(e.find("num_hidden_layers 16777216"), std::string::npos) << e;
  EXPECT_EQ(e.find("batch"), std::string::npos) << "not the batch or lengths: " << e;
}

namespace {

// Every config with sliding windows or chunks: the shipped ones and the test data.
std::vector<ModelConfig> windowed_and_chunked() {
  std::vector<std::string> paths;
  for (const auto& s : shipped_models()) paths.push_back(s.name);
  for (const auto& e : std::filesystem::directory_iterator(PHASEBENCH_TEST_DATA_DIR)) paths.push_back(e.path().string());
  std::vector<ModelConfig> out;
  for (const auto& p : paths) {
    auto m = load_model(p);
    if (!m.windows.empty() || !m.chunks.empty()) out.push_back(std::move(m));
  }
  return out;
}

// The KV tokens and the FLOPs of the decode attention of layer kind `kind` in a step.
std::pair<std::uint64_t, std::uint64_t> attention_of(const ModelConfig& m, const LayerKind& kind, std::uint64_t context,
                                                     std::uint64_t S) {
  const auto p = Precision::from(DType::bf16, DType::bf16);
  for (const auto& op : layer_ops(m, {Phase::decode, 1, S, context}, p, kind))
    if (op.kind == "decode_attention") return {op.shape["L"], op.cost.flops};
  ADD_FAILURE() << "no decode attention";
  return {0, 0};
}

}  // namespace

TEST(ConfigFields, EveryWindowedAndChunkedFamilyAtItsBoundaryAndEitherSide) {
  const auto models = windowed_and_chunked();
  std::set<std::string> families;
  for (const auto& m : models) families.insert(m.model_type);
  // mistral (v0.1), phi3, gemma2, gemma3, gpt_oss slide; llama4 chunks.
  for (const auto* f : {"mistral", "phi3", "gemma2", "gemma3", "gpt_oss", "llama4"}) EXPECT_TRUE(families.count(f)) << f;
  const auto gpu = GpuTable::load().get("h200-sxm");
  for (const auto& m : models) {
    for (const auto& [kind, count] : layer_groups(m)) {
      const auto reach = kind.window ? kind.window : kind.chunk;
      if (!reach) continue;
      const auto per_key = 4 * m.heads * m.head_dim;  // decode FLOPs per (query, key)
      for (const auto L : {reach - 1, reach, reach + 1, 2 * reach - 1, 2 * reach, 2 * reach + 1}) {
        SCOPED_TRACE(m.name + " reach " + std::to_string(reach) + " context " + std::to_string(L));
        // One new token: a window reads min(L, W); a chunk the new token's chunk up to it.
        const auto want = kind.window ? std::min(L, reach) : (L - 1) % reach + 1;
        const auto [read, flops] = attention_of(m, kind, L, 1);
        EXPECT_EQ(read, want);
        EXPECT_EQ(flops, per_key * want);
        EXPECT_GE(read, 1u);
        // The whole model estimates there (beyond its positions where that is what it takes).
        EstimateInputs in;
        in.prompt = 16;
        in.context = L;
        in.allow_long_context = true;
        EXPECT_NO_THROW(estimate(m, gpu, in));
      }
      if (!kind.chunk) continue;
      // Three new tokens across the boundary: at positions C-2 and C-1 (the chunk's
      // last two, seeing C-1 and C keys) and C (a new chunk: itself).
      const auto C = kind.chunk;
      const auto [read, flops] = attention_of(m, kind, C - 1, 3);
      EXPECT_EQ(read, C + 1) << m.name;
      EXPECT_EQ(flops, per_key * ((C - 1) + C + 1)) << m.name;
      // Within one chunk, as the multi-token formula: first token sees 5, then 6, 7.
      const auto [read5, flops5] = attention_of(m, kind, C + 5, 3);
      EXPECT_EQ(read5, 7u);
      EXPECT_EQ(flops5, per_key * (5 + 6 + 7));
    }
  }
}

TEST(ConfigFields, ARequestAcrossChunkBoundariesEstimates) {
  // --generate walks the context through 8192 and 16384 (whole chunks of Scout's 8192).
  const auto m = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/llama-4-scout-17b-16e-text.json");
  EstimateInputs in;
  in.prompt = 8190;
  in.context = 8192;
  in.generate = 8200;
  const auto e = estimate(m, GpuTable::load().get("h200-sxm"), in);
  ASSERT_TRUE(e.request.has_value());
  EXPECT_GT(e.request->mean_per_token_s, 0);
}
