#pragma once
// The whole-layer operation (harness/src/ops/layer.cpp): the ops of one
// transformer layer (model.hpp's layer_ops) run in sequence, for a prefill step
// (batch x prompt) or a decode step (batch at a context), on one GPU or
// tensor-parallel over several (each GPU its shard, all-reduces between).
#include <cstdint>
#include <vector>

#include "phasebench/model.hpp"
#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kLayer = "layer";

// A layer of model `m` (its dimensions; layers and vocabulary are not part of the
// op): prefill of `n` prompt tokens, or the decode step whose new token is the
// n-th of the context (it is appended at position n - 1 and attention reads n).
// A layer request's options (OpRequest::options).
struct LayerOptions {
  int norms_per_layer = 2;  // RMSNorms per layer (Gemma's sandwich norms: 4)
};

// With `gpus` > 1 the layer is sharded over that many GPUs as
// tensor_parallel_shard (model.hpp) shards it; the shape then has "gpus" (absent: 1).
OpRequest layer_request(const ModelConfig& m, Phase phase, std::uint64_t batch, std::uint64_t n, DType dtype,
                        std::uint64_t seed = 0x5eed, std::uint64_t gpus = 1);
// The model config a layer request's dimensions describe (the whole layer:
// layers = 1, vocab = 0), the GPUs it is sharded over, one GPU's shard of it
// (tensor_parallel_shard; the model itself for one GPU), its step, and one GPU's
// ops from model.hpp's layer_ops (the single definition of what a layer runs and
// costs; with all-reduces after attention and after the MLP when sharded).
ModelConfig layer_model(const OpRequest& r);
std::uint64_t layer_gpus(const OpRequest& r);
ModelConfig layer_shard(const OpRequest& r);
StepShape layer_step(const OpRequest& r);
std::vector<LayerOp> layer_request_ops(const OpRequest& r);

}  // namespace phasebench
