// Model shapes (model.hpp): Hugging Face config.json and the bundled models read
// into ModelConfig, and the ops of a layer and of a whole step with their costs.
#include "phasebench/model.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/json_file.hpp"

namespace phasebench {

std::vector<ShippedModel> shipped_models() {
  const std::string path = data_dir() + "/models/index.json";
  const auto j = read_json_file(path, "model index");
  std::vector<ShippedModel> out;
  try {
    for (const auto& e : j.at("models"))
      out.push_back({e.at("name").get<std::string>(), e.at("file").get<std::string>(), e.value("hf_repo", std::string{}),
                     e.value("published_params", std::uint64_t{0}), e.value("published", std::string{}),
                     e.value("published_active", std::string{}), e.value("active_without_input_embedding", false)});
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

LayerKind ModelConfig::layer_kind(std::uint64_t layer) const {
  LayerKind k;
  if (layer < windows.size()) k.window = windows[layer];
  if (layer < chunks.size()) k.chunk = chunks[layer];
  if (layer < moe_layers.size()) k.moe = moe_layers[layer];
  return k;
}

bool ModelConfig::all_layers_moe() const {
  return !moe_layers.empty() && std::all_of(moe_layers.begin(), moe_layers.end(), [](bool b) { return b; });
}

std::vector<std::pair<LayerKind, std::uint64_t>> layer_groups(const ModelConfig& m) {
  std::vector<std::pair<LayerKind, std::uint64_t>> g;
  for (std::uint64_t i = 0; i < m.layers; ++i) {
    const auto k = m.layer_kind(i);
    auto it = std::find_if(g.begin(), g.end(), [&](const auto& x) { return x.first == k; });
    if (it == g.end())
      g.emplace_back(k, 1);
    else
      ++it->second;
  }
  return g;
}

std::uint64_t LayerWeight::elements() const { return mul(rows, cols, "layer weights"); }

std::vector<LayerWeight> layer_weights(const ModelConfig& m, const LayerKind& kind) {
  const auto h = m.hidden, D = m.head_dim;
  std::vector<LayerWeight> w{{"attn_norm", 1, h, false}};
  if (m.uses_mla()) {
    // As vLLM and SGLang load it: with a q bottleneck, q_a_proj and kv_a_proj_with_mqa fused.
    const auto& a = m.mla;
    const auto R = a.kv_lora_rank, P = a.qk_rope;
    if (a.q_lora_rank) {
      w.push_back({"qkv_a_proj", a.q_lora_rank + R + P, h});
      w.push_back({"q_a_norm", 1, a.q_lora_rank, false});
      w.push_back({"q_b_proj", m.heads * D, a.q_lora_rank});
    } else {
      w.push_back({"q_proj", m.heads * D, h});
      w.push_back({"kv_a_proj", R + P, h});
    }
    w.push_back({"kv_a_norm", 1, R, false});
    w.push_back({"kv_b_proj", m.heads * (a.qk_nope + a.v_head), R});
    w.push_back({"o_proj", h, m.heads * a.v_head});
  } else {
    w.push_back({"qkv_proj", (m.heads + 2 * m.kv_heads) * D, h});
  }
  if (m.qk_norm) {
    w.push_back({"q_norm", 1, D, false});
    w.push_back({"k_norm", 1, D, false});
  }
  if (m.attention_sinks) w.push_back({"sinks", 1, m.heads, false});
  if (!m.uses_mla()) w.push_back({"o_proj", h, m.heads * D});
  if (m.norms_per_layer == 4) w.push_back({"post_attn_norm", 1, h, false});
  w.push_back({"mlp_norm", 1, h, false});
  if (kind.moe) {
    const auto E = m.experts, I = m.expert_intermediate;
    w.push_back({"router", E, h});
    w.push_back({"experts_gate_up", mul(E, 2 * I), h});
    w.push_back({"experts_down", mul(E, h), I});
    if (m.shared_intermediate) {
      w.push_back({"shared_gate_up", 2 * m.shared_intermediate, h});
      w.push_back({"shared_down", h, m.shared_intermediate});
    }
  } else {
    w.push_back({"gate_up_proj", 2 * m.intermediate, h});
    w.push_back({"down_proj", h, m.intermediate});
  }
  if (m.norms_per_layer == 4) w.push_back({"post_mlp_norm", 1, h, false});
  return w;
}

namespace {

// Bias elements of one layer of kind `kind`.
std::uint64_t layer_bias_count(const ModelConfig& m, const LayerKind& kind) {
  const auto h = m.hidden, D = m.head_dim;
  std::uint64_t n = 0;
  if (m.qkv_bias) n = add(n, (m.heads + 2 * m.kv_heads) * D);
  if (m.o_bias) n = add(n, h);
  if (kind.moe) {
    if (m.router_bias) n = add(n, m.experts);
    if (m.expert_bias) n = add(n, mul(m.experts, 2 * m.expert_intermediate + h, "parameters"));
  } else if (m.mlp_bias) {
    n = add(n, 2 * m.intermediate + h);
  }
  return n;
}

// Parameters of one expert (its weights and biases).
std::uint64_t expert_parameter_count(const ModelConfig& m) {
  const auto h = m.hidden, I = m.expert_intermediate;
  return add(mul({3, h, I}, "parameters"), m.expert_bias ? 2 * I + h : 0);
}

}  // namespace

std::uint64_t layer_parameter_count(const ModelConfig& m, const LayerKind& kind) {
  // The weights (layer_weights: projections, norms' scales, sinks), then the biases.
  std::uint64_t n = 0;
  for (const auto& w : layer_weights(m, kind)) n = add(n, w.elements(), "parameters");
  return add(n, layer_bias_count(m, kind), "parameters");
}

std::uint64_t parameter_count(const ModelConfig& m) {
  const auto embed = mul(m.vocab, m.hidden, "parameters");
  std::uint64_t n = embed;
  for (const auto& [kind, count] : layer_groups(m)) n = add(n, mul(count, layer_parameter_count(m, kind), "parameters"));
  n = add(n, m.hidden);  // final norm
  if (!m.tie_word_embeddings) n = add(n, embed);
  return n;
}

std::uint64_t active_parameter_count(const ModelConfig& m) {
  std::uint64_t n = parameter_count(m);
  for (const auto& [kind, count] : layer_groups(m))
    if (kind.moe) n -= mul({count, m.experts - m.experts_per_token, expert_parameter_count(m)}, "parameters");
  return n;
}

std::uint64_t weight_bytes(const ModelConfig& m, const Precision& p) {
  std::uint64_t b = mul({m.vocab, m.hidden, p.w}, "weight bytes");  // the embedding
  if (!m.tie_word_embeddings) b = add(b, p.format_of("lm_head").bytes(m.vocab, m.hidden), "weight bytes");
  b = add(b, mul(m.hidden, p.w), "weight bytes");  // final norm
  for (const auto& [kind, count] : layer_groups(m)) {
    std::uint64_t layer = mul(layer_bias_count(m, kind), p.w, "weight bytes");
    if (kind.moe && m.router_bias_fp32) layer = add(layer, mul(m.experts, 4 - std::min<std::uint64_t>(p.w, 4)), "weight bytes");
    for (const auto& w : layer_weights(m, kind)) {
      const bool experts = w.name.rfind("experts_", 0) == 0;
      // Quantized formats group along each expert's rows: its bytes per expert, times E.
      const auto one = w.linear ? p.format_of(w.name).bytes(experts ? w.rows / m.experts : w.rows, w.cols)
                                : mul(w.elements(), p.w, "weight bytes");
      layer = add(layer, experts ? mul(one, m.experts, "weight bytes") : one, "weight bytes");
    }
    b = add(b, mul(layer, count, "weight bytes"), "weight bytes");
  }
  return b;
}

std::uint64_t kv_cache_bytes(const ModelConfig& m, std::uint64_t context, std::uint64_t batch, std::uint64_t c) {
  // MLA keeps one latent (kv_lora_rank + qk_rope elements) per token and layer, not K and V per head.
  if (m.uses_mla()) return mul({m.layers, m.mla.latent(), context, batch, c}, "KV-cache size");
  std::uint64_t b = 0;
  for (const auto& [kind, count] : layer_groups(m)) {
    const auto reach = kind.window ? kind.window : kind.chunk;
    const auto tokens = reach ? std::min(context, reach) : context;
    b = add(b, kv_cache_bytes(count, m.kv_heads, m.head_dim, tokens, batch, c), "KV-cache size");
  }
  return b;
}

std::uint64_t kv_bytes_per_token(const ModelConfig& m, std::uint64_t c) {
  if (m.uses_mla()) return kv_cache_bytes(m, 1, 1, c);
  return kv_cache_bytes(m.layers, m.kv_heads, m.head_dim, 1, 1, c);
}

void check_weight_format(const ModelConfig& m, const WeightFormat& f, const std::vector<std::string>& plain,
                         const std::string& origin) {
  if (f.group == 0 || f.group == ~std::uint64_t{0}) return;  // blocks round up; per-row groups always fit
  auto check = [&](const std::string& name, std::uint64_t K) {
    if (std::find(plain.begin(), plain.end(), name) != plain.end() || K % f.group == 0) return;
    throw InputError(origin + ": the quantization group size " + std::to_string(f.group) + " does not divide the " +
                     std::to_string(K) + " inputs of " + name + "; use a group size that divides every K");
  };
  for (const auto& [kind, count] : layer_groups(m))
    for (const auto& w : layer_weights(m, kind))
      if (w.linear) check(w.name, w.cols);
  check("lm_head", m.hidden);
}

double expected_experts_touched(std::uint64_t experts, std::uint64_t k, std::uint64_t tokens, double zipf) {
  return expected_experts_touched(experts, k, tokens, Routing{zipf == 0 ? Routing::Kind::uniform : Routing::Kind::zipf, zipf});
}

ModelConfig tensor_parallel_shard(const ModelConfig& m, std::uint64_t tp) {
  if (tp == 0) throw InputError("--tp must be a positive integer");
  if (tp == 1) return m;
  const std::string t = std::to_string(tp);
  auto split = [&](std::uint64_t v, const char* what) {
    if (v % tp != 0)
      throw InputError("--tp " + t + ": " + what + " (" + std::to_string(v) + ") is not divisible by " + t +
                       "; tensor parallelism splits it evenly across the GPUs");
    return v / tp;
  };
  ModelConfig s = m;
  s.tp = tp;
  s.heads = split(m.heads, "num_attention_heads");
  if (m.uses_mla()) {
    s.kv_heads = s.heads;
  } else if (m.kv_heads >= tp) {
    s.kv_heads = split(m.kv_heads, "num_key_value_heads");
  } else {
    if (tp % m.kv_heads != 0)
      throw InputError("--tp " + t + ": " + std::to_string(m.kv_heads) + " KV heads neither divide by " + t +
                       " nor divide it; engines replicate KV heads only when the degree is a multiple of them");
    s.kv_heads = 1;  // each GPU keeps a copy of the one KV head its query heads use
  }
  if (!m.all_layers_moe()) s.intermediate = split(m.intermediate, "intermediate_size");
  if (m.experts) s.expert_intermediate = split(m.expert_intermediate, "the experts' intermediate size");
  if (m.shared_intermediate) s.shared_intermediate = split(m.shared_intermediate, "the shared expert's intermediate size");
  s.vocab = m.vocab / tp + (m.vocab % tp ? 1 : 0);  // engines pad the vocabulary to a multiple
  return s;
}

std::string_view to_string(Phase p) { return p == Phase::prefill ? "prefill" : "decode"; }

namespace {

LayerOp make_linear(std::string name, std::uint64_t M, std::uint64_t N, std::uint64_t K, const Precision& p) {
  const LinearShape s{M, N, K};
  const WeightFormat f = p.format_of(name);
  LayerOp op{std::move(name), "linear", s.shape(), linear_cost(s, f, p.a, p.a)};
  op.compute = f.compute;
  op.weights = f.name;
  return op;
}

LayerOp make_elementwise(std::string name, OpCost cost) { return {std::move(name), "elementwise", {}, cost}; }

// A collective over the tp GPUs: no FLOPs or memory traffic counted, its bytes
// on the interconnect.
LayerOp make_all_reduce(std::string name, std::uint64_t payload, std::uint64_t tp) {
  LayerOp op{std::move(name), "all_reduce", Shape{{"bytes", payload}, {"gpus", tp}}, {}};
  op.link_bytes = all_reduce_link_bytes(payload, tp);
  return op;
}

// The experts of an MoE layer as grouped GEMMs over `tokens` routed tokens.
LayerOp make_grouped(std::string name, const ModelConfig& m, std::uint64_t tokens, std::uint64_t N, std::uint64_t K,
                     const Precision& p, const OpCost& cost) {
  const WeightFormat f = p.format_of(name);
  LayerOp op{std::move(name), "grouped_linear",
             Shape{{"tokens", tokens}, {"k", m.experts_per_token}, {"E", m.experts}, {"N", N}, {"K", K}}, cost};
  op.compute = f.compute;
  op.weights = f.name;
  return op;
}

}  // namespace

MoeCost moe_layer_cost(const ModelConfig& m, std::uint64_t tokens, const Precision& p) {
  const MoeShape s{tokens, m.experts_per_token, m.experts, m.hidden, m.expert_intermediate};
  const double touched = expected_experts_touched(m.experts, m.experts_per_token, tokens, m.routing);
  return moe_experts_cost(s, touched, p.format_of("experts_gate_up"), p.format_of("experts_down"), p.a);
}

std::vector<LayerOp> linear_ops(const ModelConfig& m, std::uint64_t M, const Precision& p, bool moe) {
  const auto h = m.hidden, D = m.head_dim;
  std::vector<LayerOp> ops;
  if (m.uses_mla()) {  // the projections as the prefill (expanded) form runs them
    for (const auto& w : layer_weights(m))
      if (w.linear && w.name != "gate_up_proj" && w.name != "down_proj") ops.push_back(make_linear(w.name, M, w.rows, w.cols, p));
  } else {
    ops.push_back(make_linear("qkv_proj", M, (m.heads + 2 * m.kv_heads) * D, h, p));
    ops.push_back(make_linear("o_proj", M, h, m.heads * D, p));
  }
  if (!moe) {
    ops.push_back(make_linear("gate_up_proj", M, 2 * m.intermediate, h, p));
    ops.push_back(make_linear("down_proj", M, h, m.intermediate, p));
  }
  ops.push_back(make_linear("lm_head", M, m.vocab, h, p));
  return ops;
}

namespace {

// The MLP of a layer: dense (gate_up, act, down) or a mixture of experts (router,
// the routed experts as grouped GEMMs, the shared expert).
void add_mlp_ops(std::vector<LayerOp>& ops, const ModelConfig& m, std::uint64_t M, const Precision& p, bool moe) {
  const auto h = m.hidden;
  if (!moe) {
    ops.push_back(make_linear("gate_up_proj", M, 2 * m.intermediate, h, p));
    ops.push_back(make_elementwise("act_mul", gated_activation_cost(M, m.intermediate, p.a)));
    ops.push_back(make_linear("down_proj", M, h, m.intermediate, p));
    return;
  }
  // The routed experts: the MoE benchmark's five steps with its costs (moe_experts_cost).
  const auto I = m.expert_intermediate;
  ops.push_back(make_linear("router", M, m.experts, h, p));
  const auto experts = moe_layer_cost(m, M, p);
  ops.push_back(make_elementwise("experts_permute", experts.permute));
  ops.push_back(make_grouped("experts_gate_up", m, M, 2 * I, h, p, experts.gate_up));
  ops.push_back(make_elementwise("experts_act_mul", experts.act));
  ops.push_back(make_grouped("experts_down", m, M, h, I, p, experts.down));
  ops.push_back(make_elementwise("experts_combine", experts.combine));
  if (m.shared_intermediate) {
    ops.push_back(make_linear("shared_gate_up", M, 2 * m.shared_intermediate, h, p));
    ops.push_back(make_elementwise("shared_act_mul", gated_activation_cost(M, m.shared_intermediate, p.a)));
    ops.push_back(make_linear("shared_down", M, h, m.shared_intermediate, p));
  }
}

}  // namespace

namespace {
void add_attention_ops(std::vector<LayerOp>& ops, const ModelConfig& m, const StepShape& step, const Precision& p,
                       const LayerKind& kind);
void add_mla_ops(std::vector<LayerOp>& ops, const ModelConfig& m, const StepShape& step, const Precision& p);
}  // namespace

std::vector<LayerOp> layer_ops(const ModelConfig& m, const StepShape& step, const Precision& p, const LayerKind& kind) {
  const auto M = mul(step.batch, step.new_tokens, "tokens");
  const auto h = m.hidden;
  const bool sandwich = m.norms_per_layer == 4;  // gemma2/3: norms before and after attention and MLP
  std::vector<LayerOp> ops;
  ops.push_back(make_elementwise("attn_norm", rmsnorm_cost(M, h, p.a, p.w)));
  if (m.uses_mla()) {
    add_mla_ops(ops, m, step, p);
  } else {
    add_attention_ops(ops, m, step, p, kind);
  }
  if (m.tp > 1) ops.push_back(make_all_reduce("attn_all_reduce", mul({M, h, p.a}, "all-reduce bytes"), m.tp));
  if (sandwich) ops.push_back(make_elementwise("post_attn_norm", rmsnorm_cost(M, h, p.a, p.w)));
  ops.push_back(make_elementwise("mlp_norm", rmsnorm_cost(M, h, p.a, p.w)));
  add_mlp_ops(ops, m, M, p, kind.moe);
  if (m.tp > 1) ops.push_back(make_all_reduce("mlp_all_reduce", mul({M, h, p.a}, "all-reduce bytes"), m.tp));
  if (sandwich) ops.push_back(make_elementwise("post_mlp_norm", rmsnorm_cost(M, h, p.a, p.w)));
  return ops;
}

namespace {

// Grouped-query attention: fused qkv, (q/k norms), rope, K/V append, attention
// (within the layer's window), o_proj.
void add_attention_ops(std::vector<LayerOp>& ops, const ModelConfig& m, const StepShape& step, const Precision& p,
                       const LayerKind& kind) {
  const auto B = step.batch, S = step.new_tokens;
  const auto M = mul(B, S, "tokens");
  const auto h = m.hidden, D = m.head_dim;
  const std::string window = kind.window  ? "sliding window " + std::to_string(kind.window)
                             : kind.chunk ? "chunks of " + std::to_string(kind.chunk)
                                          : "";
  ops.push_back(make_linear("qkv_proj", M, (m.heads + 2 * m.kv_heads) * D, h, p));
  if (m.qk_norm) {  // per head over D: q and k read and written, two D-wide scales
    const auto qk = mul({M, m.heads + m.kv_heads, D}, "q/k elements");
    ops.push_back(make_elementwise("qk_norm", elementwise_cost(mul(p.a, qk), mul({2, D, p.w}), mul(p.a, qk))));
  }
  ops.push_back(make_elementwise("rope", rope_cost(M, m.heads, m.kv_heads, D, p.a)));
  const KvAppendShape app{B, S, m.kv_heads, D};
  ops.push_back({"kv_append", "kv_append", app.shape(), kv_append_cost(app, p.a, p.c)});
  LayerOp attention;
  if (step.phase == Phase::prefill) {
    const PrefillAttentionShape att{B, m.heads, m.kv_heads, S, D};
    attention = {"attention", "prefill_attention", att.shape(), prefill_attention_cost(att, p.a, kind.window, 0, kind.chunk)};
    if (kind.window) attention.shape.set("window", kind.window);
    if (kind.chunk) attention.shape.set("chunk", kind.chunk);
  } else {
    // A sliding-window layer reads at most its window of the cache; a chunked
    // layer the tokens of the new token's chunk before it (context mod chunk).
    const auto L = kind.window ? std::min(step.context, kind.window) : kind.chunk ? step.context % kind.chunk : step.context;
    // S new tokens: the cache holds them too (L + S - 1 keys, so S = 1 reads L),
    // and new token i sees L + i of them (the decode_attention_multi benchmark's formula).
    const AttentionShape att{B, m.heads, m.kv_heads, L + S - 1, D};
    attention = {"attention", "decode_attention", att.shape(), decode_attention_cost(att, p.c, p.a, DecodeQueries{S, {}})};
    if (S > 1) attention.shape.set("S", S);
  }
  attention.variant = window;
  if (m.attention_sinks) {  // gpt-oss: one learned logit per head joins each softmax (its FLOPs: a few per row, not counted)
    attention.cost.bytes.weights = add(attention.cost.bytes.weights, mul(m.heads, p.w), "sink bytes");
    attention.shape.set("sinks", 1);
  }
  ops.push_back(attention);
  ops.push_back(make_linear("o_proj", M, h, m.heads * D, p));
}

// Multi-head latent attention. Both phases: the q path (q_proj, or q_a through
// its norm and q_b), kv_a (the new tokens' latents), its norm, rope on the rope
// parts, the latent append. Prefill, expanded: kv_b_proj makes every token's
// per-head K (nope) and V, then causal MHA. Decode, absorbed: q_nope times W_UK
// per head, attention over the latent cache, times W_UV per head (W_UK and W_UV
// are the two halves of kv_b_proj).
void add_mla_ops(std::vector<LayerOp>& ops, const ModelConfig& m, const StepShape& step, const Precision& p) {
  const auto& a = m.mla;
  const auto B = step.batch, S = step.new_tokens;
  const auto M = mul(B, S, "tokens");
  const auto h = m.hidden, H = m.heads, R = a.kv_lora_rank, P = a.qk_rope;
  if (a.q_lora_rank) {
    ops.push_back(make_linear("qkv_a_proj", M, a.q_lora_rank + R + P, h, p));
    ops.push_back(make_elementwise("q_a_norm", rmsnorm_cost(M, a.q_lora_rank, p.a, p.w)));
    ops.push_back(make_linear("q_b_proj", M, H * m.head_dim, a.q_lora_rank, p));
  } else {
    ops.push_back(make_linear("q_proj", M, H * m.head_dim, h, p));
    ops.push_back(make_linear("kv_a_proj", M, R + P, h, p));
  }
  ops.push_back(make_elementwise("kv_a_norm", rmsnorm_cost(M, R, p.a, p.w)));
  ops.push_back(make_elementwise("rope", rope_cost(M, H, 1, P, p.a)));
  ops.push_back({"kv_append", "kv_append", Shape{{"tokens", M}, {"latent", R + P}}, latent_append_cost(M, R + P, p.a, p.c)});
  const WeightFormat kvb = p.format_of("kv_b_proj");
  if (step.phase == Phase::prefill) {
    ops.push_back(make_linear("kv_b_proj", M, H * (a.qk_nope + a.v_head), R, p));
    const PrefillAttentionShape att{B, H, H, S, m.head_dim};
    LayerOp op{"attention", "prefill_attention", att.shape(), prefill_attention_cost(att, p.a, 0, a.v_head)};
    op.shape.set("Dv", a.v_head);
    op.variant = "MLA, expanded";
    ops.push_back(op);
  } else {
    auto batched = [&](std::string name, std::uint64_t N, std::uint64_t K, std::uint64_t rows) {
      // Each head's slice of kv_b_proj: `rows` x R as stored.
      LayerOp op{std::move(name), "batched_linear", Shape{{"G", H}, {"M", M}, {"N", N}, {"K", K}},
                 batched_linear_cost(H, {M, N, K}, mul(H, kvb.bytes(rows, R), "weight bytes"), p.a, p.a)};
      op.compute = kvb.compute;
      op.weights = kvb.name;
      return op;
    };
    if (S > 1)
      throw InputError("--new-tokens " + std::to_string(S) +
                       ": multi-token decode steps are modelled for MHA/GQA attention, not yet for MLA (" + m.name +
                       "); use --new-tokens 1");
    ops.push_back(batched("q_absorb", R, a.qk_nope, a.qk_nope));  // q_nope [nope] x W_UK -> [R] per head
    const LatentAttentionShape att{B, H, step.context, R, P};
    LayerOp op{"attention", "decode_attention", att.shape(), latent_attention_cost(att, p.c, p.a)};
    op.variant = "MLA, absorbed";
    ops.push_back(op);
    ops.push_back(batched("v_absorb", a.v_head, R, a.v_head));  // [R] x W_UV -> [v_head] per head
  }
  ops.push_back(make_linear("o_proj", M, h, H * a.v_head, p));
}

}  // namespace

std::vector<LayerOp> step_ops(const ModelConfig& m, const StepShape& step, const Precision& p) {
  if (step.batch == 0 || step.new_tokens == 0) throw InputError("batch and new tokens per step must be positive");
  if (step.phase == Phase::decode && step.context == 0) throw InputError("a decode step needs a context length >= 1");
  const auto M = mul(step.batch, step.new_tokens, "tokens");
  std::vector<LayerOp> ops;
  // Embedding gather: at most one row per distinct token.
  ops.push_back(make_elementwise("embed", elementwise_cost(0, mul({p.w, std::min(M, m.vocab), m.hidden}), mul({p.a, M, m.hidden}))));
  // Vocabulary-parallel embedding: each GPU looks up its rows, an all-reduce sums them.
  if (m.tp > 1) ops.push_back(make_all_reduce("embed_all_reduce", mul({M, m.hidden, p.a}, "all-reduce bytes"), m.tp));
  // Each kind of layer; an op equal in every respect across kinds is one entry
  // with the layers of all of them.
  const auto groups = layer_groups(m);
  const bool mixed_mlp = std::any_of(groups.begin(), groups.end(), [](const auto& g) { return g.first.moe; }) &&
                         std::any_of(groups.begin(), groups.end(), [](const auto& g) { return !g.first.moe; });
  const std::size_t first = ops.size();
  for (const auto& [kind, count] : groups)
    for (auto op : layer_ops(m, step, p, kind)) {
      op.count = count;
      if (mixed_mlp && !kind.moe && (op.name == "gate_up_proj" || op.name == "act_mul" || op.name == "down_proj"))
        op.variant = "dense layers";
      auto same = std::find_if(ops.begin() + static_cast<std::ptrdiff_t>(first), ops.end(), [&](const LayerOp& o) {
        return o.name == op.name && o.variant == op.variant && o.shape == op.shape && o.cost.flops == op.cost.flops &&
               o.cost.bytes.total() == op.cost.bytes.total();
      });
      if (same != ops.end()) {
        same->count += count;
        continue;
      }
      // A variant goes right after the other variants of its op.
      auto last = std::find_if(ops.rbegin(), ops.rend(), [&](const LayerOp& o) { return o.name == op.name; });
      if (last != ops.rend() && static_cast<std::size_t>(ops.rend() - last) > first)
        ops.insert(last.base(), std::move(op));
      else
        ops.push_back(std::move(op));
    }
  ops.push_back(make_elementwise("final_norm", rmsnorm_cost(M, m.hidden, p.a, p.w)));
  // Logits for the last token of each sequence only in prefill; for every new
  // token of a decode step (speculative verification checks each drafted token).
  const auto logit_rows = step.phase == Phase::decode ? M : step.batch;
  ops.push_back(make_linear("lm_head", logit_rows, m.vocab, m.hidden, p));
  if (m.tp > 1) {  // each GPU computed its slice of the vocabulary
    LayerOp op{"logits_all_gather", "all_gather", Shape{{"bytes", mul({logit_rows, m.vocab, m.tp, p.a})}, {"gpus", m.tp}}, {}};
    op.link_bytes = all_gather_link_bytes(mul({logit_rows, m.vocab, m.tp, p.a}, "logit bytes"), m.tp);
    ops.push_back(op);
  }
  return ops;
}

}  // namespace phasebench
