// Hugging Face config.json into ModelConfig (model.hpp): the fields every family
// shares, then each family's own (sliding windows, mixtures of experts, q/k
// norms, attention sinks, nested text configs and their defaults) and the
// quantization_config. Every field is read through JsonFields (json_file.hpp), so
// a wrong type, sign or size, and every inconsistency, is one InputError naming
// the file and the field.
#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "phasebench/checked.hpp"
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

// The largest width, count or head size a config may give (hidden_size,
// vocab_size, experts, ...; the largest models use under 2^20), and the largest
// token count (max_position_embeddings, windows, chunks): far beyond any model,
// and small enough that the products of a layer's sizes stay inside 64 bits, so
// a typo is named as the field it is, not as an overflow later.
constexpr std::uint64_t kMaxWidth = 1ull << 24;
constexpr std::uint64_t kMaxTokens = 1ull << 32;

// transformers' default of tie_word_embeddings per family (the configuration_*.py
// __init__ defaults): the Gemma families tie, the others do not.
bool tie_default(const std::string& family) { return family.rfind("gemma", 0) == 0; }

// The text part of a multimodal config (gemma3: "text_config"), with the
// defaults transformers' Gemma3TextConfig fills in for fields it leaves out.
nlohmann::json text_part(const nlohmann::json& j, const std::string& family, const std::string& origin) {
  const JsonFields top(j, origin);
  if (family == "llama4") {  // Llama4Config: the language model is text_config (llama4_text)
    if (!top.has("text_config")) throw InputError(origin + ": a llama4 config needs its \"text_config\" object");
    auto t = top.object("text_config", "an object (the language model's config)");
    if (!has(t, "tie_word_embeddings") && has(j, "tie_word_embeddings")) t["tie_word_embeddings"] = j.at("tie_word_embeddings");
    return t;
  }
  if (family != "gemma3" && family != "gemma3_text") return j;
  nlohmann::json t = family == "gemma3" && top.has("text_config")
                         ? top.object("text_config", "an object (the language model's config)")
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
void read_windows(ModelConfig& m, const JsonFields& j) {
  const std::string& f = m.model_type;
  const bool qwen = f == "qwen2" || f == "qwen3" || f == "qwen3_moe";
  // Qwen's threshold is read even when nothing slides: a wrong type is wrong either way.
  // From layer max_window_layers on (none when it is the number of layers or more).
  const auto qwen_from = qwen ? j.count_or("max_window_layers", 0, kMaxWidth) : 0;
  if (!j.has("sliding_window")) return;
  const auto W = j.positive("sliding_window", kMaxTokens);
  m.windows.assign(m.layers, 0);
  if (j.has("layer_types")) {
    const std::string should = "a list of one type per layer (" + std::to_string(m.layers) +
                               "), each sliding_attention or full_attention";
    const auto& types = j.list("layer_types", should);
    if (types.size() != m.layers) j.wrong("layer_types", should);
    for (std::uint64_t i = 0; i < m.layers; ++i) {
      const auto t = types.at(i).is_string() ? types.at(i).get<std::string>() : std::string();
      if (t == "sliding_attention")
        m.windows[i] = W;
      else if (t != "full_attention")
        j.wrong_item("layer_types", i, should);
    }
  } else if (f == "mistral" || f == "mixtral" || f == "phi3") {
    std::fill(m.windows.begin(), m.windows.end(), W);  // every layer
  } else if (qwen) {
    // Only with use_sliding_window, and only from layer max_window_layers on.
    if (j.boolean_or("use_sliding_window", false))
      for (std::uint64_t i = qwen_from; i < m.layers; ++i) m.windows[i] = W;
  } else if (f == "gemma2" || f == "gpt_oss") {
    for (std::uint64_t i = 0; i < m.layers; i += 2) m.windows[i] = W;  // even layers slide
  } else if (f == "gemma3" || f == "gemma3_text") {
    const auto pattern = j.positive_or("sliding_window_pattern", 6, kMaxWidth);
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
void read_chunks(ModelConfig& m, const JsonFields& j) {
  if (m.model_type != "llama4" && m.model_type != "llama4_text") return;
  if (!j.has("attention_chunk_size")) return;
  const auto C = j.positive("attention_chunk_size", kMaxTokens);
  // One 0 or 1 per layer (1: the layer uses RoPE and is chunked); empty: transformers' default.
  const std::string should = "a list of one 0 or 1 per layer (" + std::to_string(m.layers) + ")";
  const auto& listed = j.list("no_rope_layers", should);
  if (!listed.empty() && listed.size() != m.layers) j.wrong("no_rope_layers", should);
  const auto interval = j.positive_or("no_rope_layer_interval", 4, kMaxWidth);
  m.chunks.assign(m.layers, 0);
  for (std::uint64_t i = 0; i < m.layers; ++i) {
    bool rope = (i + 1) % interval != 0;
    if (!listed.empty()) {
      const auto& v = listed.at(i);
      const auto bit = v.is_boolean() ? std::optional<std::uint64_t>(v.get<bool>()) : whole_number(v, 0, 1);
      if (!bit) j.wrong_item("no_rope_layers", i, should);
      rope = *bit == 1;
    }
    if (rope) m.chunks[i] = C;
  }
  if (m.max_position && C > m.max_position)
    throw InputError(j.origin() + ": attention_chunk_size " + std::to_string(C) + " is larger than max_position_embeddings " +
                     std::to_string(m.max_position));
}

void read_moe(ModelConfig& m, const JsonFields& j) {
  const std::string& f = m.model_type;
  const auto& origin = j.origin();
  if (f == "mixtral" || f == "gpt_oss") {
    m.experts = j.positive("num_local_experts", kMaxWidth);
    m.experts_per_token = j.has("num_experts_per_tok") ? j.positive("num_experts_per_tok", kMaxWidth)
                                                       : j.positive("experts_per_token", kMaxWidth);
    m.expert_intermediate = m.intermediate;
    m.moe_layers.assign(m.layers, true);
  } else if (f == "qwen3_moe") {
    m.experts = j.positive("num_experts", kMaxWidth);
    m.experts_per_token = j.positive("num_experts_per_tok", kMaxWidth);
    m.expert_intermediate = j.positive("moe_intermediate_size", kMaxWidth);
    const auto step = j.positive_or("decoder_sparse_step", 1, kMaxWidth);
    const auto dense = j.layer_indices("mlp_only_layers", m.layers);
    m.moe_layers.assign(m.layers, false);
    for (std::uint64_t i = 0; i < m.layers; ++i)
      m.moe_layers[i] = std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0;
  } else if (f == "llama4" || f == "llama4_text") {
    // Llama4TextMoe: num_local_experts routed experts and one shared expert, all
    // of width intermediate_size; dense layers use intermediate_size_mlp.
    m.experts = j.positive("num_local_experts", kMaxWidth);
    m.experts_per_token = j.positive_or("num_experts_per_tok", 1, kMaxWidth);
    m.expert_intermediate = m.shared_intermediate = m.intermediate;
    m.intermediate = j.positive_or("intermediate_size_mlp", 16384, kMaxWidth);
    m.moe_layers.assign(m.layers, false);
    if (j.has("moe_layers")) {
      for (const auto i : j.layer_indices("moe_layers", m.layers)) m.moe_layers[i] = true;
    } else {  // transformers' default: every step-th layer, from step - 1
      const auto step = j.positive_or("interleave_moe_layer_step", 1, kMaxWidth);
      for (std::uint64_t i = step - 1; i < m.layers; i += step) m.moe_layers[i] = true;
    }
  } else if (f == "deepseek_v2" || f == "deepseek_v3") {
    if (!j.has("n_routed_experts")) return;  // a dense DeepSeek
    m.experts = j.positive("n_routed_experts", kMaxWidth);
    m.experts_per_token = j.positive("num_experts_per_tok", kMaxWidth);
    m.expert_intermediate = j.positive("moe_intermediate_size", kMaxWidth);
    // The shared experts run as one MLP n_shared_experts times as wide.
    m.shared_intermediate = m.expert_intermediate * j.count_or("n_shared_experts", 0, kMaxWidth);
    const auto first_dense = j.count_or("first_k_dense_replace", 0, kMaxWidth);
    const auto freq = j.positive_or("moe_layer_freq", 1, kMaxWidth);
    if (first_dense > m.layers)
      throw InputError(origin + ": first_k_dense_replace " + std::to_string(first_dense) + " is more than the " +
                       std::to_string(m.layers) + " layers");
    m.moe_layers.assign(m.layers, false);
    for (std::uint64_t i = first_dense; i < m.layers; ++i) m.moe_layers[i] = i % freq == 0;
    // Group-limited routing: the experts split into n_group groups, topk_group of them searched.
    const auto groups = j.positive_or("n_group", 1, kMaxWidth), searched = j.positive_or("topk_group", 1, kMaxWidth);
    if (m.experts % groups != 0)
      throw InputError(origin + ": n_group " + std::to_string(groups) + " does not divide n_routed_experts " +
                       std::to_string(m.experts));
    if (searched > groups)
      throw InputError(origin + ": topk_group " + std::to_string(searched) + " is more than n_group " + std::to_string(groups));
    // V3's noaux_tc routing keeps a per-expert score-correction bias in the checkpoint.
    m.router_bias = m.router_bias_fp32 = j.text_or("topk_method", "") == "noaux_tc";
  } else {
    return;
  }
  if (m.experts_per_token > m.experts)
    throw InputError(origin + ": " + std::to_string(m.experts_per_token) + " experts per token of " +
                     std::to_string(m.experts) + " experts");
  if (f == "gpt_oss") m.router_bias = m.expert_bias = true;
}

// Multi-head latent attention (DeepSeek-V2/V3).
void read_mla(ModelConfig& m, const JsonFields& j) {
  auto& a = m.mla;
  a.q_lora_rank = j.positive_or("q_lora_rank", 0, kMaxWidth);  // null: a plain q_proj
  a.kv_lora_rank = j.positive("kv_lora_rank", kMaxWidth);
  a.qk_nope = j.positive("qk_nope_head_dim", kMaxWidth);
  a.qk_rope = j.positive("qk_rope_head_dim", kMaxWidth);
  a.v_head = j.positive("v_head_dim", kMaxWidth);
  m.head_dim = a.qk_nope + a.qk_rope;
  m.kv_heads = m.heads;
  m.mtp_layers = j.count_or("num_nextn_predict_layers", 0, kMaxWidth);
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
void read_quantization(ModelConfig& m, const JsonFields& top) {
  if (!top.has("quantization_config")) return;
  const JsonFields q(top.object("quantization_config", "an object (quant_method and its fields)"),
                     top.origin() + ": quantization_config");
  const auto& where = q.origin();
  const auto method = q.text("quant_method");
  WeightFormat f;
  if (method == "awq" || method == "gptq") {
    f.bits = q.has("bits") ? q.positive("bits", 64) : q.positive_or("w_bit", 4, 64);
    // Weights per group along a row; -1: one group per row (per output channel).
    const auto group_key = q.has("group_size") ? "group_size" : "q_group_size";
    f.group = 128;
    if (q.has(group_key)) {
      const auto& g = q.at(group_key);
      f.group = g.is_number_integer() && !g.is_number_unsigned() && g.get<std::int64_t>() == -1
                    ? ~std::uint64_t{0}
                    : q.positive(group_key, kMaxWidth,
                                 "a positive integer (at most " + std::to_string(kMaxWidth) + "), or -1 for one group per row");
    }
    if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 8)
      throw InputError(where + ": " + std::to_string(f.bits) + "-bit weights; AWQ/GPTQ use 2, 3, 4 or 8 bits");
    // An fp16 scale and a packed zero point per group (GPTQ stores zeros even when symmetric).
    f.group_bits = 16 + (method == "awq" && !q.boolean_or("zero_point", true) ? 0 : f.bits);
    if (method == "gptq") f.col_bits = 32;  // g_idx: an int32 per input column
    f.name = method + " int" + std::to_string(f.bits) + " (groups of " +
             (f.group == ~std::uint64_t{0} ? std::string("a row") : std::to_string(f.group)) + ", fp16 scale" +
             (f.group_bits > 16 ? " + zero point)" : ")");
    f.compute = DType::bf16;
  } else if (method == "fp8") {
    f = WeightFormat::parse("fp8");
    if (q.has("weight_block_size")) {
      const std::string should = "[rows, cols], two positive integers (at most " + std::to_string(kMaxWidth) + ")";
      const auto& b = q.list("weight_block_size", should);
      if (b.size() != 2) q.wrong("weight_block_size", should);
      const auto rows = whole_number(b.at(0), 1, kMaxWidth), cols = whole_number(b.at(1), 1, kMaxWidth);
      if (!rows) q.wrong_item("weight_block_size", 0, should);
      if (!cols) q.wrong_item("weight_block_size", 1, should);
      f.block_rows = *rows;
      f.block_cols = *cols;
      f.name = "fp8 e4m3 (" + std::to_string(f.block_rows) + "x" + std::to_string(f.block_cols) + " blocks, fp32 scale)";
    } else {
      // No block size: one fp32 scale per weight matrix (a block as large as any matrix).
      f.block_rows = f.block_cols = ~std::uint64_t{0};
      f.name = "fp8 e4m3 (one fp32 scale per tensor)";
    }
  } else if (method == "mxfp4") {
    f = WeightFormat::parse("mxfp4");
  } else {
    throw InputError(where + ": quant_method " + quote_value(method) +
                     " is not supported; phasebench reads awq, gptq, fp8 and mxfp4 (or give --weight-dtype)");
  }
  m.quantization = f;
  m.not_quantized = {"lm_head", "router"};
  for (const auto& e : q.strings("modules_to_not_convert"))
    for (const auto& n : plain_modules_of(e)) m.not_quantized.push_back(n);
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

namespace {

// The model's whole-model sizes (its parameters, weights, KV cache per token)
// must fit 64-bit arithmetic; when they do not, the message names the config's
// largest sizes, not the batch or lengths a later step would blame.
void check_sizes_fit(const ModelConfig& m, const JsonFields& j) {
  try {
    parameter_count(m);
    kv_bytes_per_token(m, 4);
  } catch (const InputError&) {
    std::vector<std::pair<std::uint64_t, std::string>> sizes{
        {m.hidden, "hidden_size"},       {m.intermediate, "intermediate_size"},       {m.layers, "num_hidden_layers"},
        {m.heads, "num_attention_heads"}, {m.head_dim, "head_dim"},                    {m.vocab, "vocab_size"},
        {m.experts, "experts"},          {m.expert_intermediate, "expert width"}};
    std::sort(sizes.rbegin(), sizes.rend());
    std::string largest;
    for (std::size_t i = 0; i < 3; ++i)
      largest += (i ? ", " : "") + sizes[i].second + " " + std::to_string(sizes[i].first);
    throw InputError(j.origin() + ": the model's parameter count overflows 64-bit arithmetic; its largest sizes are " +
                     largest + " (check those fields)");
  }
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  const auto top = parse_json_text(json_text, origin);
  if (!top.is_object()) throw InputError(origin + ": a config.json must be a JSON object");
  ModelConfig m;
  m.source = origin;
  m.model_type = JsonFields(top, origin).text("model_type");
  if (!supported_families().count(m.model_type))
    throw InputError(origin + ": model_type \"" + m.model_type + "\" is not supported; supported families: " +
                     join(supported_families()));
  const auto text = text_part(top, m.model_type, origin);
  const JsonFields j(text, origin);
  m.hidden = j.positive("hidden_size", kMaxWidth);
  m.intermediate = j.positive("intermediate_size", kMaxWidth);
  m.layers = j.positive("num_hidden_layers", kMaxWidth);
  m.heads = j.positive("num_attention_heads", kMaxWidth);
  m.vocab = j.positive("vocab_size", kMaxWidth);
  m.max_position = j.positive_or("max_position_embeddings", 0, kMaxTokens);
  // Absent (or null) num_key_value_heads means multi-head attention.
  m.kv_heads = j.positive_or("num_key_value_heads", m.heads, kMaxWidth);
  if (m.heads % m.kv_heads != 0)
    throw InputError(origin + ": num_attention_heads (" + std::to_string(m.heads) +
                     ") is not a multiple of num_key_value_heads (" + std::to_string(m.kv_heads) + ")");
  if (j.has("head_dim")) {
    m.head_dim = j.positive("head_dim", kMaxWidth);
  } else if (m.model_type.rfind("deepseek", 0) != 0) {  // MLA sets its own (read_mla)
    if (m.hidden % m.heads != 0)
      throw InputError(origin + ": no head_dim and hidden_size (" + std::to_string(m.hidden) +
                       ") is not divisible by num_attention_heads (" + std::to_string(m.heads) + "); add \"head_dim\"");
    m.head_dim = m.hidden / m.heads;
  }
  m.tie_word_embeddings = j.boolean_or("tie_word_embeddings", tie_default(m.model_type));
  const std::string& f = m.model_type;
  if (f == "qwen2") {
    m.qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj
  } else {
    const bool attn_bias = j.boolean_or("attention_bias", false);
    m.qkv_bias = m.o_bias = attn_bias;
  }
  m.mlp_bias = j.boolean_or("mlp_bias", false);
  m.norms_per_layer = (f == "gemma2" || f == "gemma3" || f == "gemma3_text") ? 4 : 2;
  m.qk_norm = f == "qwen3" || f == "qwen3_moe" || f == "gemma3" || f == "gemma3_text";
  m.attention_sinks = f == "gpt_oss";
  m.fused_qkv_checkpoint = m.fused_gate_up_checkpoint = (f == "phi3");
  if (f == "deepseek_v2" || f == "deepseek_v3") read_mla(m, j);
  read_windows(m, j);
  if (!m.windows.empty() && m.max_position)
    for (auto w : m.windows)
      if (w > m.max_position)
        throw InputError(origin + ": sliding_window " + std::to_string(w) + " is larger than max_position_embeddings " +
                         std::to_string(m.max_position));
  read_chunks(m, j);
  read_moe(m, j);
  read_quantization(m, JsonFields(top, origin));
  if (m.quantization) check_weight_format(m, *m.quantization, m.not_quantized, origin);
  check_sizes_fit(m, j);
  m.notes = family_notes(m);
  return m;
}

}  // namespace phasebench
