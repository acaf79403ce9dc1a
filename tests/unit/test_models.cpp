// Shipped configs: parameter counts against the published ones, derived
// shapes, and every kind of bad config.json.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "phasebench/error.hpp"
#include "phasebench/model.hpp"

using namespace phasebench;

TEST(Models, ParameterCountsMatchPublishedCounts) {
  const auto shipped = shipped_models();
  ASSERT_GE(shipped.size(), 3u);
  for (const auto& s : shipped) {
    const auto m = load_model(s.name);
    EXPECT_EQ(parameter_count(m), s.published_params) << s.name;
  }
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
  const Precision p{2, 2, 2};
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
