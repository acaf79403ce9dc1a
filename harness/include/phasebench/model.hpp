#pragma once
// Transformer configs from Hugging Face config.json, and what follows from
// them: per-layer operation lists for a prefill and a decode step, parameter
// counts and KV-cache bytes per token.
#include <cstdint>
#include <string>
#include <vector>

#include "phasebench/dtype.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

struct ModelConfig {
  std::string name;        // short name, or the file's stem for a path
  std::string source;      // the file it was read from
  std::string model_type;  // llama, mistral, qwen2, gemma, gemma2, phi3
  std::uint64_t hidden = 0;        // h
  std::uint64_t intermediate = 0;  // I
  std::uint64_t layers = 0;
  std::uint64_t heads = 0;     // Hq
  std::uint64_t kv_heads = 0;  // Hkv
  std::uint64_t head_dim = 0;  // D
  std::uint64_t vocab = 0;     // V
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections carry biases
  bool o_bias = false;    // output projection carries a bias
  bool mlp_bias = false;
  int norms_per_layer = 2;        // gemma2 has four
  bool fused_qkv_checkpoint = false;      // the checkpoint stores one qkv_proj (phi3)
  bool fused_gate_up_checkpoint = false;  // the checkpoint stores one gate_up_proj (phi3)
};

// A short name from harness/data/models/index.json, or a path to a config.json.
ModelConfig load_model(const std::string& name_or_path);
// Parses config.json text; `origin` names it in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

struct ShippedModel {
  std::string name, file, hf_repo;
  std::uint64_t published_params = 0;
};
std::vector<ShippedModel> shipped_models();

std::uint64_t parameter_count(const ModelConfig& m);
std::uint64_t layer_parameter_count(const ModelConfig& m);
std::uint64_t kv_bytes_per_token(const ModelConfig& m, std::uint64_t c);

enum class Phase { prefill, decode };
std::string_view to_string(Phase p);

// One operation of a step, as an engine runs it (projections fused: qkv_proj,
// gate_up_proj), with its shape and cost from workload.hpp.
struct LayerOp {
  std::string name;            // qkv_proj, o_proj, gate_up_proj, down_proj, attention, kv_append, attn_norm, ...
  std::string kind = "linear";  // linear, decode_attention, prefill_attention, kv_append, elementwise
  Shape shape;                 // its dimensions (workload.hpp's typed shapes); none for elementwise ops
  OpCost cost;
  std::uint64_t count = 1;  // how many times per step (layers for per-layer ops)
};

struct StepShape {
  Phase phase = Phase::decode;
  std::uint64_t batch = 1;
  std::uint64_t new_tokens = 1;  // S: prompt length for prefill, 1 for decode
  std::uint64_t context = 0;     // L: tokens already in the KV cache (decode)
};

// The ops of one transformer layer for a step.
std::vector<LayerOp> layer_ops(const ModelConfig& m, const StepShape& step, const Precision& p);
// Whole step: the layer's ops (count = layers), the final norm and lm_head.
// lm_head runs on the last token of each sequence only (what serving engines do).
std::vector<LayerOp> step_ops(const ModelConfig& m, const StepShape& step, const Precision& p);
// The linear layers (one entry per distinct projection) for M tokens.
std::vector<LayerOp> linear_ops(const ModelConfig& m, std::uint64_t M, const Precision& p);

// The weights one layer holds for inference, as engines store them (qkv and
// gate_up fused): elements rows x cols (a norm's scale: 1 x h). The one list the
// whole-layer benchmark allocates, its footprint counts and layer_ops reads.
struct LayerWeight {
  std::string name;
  std::uint64_t rows = 0, cols = 0;
  std::uint64_t elements() const;
};
std::vector<LayerWeight> layer_weights(const ModelConfig& m);

}  // namespace phasebench
