// Model shapes (model.hpp): Hugging Face config.json and the bundled models read
// into ModelConfig, and the ops of a layer and of a whole step with their costs.
#include "phasebench/model.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/json_file.hpp"

namespace phasebench {

namespace {

const std::set<std::string>& supported_families() {
  static const std::set<std::string> f{"llama", "mistral", "qwen2", "gemma", "gemma2", "phi3"};
  return f;
}

std::string join(const std::set<std::string>& s) {
  std::string r;
  for (const auto& x : s) r += (r.empty() ? "" : ", ") + x;
  return r;
}

bool optional_bool(const nlohmann::json& j, const std::string& key, bool dflt, const std::string& origin) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  if (!j.at(key).is_boolean()) throw InputError(origin + ": field \"" + key + "\" must be true or false, got " + j.at(key).dump());
  return j.at(key).get<bool>();
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  const auto j = parse_json_text(json_text, origin);
  if (!j.is_object()) throw InputError(origin + ": a config.json must be a JSON object");
  ModelConfig m;
  m.source = origin;
  m.model_type = require_string(j, "model_type", origin);
  if (!supported_families().count(m.model_type))
    throw InputError(origin + ": model_type \"" + m.model_type + "\" is not supported; supported families: " +
                     join(supported_families()));
  m.hidden = require_positive(j, "hidden_size", origin);
  m.intermediate = require_positive(j, "intermediate_size", origin);
  m.layers = require_positive(j, "num_hidden_layers", origin);
  m.heads = require_positive(j, "num_attention_heads", origin);
  m.vocab = require_positive(j, "vocab_size", origin);
  // Absent (or null) num_key_value_heads means multi-head attention.
  m.kv_heads = (j.contains("num_key_value_heads") && !j.at("num_key_value_heads").is_null())
                   ? require_positive(j, "num_key_value_heads", origin)
                   : m.heads;
  if (m.heads % m.kv_heads != 0)
    throw InputError(origin + ": num_attention_heads (" + std::to_string(m.heads) +
                     ") is not a multiple of num_key_value_heads (" + std::to_string(m.kv_heads) + ")");
  if (j.contains("head_dim") && !j.at("head_dim").is_null()) {
    m.head_dim = require_positive(j, "head_dim", origin);
  } else {
    if (m.hidden % m.heads != 0)
      throw InputError(origin + ": no head_dim and hidden_size (" + std::to_string(m.hidden) +
                       ") is not divisible by num_attention_heads (" + std::to_string(m.heads) + "); add \"head_dim\"");
    m.head_dim = m.hidden / m.heads;
  }
  // transformers' PretrainedConfig defaults tie_word_embeddings to true.
  m.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", true, origin);
  if (m.model_type == "qwen2") {
    m.qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj
  } else {
    const bool attn_bias = optional_bool(j, "attention_bias", false, origin);
    m.qkv_bias = m.o_bias = attn_bias;
  }
  m.mlp_bias = optional_bool(j, "mlp_bias", false, origin);
  m.norms_per_layer = m.model_type == "gemma2" ? 4 : 2;
  m.fused_qkv_checkpoint = m.fused_gate_up_checkpoint = (m.model_type == "phi3");
  return m;
}

std::vector<ShippedModel> shipped_models() {
  const std::string path = data_dir() + "/models/index.json";
  const auto j = read_json_file(path, "model index");
  std::vector<ShippedModel> out;
  try {
    for (const auto& e : j.at("models"))
      out.push_back({e.at("name").get<std::string>(), e.at("file").get<std::string>(), e.value("hf_repo", std::string{}),
                     e.value("published_params", std::uint64_t{0})});
  } catch (const nlohmann::json::exception& e) {
    throw InputError("model index '" + path + "' is malformed: " + e.what());
  }
  return out;
}

ModelConfig load_model(const std::string& name_or_path) {
  if (name_or_path.empty()) throw InputError("empty model name; give a short name (see `phasebench models`) or a config.json path");
  namespace fs = std::filesystem;
  std::string path;
  std::string name;
  for (const auto& s : shipped_models())
    if (s.name == name_or_path) {
      path = data_dir() + "/models/" + s.file;
      name = s.name;
    }
  if (path.empty()) {
    std::error_code ec;
    fs::path p(name_or_path);
    if (fs::is_directory(p, ec)) p /= "config.json";
    if (!fs::exists(p, ec)) {
      std::string known;
      for (const auto& s : shipped_models()) known += (known.empty() ? "" : ", ") + s.name;
      throw InputError("unknown model '" + name_or_path + "': not a shipped model (" + known +
                       ") and no such config.json file");
    }
    path = p.string();
    name = p.filename() == "config.json" ? p.parent_path().filename().string() : p.stem().string();
    if (name.empty()) name = "custom";
  }
  auto m = parse_model_config(read_text_file(path, "model config"), "model config '" + path + "'");
  m.name = name;
  return m;
}

std::uint64_t layer_parameter_count(const ModelConfig& m) {
  // The weights (layer_weights: projections and norms' scales), then the biases.
  std::uint64_t n = 0;
  for (const auto& w : layer_weights(m)) n = add(n, w.elements(), "parameters");
  const auto h = m.hidden, D = m.head_dim, I = m.intermediate;
  if (m.qkv_bias) n = add(n, (m.heads + 2 * m.kv_heads) * D);
  if (m.o_bias) n = add(n, h);
  if (m.mlp_bias) n = add(n, 2 * I + h);
  return n;
}

std::uint64_t parameter_count(const ModelConfig& m) {
  const auto embed = mul(m.vocab, m.hidden, "parameters");
  std::uint64_t n = add(embed, mul(m.layers, layer_parameter_count(m), "parameters"));
  n = add(n, m.hidden);  // final norm
  if (!m.tie_word_embeddings) n = add(n, embed);
  return n;
}

std::uint64_t kv_bytes_per_token(const ModelConfig& m, std::uint64_t c) {
  return kv_cache_bytes(m.layers, m.kv_heads, m.head_dim, 1, 1, c);
}

std::string_view to_string(Phase p) { return p == Phase::prefill ? "prefill" : "decode"; }

namespace {

LayerOp make_linear(std::string name, std::uint64_t M, std::uint64_t N, std::uint64_t K, const Precision& p) {
  const LinearShape s{M, N, K};
  return {std::move(name), "linear", s.shape(), linear_cost(s, p.w, p.a)};
}

LayerOp make_elementwise(std::string name, OpCost cost) { return {std::move(name), "elementwise", {}, cost}; }

}  // namespace

std::vector<LayerOp> linear_ops(const ModelConfig& m, std::uint64_t M, const Precision& p) {
  const auto h = m.hidden, D = m.head_dim;
  return {make_linear("qkv_proj", M, (m.heads + 2 * m.kv_heads) * D, h, p),
          make_linear("o_proj", M, h, m.heads * D, p),
          make_linear("gate_up_proj", M, 2 * m.intermediate, h, p),
          make_linear("down_proj", M, h, m.intermediate, p),
          make_linear("lm_head", M, m.vocab, h, p)};
}

std::uint64_t LayerWeight::elements() const { return mul(rows, cols, "layer weights"); }

std::vector<LayerWeight> layer_weights(const ModelConfig& m) {
  const auto h = m.hidden;
  const auto lin = linear_ops(m, 1, Precision{});
  std::vector<LayerWeight> w{{"attn_norm", 1, h}};
  for (const auto& op : lin) {
    if (op.name == "lm_head") continue;
    const auto s = LinearShape::of(op.shape);
    w.push_back({op.name, s.N, s.K});
    if (op.name == "o_proj") w.push_back({"mlp_norm", 1, h});
  }
  if (m.norms_per_layer == 4) {
    w.push_back({"post_attn_norm", 1, h});
    w.push_back({"post_mlp_norm", 1, h});
  }
  return w;
}

std::vector<LayerOp> layer_ops(const ModelConfig& m, const StepShape& step, const Precision& p) {
  const auto B = step.batch, S = step.new_tokens;
  const auto M = mul(B, S, "tokens");
  const auto h = m.hidden, D = m.head_dim;
  auto lin = linear_ops(m, M, p);
  const bool sandwich = m.norms_per_layer == 4;  // gemma2: norms before and after attention and MLP
  std::vector<LayerOp> ops;
  ops.push_back(make_elementwise("attn_norm", rmsnorm_cost(M, h, p.a, p.w)));
  ops.push_back(lin[0]);
  ops.push_back(make_elementwise("rope", rope_cost(M, m.heads, m.kv_heads, D, p.a)));
  const KvAppendShape app{B, S, m.kv_heads, D};
  ops.push_back({"kv_append", "kv_append", app.shape(), kv_append_cost(app, p.a, p.c)});
  if (step.phase == Phase::prefill) {
    const PrefillAttentionShape att{B, m.heads, m.kv_heads, S, D};
    ops.push_back({"attention", "prefill_attention", att.shape(), prefill_attention_cost(att, p.a)});
  } else {
    const AttentionShape att{B, m.heads, m.kv_heads, step.context, D};
    ops.push_back({"attention", "decode_attention", att.shape(), decode_attention_cost(att, p.c, p.a)});
  }
  ops.push_back(lin[1]);
  if (sandwich) ops.push_back(make_elementwise("post_attn_norm", rmsnorm_cost(M, h, p.a, p.w)));
  ops.push_back(make_elementwise("mlp_norm", rmsnorm_cost(M, h, p.a, p.w)));
  ops.push_back(lin[2]);
  ops.push_back(make_elementwise("act_mul", gated_activation_cost(M, m.intermediate, p.a)));
  ops.push_back(lin[3]);
  if (sandwich) ops.push_back(make_elementwise("post_mlp_norm", rmsnorm_cost(M, h, p.a, p.w)));
  return ops;
}

std::vector<LayerOp> step_ops(const ModelConfig& m, const StepShape& step, const Precision& p) {
  if (step.batch == 0 || step.new_tokens == 0) throw InputError("batch and new tokens per step must be positive");
  if (step.phase == Phase::decode && step.context == 0) throw InputError("a decode step needs a context length >= 1");
  const auto M = mul(step.batch, step.new_tokens, "tokens");
  std::vector<LayerOp> ops;
  // Embedding gather: at most one row per distinct token.
  ops.push_back(make_elementwise("embed", elementwise_cost(0, mul({p.w, std::min(M, m.vocab), m.hidden}), mul({p.a, M, m.hidden}))));
  for (auto op : layer_ops(m, step, p)) {
    op.count = m.layers;
    ops.push_back(std::move(op));
  }
  ops.push_back(make_elementwise("final_norm", rmsnorm_cost(M, m.hidden, p.a, p.w)));
  // Logits for the last token of each sequence only.
  ops.push_back(make_linear("lm_head", step.batch, m.vocab, m.hidden, p));
  return ops;
}

}  // namespace phasebench
