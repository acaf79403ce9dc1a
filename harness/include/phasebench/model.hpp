#pragma once
// Transformer configs from Hugging Face config.json, and what follows from
// them: per-layer operation lists for a prefill and a decode step, parameter
// counts and KV-cache bytes per token.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "phasebench/dtype.hpp"
#include "phasebench/routing.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

// What may differ between the layers of one model: the attention's reach
// (a sliding window of `window` tokens, or Llama 4's chunks of `chunk` tokens
// where a query sees only the earlier tokens of its own chunk; 0 and 0: full
// attention) and whether the MLP is a mixture of experts.
struct LayerKind {
  std::uint64_t window = 0;
  std::uint64_t chunk = 0;
  bool moe = false;
  bool operator==(const LayerKind& o) const { return window == o.window && chunk == o.chunk && moe == o.moe; }
};

struct ModelConfig {
  std::string name;        // short name, or the file's stem for a path
  std::string source;      // the file it was read from
  std::string model_type;  // llama, llama4, mistral, mixtral, qwen2, qwen3, qwen3_moe, deepseek_v2/v3, gemma, gemma2, gemma3, phi3, gpt_oss
  std::uint64_t hidden = 0;        // h
  std::uint64_t intermediate = 0;  // I (of the dense MLP; of each expert when every layer is MoE)
  std::uint64_t layers = 0;
  std::uint64_t heads = 0;     // Hq
  std::uint64_t kv_heads = 0;  // Hkv
  std::uint64_t head_dim = 0;  // D
  std::uint64_t vocab = 0;     // V
  std::uint64_t max_position = 0;  // max_position_embeddings (0: not given)
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections carry biases
  bool o_bias = false;    // output projection carries a bias
  bool mlp_bias = false;
  int norms_per_layer = 2;        // gemma2 and gemma3 have four
  bool qk_norm = false;           // RMSNorm over head_dim on q and k (qwen3, gemma3)
  bool attention_sinks = false;   // one learned logit per head (gpt-oss)
  bool fused_qkv_checkpoint = false;      // the checkpoint stores one qkv_proj (phi3)
  bool fused_gate_up_checkpoint = false;  // the checkpoint stores one gate_up_proj (phi3)
  // Per layer: the sliding window in tokens (0: full attention). Empty: all full.
  std::vector<std::uint64_t> windows;
  // Per layer: the attention chunk in tokens (llama4's chunked local attention; 0: none). Empty: none.
  std::vector<std::uint64_t> chunks;
  // Mixture of experts (experts == 0: a dense model): each MoE layer routes every
  // token to `experts_per_token` of `experts` experts of width expert_intermediate,
  // beside a shared expert of width shared_intermediate (0: none).
  std::uint64_t experts = 0, experts_per_token = 0, expert_intermediate = 0, shared_intermediate = 0;
  std::vector<bool> moe_layers;  // per layer (empty: none)
  // Multi-head latent attention (deepseek_v2/v3; kv_lora_rank 0: none). Queries
  // through a q_lora_rank bottleneck (0: a plain q_proj), K and V from a cached
  // latent of kv_lora_rank plus a shared rope key of qk_rope; head_dim is then
  // the q/k width qk_nope + qk_rope and kv_heads = heads (the expanded form).
  struct Mla {
    std::uint64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
    std::uint64_t latent() const { return kv_lora_rank + qk_rope; }  // cached elements per token and layer
  } mla;
  bool uses_mla() const { return mla.kv_lora_rank != 0; }
  std::uint64_t mtp_layers = 0;  // DeepSeek-V3's multi-token-prediction layers: not part of the model counted
  bool router_bias = false, expert_bias = false;
  bool router_bias_fp32 = false;  // DeepSeek-V3 stores its e_score_correction_bias in fp32
  // How tokens pick experts (not from the config: `phasebench model --routing`; routing.hpp).
  Routing routing;
  // Tensor parallel degree of the shard this config describes (tensor_parallel_shard).
  std::uint64_t tp = 1;
  // Weights as the checkpoint's quantization_config stores them (none: plain),
  // and the linear layers it leaves plain (our names: lm_head, router, qkv_proj, ...).
  std::optional<WeightFormat> quantization;
  std::vector<std::string> not_quantized;
  // What the model of this family leaves out (the text output says it).
  std::vector<std::string> notes;

  LayerKind layer_kind(std::uint64_t layer) const;
  // Every layer's MLP is a mixture of experts: the model has no dense MLP.
  bool all_layers_moe() const;
};

// A short name from harness/data/models/index.json, or a path to a config.json.
ModelConfig load_model(const std::string& name_or_path);
// Parses config.json text; `origin` names it in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

struct ShippedModel {
  std::string name, file, hf_repo;
  std::uint64_t published_params = 0;  // exact (safetensors metadata); 0: only a rounded figure is published
  std::string published;               // the published figure as written ("8.2B"), else empty
  std::string published_active;        // MoE: active parameters as published ("3.3B")
  bool active_without_input_embedding = false;  // the vendor's active count leaves the input embedding out
};
std::vector<ShippedModel> shipped_models();

// The layer kinds of a model and how many layers of each, in the order they first appear.
std::vector<std::pair<LayerKind, std::uint64_t>> layer_groups(const ModelConfig& m);

std::uint64_t parameter_count(const ModelConfig& m);
// Parameters a token uses: everything but the experts it is not routed to
// (with the input embedding; DeepSeek and gpt-oss publish it without: subtract V*h).
std::uint64_t active_parameter_count(const ModelConfig& m);
// One layer of kind `kind` (default: full attention, dense MLP).
std::uint64_t layer_parameter_count(const ModelConfig& m, const LayerKind& kind = {});
// Bytes of all weights stored as `p` says (quantized linear layers with their scales).
std::uint64_t weight_bytes(const ModelConfig& m, const Precision& p);
// KV-cache bytes of `batch` sequences of `context` tokens: a sliding-window layer
// keeps at most its window, a chunked layer at most one chunk.
std::uint64_t kv_cache_bytes(const ModelConfig& m, std::uint64_t context, std::uint64_t batch, std::uint64_t c);
// Per token of context while no window is full (all layers).
std::uint64_t kv_bytes_per_token(const ModelConfig& m, std::uint64_t c);
// InputError (naming `origin`) when a quantized format's group size does not
// divide the inputs K of a linear layer it applies to (those not in `plain`).
void check_weight_format(const ModelConfig& m, const WeightFormat& f, const std::vector<std::string>& plain,
                         const std::string& origin);

enum class Phase { prefill, decode };
std::string_view to_string(Phase p);

// One operation of a step, as an engine runs it (projections fused: qkv_proj,
// gate_up_proj), with its shape and cost from workload.hpp.
struct LayerOp {
  std::string name;            // qkv_proj, o_proj, gate_up_proj, down_proj, attention, kv_append, attn_norm, ...
  std::string kind = "linear";  // linear, grouped_linear, decode_attention, prefill_attention, kv_append, elementwise
  Shape shape;                 // its dimensions (workload.hpp's typed shapes); none for elementwise ops
  OpCost cost;
  std::uint64_t count = 1;  // how many times per step (layers for per-layer ops)
  std::string variant = "";  // what sets it apart from ops of the same name: "sliding window 4096", "dense layers"
  DType compute = DType::bf16;  // linear ops: the type their math runs in (their weights' WeightFormat::compute)
  std::string weights = "";     // linear ops: their weight format
  std::uint64_t link_bytes = 0;  // collectives (tensor parallel): bytes each GPU sends over its interconnect
};

struct StepShape {
  Phase phase = Phase::decode;
  std::uint64_t batch = 1;
  std::uint64_t new_tokens = 1;  // S: prompt length for prefill, 1 for decode
  std::uint64_t context = 0;     // L: tokens already in the KV cache (decode)
};

// The ops of one transformer layer of kind `kind` for a step (default: full
// attention, dense MLP: the layer the whole-layer benchmark runs).
std::vector<LayerOp> layer_ops(const ModelConfig& m, const StepShape& step, const Precision& p, const LayerKind& kind = {});
// Whole step: each layer kind's ops (count = its layers; ops equal across kinds
// merged), the final norm and lm_head. lm_head runs on the last token of each
// sequence only (what serving engines do).
std::vector<LayerOp> step_ops(const ModelConfig& m, const StepShape& step, const Precision& p);
// The linear layers (one entry per distinct projection) for M tokens: a layer's
// projections (its dense MLP unless `moe`) and lm_head.
std::vector<LayerOp> linear_ops(const ModelConfig& m, std::uint64_t M, const Precision& p, bool moe = false);

// The routed experts of one MoE layer of `m` over `tokens` tokens (its experts'
// shape, m.routing's expected experts touched, the weight formats of p): the
// costs the analytical model's experts_* ops carry and the MoE benchmark counts.
MoeCost moe_layer_cost(const ModelConfig& m, std::uint64_t tokens, const Precision& p);

// The weights one layer holds for inference, as engines store them (qkv and
// gate_up fused; all experts of a kind as one E*rows x cols matrix): elements
// rows x cols (a norm's scale: 1 x h). The one list the whole-layer benchmark
// allocates, its footprint counts, the parameter counts and weight bytes sum.
// `linear`: a linear layer's weight (quantizable), else a norm scale or sinks.
struct LayerWeight {
  std::string name;
  std::uint64_t rows = 0, cols = 0;
  bool linear = true;
  std::uint64_t elements() const;
};
std::vector<LayerWeight> layer_weights(const ModelConfig& m, const LayerKind& kind = {});

// Expected number of distinct experts that `tokens` tokens touch when each picks
// `k` of `experts` (routing.hpp): zipf 0 is uniform routing, E * (1 - (1 - k/E)^T).
double expected_experts_touched(std::uint64_t experts, std::uint64_t k, std::uint64_t tokens, double zipf = 0);
// One GPU's part of the model under `tp`-way tensor parallelism as Megatron-LM
// and vLLM shard it: attention heads split (KV heads too, or one replicated per
// GPU when there are fewer than tp), the MLP's and every expert's intermediate
// width split (column-parallel gate_up, row-parallel down), the vocabulary split
// (padded up); norms, routers and MLA's kv_a projections and latent cache
// replicated. Its step_ops add an all-reduce after attention and after the MLP
// in every layer, one after the embedding and an all-gather of the logits.
// InputError when a width does not divide by tp.
ModelConfig tensor_parallel_shard(const ModelConfig& m, std::uint64_t tp);

}  // namespace phasebench
