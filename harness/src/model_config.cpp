// Hugging Face config.json into ModelConfig (model.hpp): the fields every family
// shares, then each family's own (sliding windows, mixtures of experts, q/k
// norms, attention sinks, nested text configs and their defaults) and the
// quantization_config. Every inconsistency is one InputError naming the field.
#include <algorithm>
#include <set>
#include <string>

#include "phasebench/error.hpp"
#include "phasebench/json_file.hpp"
#include "phasebench/model.hpp"

namespace phasebench {

namespace {

const std::set<std::string>& supported_families() {
  static const std::set<std::string> f{"llama",     "llama4",      "llama4_text", "mistral", "mixtral",
                                       "qwen2",     "qwen3",       "qwen3_moe",   "deepseek_v2", "deepseek_v3",
                                       "gemma",     "gemma2",      "gemma3",      "gemma3_text", "phi3",
                                       "gpt_oss"};
  return f;
}

std::string join(const std::set<std::string>& s) {
  std::string r;
  for (const auto& x : s) r += (r.empty() ? "" : ", ") + x;
  return r;
}

bool has(const nlohmann::json& j, const std::string& key) { return j.contains(key) && !j.at(key).is_null(); }

bool optional_bool(const nlohmann::json& j, const std::string& key, bool dflt, const std::string& origin) {
  if (!has(j, key)) return dflt;
  if (!j.at(key).is_boolean())
    throw InputError(origin + ": field \"" + key + "\" must be true or false, got " + quote_value(j.at(key).dump()));
  return j.at(key).get<bool>();
}

std::uint64_t optional_positive(const nlohmann::json& j, const std::string& key, std::uint64_t dflt,
                                const std::string& origin) {
  return has(j, key) ? require_positive(j, key, origin) : dflt;
}

// transformers' default of tie_word_embeddings per family (the configuration_*.py
// __init__ defaults): the Gemma families tie, the others do not.
bool tie_default(const std::string& family) { return family.rfind("gemma", 0) == 0; }

// The text part of a multimodal config (gemma3: "text_config"), with the
// defaults transformers' Gemma3TextConfig fills in for fields it leaves out.
nlohmann::json text_part(const nlohmann::json& j, const std::string& family, const std::string& origin) {
  if (family == "llama4") {  // Llama4Config: the language model is text_config (llama4_text)
    if (!j.contains("text_config") || !j.at("text_config").is_object())
      throw InputError(origin + ": a llama4 config needs its \"text_config\" object");
    auto t = j.at("text_config");
    if (!has(t, "tie_word_embeddings") && has(j, "tie_word_embeddings")) t["tie_word_embeddings"] = j.at("tie_word_embeddings");
    return t;
  }
  if (family != "gemma3" && family != "gemma3_text") return j;
  nlohmann::json t = family == "gemma3" && j.contains("text_config") && j.at("text_config").is_object()
                         ? j.at("text_config")
                         : j;
  const nlohmann::json defaults = {{"vocab_size", 262208},       {"num_attention_heads", 8}, {"num_key_value_heads", 4},
                                   {"head_dim", 256},            {"max_position_embeddings", 131072},
                                   {"sliding_window", 4096}};
  for (const auto& [k, v] : defaults.items())
    if (!has(t, k)) t[k] = v;
  if (family == "gemma3" && !has(t, "tie_word_embeddings") && has(j, "tie_word_embeddings"))
    t["tie_word_embeddings"] = j.at("tie_word_embeddings");
  return t;
}

// Per-layer sliding windows: `layer_types` when the config lists them, else the
// family's rule as transformers builds it.
void read_windows(ModelConfig& m, const nlohmann::json& j, const std::string& origin) {
  const std::string& f = m.model_type;
  if (!has(j, "sliding_window")) return;
  const auto W = require_positive(j, "sliding_window", origin);
  m.windows.assign(m.layers, 0);
  if (has(j, "layer_types")) {
    const auto& types = j.at("layer_types");
    if (!types.is_array() || types.size() != m.layers)
      throw InputError(origin + ": \"layer_types\" must list one type per layer (" + std::to_string(m.layers) + ")");
    for (std::uint64_t i = 0; i < m.layers; ++i) {
      const auto t = types.at(i).is_string() ? types.at(i).get<std::string>() : std::string();
      if (t == "sliding_attention")
        m.windows[i] = W;
      else if (t != "full_attention")
        throw InputError(origin + ": layer_types[" + std::to_string(i) + "] is " + quote_value(types.at(i).dump()) +
                         "; phasebench knows sliding_attention and full_attention");
    }
  } else if (f == "mistral" || f == "mixtral" || f == "phi3") {
    std::fill(m.windows.begin(), m.windows.end(), W);  // every layer
  } else if (f == "qwen2" || f == "qwen3" || f == "qwen3_moe") {
    // Only with use_sliding_window, and only from layer max_window_layers on.
    if (optional_bool(j, "use_sliding_window", false, origin)) {
      const auto from = has(j, "max_window_layers") ? j.at("max_window_layers").get<std::uint64_t>() : 0;
      for (std::uint64_t i = from; i < m.layers; ++i) m.windows[i] = W;
    }
  } else if (f == "gemma2" || f == "gpt_oss") {
    for (std::uint64_t i = 0; i < m.layers; i += 2) m.windows[i] = W;  // even layers slide
  } else if (f == "gemma3" || f == "gemma3_text") {
    const auto pattern = optional_positive(j, "sliding_window_pattern", 6, origin);
    for (std::uint64_t i = 0; i < m.layers; ++i)
      if ((i + 1) % pattern != 0) m.windows[i] = W;  // every pattern-th layer is global
  } else {
    m.windows.clear();  // a family without sliding attention (llama, gemma)
  }
  if (std::all_of(m.windows.begin(), m.windows.end(), [](std::uint64_t w) { return w == 0; })) m.windows.clear();
}

// Llama 4's chunked local attention: the RoPE layers (no_rope_layers[i] = 1;
// transformers' default leaves every fourth layer NoPE) attend within chunks of
// attention_chunk_size tokens, the NoPE layers attend to everything.
void read_chunks(ModelConfig& m, const nlohmann::json& j, const std::string& origin) {
  if (m.model_type != "llama4" && m.model_type != "llama4_text") return;
  if (!has(j, "attention_chunk_size")) return;
  const auto C = require_positive(j, "attention_chunk_size", origin);
  std::vector<std::uint64_t> rope(m.layers);
  const bool listed = has(j, "no_rope_layers") && j.at("no_rope_layers").is_array() && !j.at("no_rope_layers").empty();
  if (listed && j.at("no_rope_layers").size() != m.layers)
    throw InputError(origin + ": \"no_rope_layers\" must give one 0 or 1 per layer (" + std::to_string(m.layers) + ")");
  const auto interval = optional_positive(j, "no_rope_layer_interval", 4, origin);
  for (std::uint64_t i = 0; i < m.layers; ++i)
    rope[i] = listed ? j.at("no_rope_layers").at(i).get<std::uint64_t>() : ((i + 1) % interval != 0 ? 1 : 0);
  m.chunks.assign(m.layers, 0);
  for (std::uint64_t i = 0; i < m.layers; ++i)
    if (rope[i]) m.chunks[i] = C;
  if (m.max_position && C > m.max_position)
    throw InputError(origin + ": attention_chunk_size " + std::to_string(C) + " is larger than max_position_embeddings " +
                     std::to_string(m.max_position));
}

void read_moe(ModelConfig& m, const nlohmann::json& j, const std::string& origin) {
  const std::string& f = m.model_type;
  if (f == "mixtral" || f == "gpt_oss") {
    m.experts = require_positive(j, "num_local_experts", origin);
    m.experts_per_token = has(j, "num_experts_per_tok") ? require_positive(j, "num_experts_per_tok", origin)
                                                        : require_positive(j, "experts_per_token", origin);
    m.expert_intermediate = m.intermediate;
    m.moe_layers.assign(m.layers, true);
  } else if (f == "qwen3_moe") {
    m.experts = require_positive(j, "num_experts", origin);
    m.experts_per_token = require_positive(j, "num_experts_per_tok", origin);
    m.expert_intermediate = require_positive(j, "moe_intermediate_size", origin);
    const auto step = optional_positive(j, "decoder_sparse_step", 1, origin);
    std::set<std::uint64_t> dense;
    if (has(j, "mlp_only_layers"))
      for (const auto& x : j.at("mlp_only_layers")) dense.insert(x.get<std::uint64_t>());
    m.moe_layers.assign(m.layers, false);
    for (std::uint64_t i = 0; i < m.layers; ++i) m.moe_layers[i] = !dense.count(i) && (i + 1) % step == 0;
  } else if (f == "llama4" || f == "llama4_text") {
    // Llama4TextMoe: num_local_experts routed experts and one shared expert, all
    // of width intermediate_size; dense layers use intermediate_size_mlp.
    m.experts = require_positive(j, "num_local_experts", origin);
    m.experts_per_token = optional_positive(j, "num_experts_per_tok", 1, origin);
    m.expert_intermediate = m.shared_intermediate = m.intermediate;
    m.intermediate = optional_positive(j, "intermediate_size_mlp", 16384, origin);
    m.moe_layers.assign(m.layers, false);
    if (has(j, "moe_layers")) {
      if (!j.at("moe_layers").is_array()) throw InputError(origin + ": \"moe_layers\" must list layer indices");
      for (const auto& x : j.at("moe_layers")) {
        if (!x.is_number_unsigned() || x.get<std::uint64_t>() >= m.layers)
          throw InputError(origin + ": moe_layers holds " + quote_value(x.dump()) + ", not a layer index below " +
                           std::to_string(m.layers));
        m.moe_layers[x.get<std::uint64_t>()] = true;
      }
    } else {  // transformers' default: every step-th layer, from step - 1
      const auto step = optional_positive(j, "interleave_moe_layer_step", 1, origin);
      for (std::uint64_t i = step - 1; i < m.layers; i += step) m.moe_layers[i] = true;
    }
  } else if (f == "deepseek_v2" || f == "deepseek_v3") {
    if (!has(j, "n_routed_experts")) return;  // a dense DeepSeek
    m.experts = require_positive(j, "n_routed_experts", origin);
    m.experts_per_token = require_positive(j, "num_experts_per_tok", origin);
    m.expert_intermediate = require_positive(j, "moe_intermediate_size", origin);
    // The shared experts run as one MLP n_shared_experts times as wide.
    if (has(j, "n_shared_experts")) m.shared_intermediate = m.expert_intermediate * j.at("n_shared_experts").get<std::uint64_t>();
    const auto first_dense = has(j, "first_k_dense_replace") ? j.at("first_k_dense_replace").get<std::uint64_t>() : 0;
    const auto freq = optional_positive(j, "moe_layer_freq", 1, origin);
    if (first_dense > m.layers)
      throw InputError(origin + ": first_k_dense_replace " + std::to_string(first_dense) + " is more than the " +
                       std::to_string(m.layers) + " layers");
    m.moe_layers.assign(m.layers, false);
    for (std::uint64_t i = first_dense; i < m.layers; ++i) m.moe_layers[i] = i % freq == 0;
    // Group-limited routing: the experts split into n_group groups, topk_group of them searched.
    const auto groups = optional_positive(j, "n_group", 1, origin), searched = optional_positive(j, "topk_group", 1, origin);
    if (m.experts % groups != 0)
      throw InputError(origin + ": n_group " + std::to_string(groups) + " does not divide n_routed_experts " +
                       std::to_string(m.experts));
    if (searched > groups)
      throw InputError(origin + ": topk_group " + std::to_string(searched) + " is more than n_group " + std::to_string(groups));
    // V3's noaux_tc routing keeps a per-expert score-correction bias in the checkpoint.
    m.router_bias = m.router_bias_fp32 = has(j, "topk_method") && j.at("topk_method") == "noaux_tc";
  } else {
    return;
  }
  if (m.experts_per_token > m.experts)
    throw InputError(origin + ": " + std::to_string(m.experts_per_token) + " experts per token of " +
                     std::to_string(m.experts) + " experts");
  if (f == "gpt_oss") m.router_bias = m.expert_bias = true;
}

// Multi-head latent attention (DeepSeek-V2/V3).
void read_mla(ModelConfig& m, const nlohmann::json& j, const std::string& origin) {
  auto& a = m.mla;
  a.q_lora_rank = has(j, "q_lora_rank") ? require_positive(j, "q_lora_rank", origin) : 0;  // null: a plain q_proj
  a.kv_lora_rank = require_positive(j, "kv_lora_rank", origin);
  a.qk_nope = require_positive(j, "qk_nope_head_dim", origin);
  a.qk_rope = require_positive(j, "qk_rope_head_dim", origin);
  a.v_head = require_positive(j, "v_head_dim", origin);
  m.head_dim = a.qk_nope + a.qk_rope;
  m.kv_heads = m.heads;
  m.mtp_layers = has(j, "num_nextn_predict_layers") ? j.at("num_nextn_predict_layers").get<std::uint64_t>() : 0;
}

// Our names of the linear layers a modules_to_not_convert entry (a name or a
// glob over the checkpoint's module names) leaves plain.
std::vector<std::string> plain_modules_of(const std::string& entry) {
  auto in = [&](const char* s) { return entry.find(s) != std::string::npos; };
  if (in("self_attn") || in("attn")) return {"qkv_proj", "o_proj"};
  if (in("router") || (entry.size() >= 5 && entry.compare(entry.size() - 5, 5, ".gate") == 0)) return {"router"};
  if (in("shared_expert")) return {"shared_gate_up", "shared_down"};
  if (in("experts")) return {"experts_gate_up", "experts_down"};
  if (in("lm_head")) return {"lm_head"};
  if (in("mlp")) return {"gate_up_proj", "down_proj", "router", "experts_gate_up", "experts_down"};
  return {};  // embed_tokens and norms are never quantized
}

// quantization_config: AWQ and GPTQ (int, groups with an fp16 scale and a packed
// zero point), fp8 with block scales, MXFP4. lm_head and routers stay plain
// unless the config says otherwise (AutoAWQ and GPTQ leave lm_head out).
void read_quantization(ModelConfig& m, const nlohmann::json& j, const std::string& origin) {
  if (!has(j, "quantization_config")) return;
  const auto& q = j.at("quantization_config");
  const std::string where = origin + ": quantization_config";
  if (!q.is_object()) throw InputError(where + " must be an object");
  const auto method = require_string(q, "quant_method", where);
  WeightFormat f;
  if (method == "awq" || method == "gptq") {
    f.bits = has(q, "bits") ? require_positive(q, "bits", where) : optional_positive(q, "w_bit", 4, where);
    f.group = has(q, "group_size") ? q.at("group_size").get<std::int64_t>() > 0 ? q.at("group_size").get<std::uint64_t>() : 0
                                   : optional_positive(q, "q_group_size", 128, where);
    if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 8)
      throw InputError(where + ": " + std::to_string(f.bits) + "-bit weights; AWQ/GPTQ use 2, 3, 4 or 8 bits");
    // An fp16 scale and a packed zero point per group (GPTQ stores zeros even when symmetric).
    f.group_bits = 16 + (method == "awq" && !optional_bool(q, "zero_point", true, where) ? 0 : f.bits);
    if (f.group == 0) {  // per output channel: one group per row
      f.group = ~std::uint64_t{0};
    }
    if (method == "gptq") f.col_bits = 32;  // g_idx: an int32 per input column
    f.name = method + " int" + std::to_string(f.bits) + " (groups of " +
             (f.group == ~std::uint64_t{0} ? std::string("a row") : std::to_string(f.group)) + ", fp16 scale" +
             (f.group_bits > 16 ? " + zero point)" : ")");
    f.compute = DType::bf16;
  } else if (method == "fp8") {
    f = WeightFormat::parse("fp8");
    if (has(q, "weight_block_size")) {
      const auto& b = q.at("weight_block_size");
      if (!b.is_array() || b.size() != 2) throw InputError(where + ": weight_block_size must be [rows, cols]");
      f.block_rows = b.at(0).get<std::uint64_t>();
      f.block_cols = b.at(1).get<std::uint64_t>();
      f.name = "fp8 e4m3 (" + std::to_string(f.block_rows) + "x" + std::to_string(f.block_cols) + " blocks, fp32 scale)";
    }
  } else if (method == "mxfp4") {
    f = WeightFormat::parse("mxfp4");
  } else {
    throw InputError(where + ": quant_method " + quote_value(method) +
                     " is not supported; phasebench reads awq, gptq, fp8 and mxfp4 (or give --weight-dtype)");
  }
  m.quantization = f;
  m.not_quantized = {"lm_head", "router"};
  if (has(q, "modules_to_not_convert"))
    for (const auto& e : q.at("modules_to_not_convert"))
      if (e.is_string())
        for (const auto& n : plain_modules_of(e.get<std::string>())) m.not_quantized.push_back(n);
}

// What the model of each family leaves out (the text output prints it).
std::vector<std::string> family_notes(const ModelConfig& m) {
  std::vector<std::string> n;
  const std::string& f = m.model_type;
  if (f.rfind("gemma", 0) == 0)
    n.push_back("Gemma's logit soft-capping, (1 + w) norm scales and sqrt(h) embedding scale: elementwise, no FLOPs");
  if (m.qk_norm) n.push_back("q/k RMSNorm over head_dim: bytes counted, no FLOPs");
  if (m.attention_sinks)
    n.push_back("attention sinks: one extra logit per head in every softmax (its weights read, its few FLOPs not counted)");
  if (m.experts)
    n.push_back("routing: the expected number of distinct experts a step touches, with every token's top-" +
                std::to_string(m.experts_per_token) +
                " drawn by a fixed popularity (--routing: uniform, or zipf:S); real routers vary by layer and prompt");
  if (!m.windows.empty()) n.push_back("sliding-window layers read at most their window of the KV cache, and keep only it");
  if (m.quantization) n.push_back("dequantization work inside the GEMMs: no FLOPs counted");
  if (!m.chunks.empty())
    n.push_back("chunked layers attend within their chunk only; each keeps at most one chunk of KV cache");
  if (f == "llama4" || f == "llama4_text")
    n.push_back("Llama 4's weightless L2 q/k norm and attention temperature tuning: elementwise, not costed; the vision "
                "encoder (in the published 109B of Scout) is not counted");
  if (m.uses_mla())
    n.push_back("MLA: decode attention in the absorbed form (queries moved into the latent space by W_UK, the "
                "latent cache read once for all heads, W_UV after), prefill in the expanded form (kv_b_proj makes "
                "per-head K and V, then causal attention with q/k dim " +
                std::to_string(m.head_dim) + " and v dim " + std::to_string(m.mla.v_head) + ")");
  if (f == "deepseek_v2" || f == "deepseek_v3")
    n.push_back("group-limited routing (n_group, topk_group) costed as top-k over all experts");
  if (m.mtp_layers)
    n.push_back("the multi-token-prediction module (num_nextn_predict_layers " + std::to_string(m.mtp_layers) +
                ") is not counted, as the published total leaves it out; speculative decoding with it is not modelled");
  return n;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  const auto top = parse_json_text(json_text, origin);
  if (!top.is_object()) throw InputError(origin + ": a config.json must be a JSON object");
  ModelConfig m;
  m.source = origin;
  m.model_type = require_string(top, "model_type", origin);
  if (!supported_families().count(m.model_type))
    throw InputError(origin + ": model_type \"" + m.model_type + "\" is not supported; supported families: " +
                     join(supported_families()));
  const auto j = text_part(top, m.model_type, origin);
  m.hidden = require_positive(j, "hidden_size", origin);
  m.intermediate = require_positive(j, "intermediate_size", origin);
  m.layers = require_positive(j, "num_hidden_layers", origin);
  m.heads = require_positive(j, "num_attention_heads", origin);
  m.vocab = require_positive(j, "vocab_size", origin);
  m.max_position = optional_positive(j, "max_position_embeddings", 0, origin);
  // Absent (or null) num_key_value_heads means multi-head attention.
  m.kv_heads = optional_positive(j, "num_key_value_heads", m.heads, origin);
  if (m.heads % m.kv_heads != 0)
    throw InputError(origin + ": num_attention_heads (" + std::to_string(m.heads) +
                     ") is not a multiple of num_key_value_heads (" + std::to_string(m.kv_heads) + ")");
  if (has(j, "head_dim")) {
    m.head_dim = require_positive(j, "head_dim", origin);
  } else if (m.model_type.rfind("deepseek", 0) != 0) {  // MLA sets its own (read_mla)
    if (m.hidden % m.heads != 0)
      throw InputError(origin + ": no head_dim and hidden_size (" + std::to_string(m.hidden) +
                       ") is not divisible by num_attention_heads (" + std::to_string(m.heads) + "); add \"head_dim\"");
    m.head_dim = m.hidden / m.heads;
  }
  m.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", tie_default(m.model_type), origin);
  const std::string& f = m.model_type;
  if (f == "qwen2") {
    m.qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj
  } else {
    const bool attn_bias = optional_bool(j, "attention_bias", false, origin);
    m.qkv_bias = m.o_bias = attn_bias;
  }
  m.mlp_bias = optional_bool(j, "mlp_bias", false, origin);
  m.norms_per_layer = (f == "gemma2" || f == "gemma3" || f == "gemma3_text") ? 4 : 2;
  m.qk_norm = f == "qwen3" || f == "qwen3_moe" || f == "gemma3" || f == "gemma3_text";
  m.attention_sinks = f == "gpt_oss";
  m.fused_qkv_checkpoint = m.fused_gate_up_checkpoint = (f == "phi3");
  if (f == "deepseek_v2" || f == "deepseek_v3") read_mla(m, j, origin);
  read_windows(m, j, origin);
  if (!m.windows.empty() && m.max_position)
    for (auto w : m.windows)
      if (w > m.max_position)
        throw InputError(origin + ": sliding_window " + std::to_string(w) + " is larger than max_position_embeddings " +
                         std::to_string(m.max_position));
  read_chunks(m, j, origin);
  read_moe(m, j, origin);
  read_quantization(m, top, origin);
  if (m.quantization) check_weight_format(m, *m.quantization, m.not_quantized, origin);
  m.notes = family_notes(m);
  return m;
}

}  // namespace phasebench
