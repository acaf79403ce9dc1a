#pragma once
// What several sweep groups declare alike (harness/src/ops/common_axes.cpp): axes,
// each with the old flag that fed all of them as its alias and one default per
// backend, so an old command line gives the points it gave; and the attention
// groups' models.
#include <string>
#include <vector>

#include "phasebench/op.hpp"

namespace phasebench {

// Prefill batch sizes (--batches): prefill linear layers, prefill attention, whole layers.
AxisDecl prefill_batch_axis(std::string name, std::string help);
// Prefill prompt lengths (--prompts): prefill linear layers, whole layers.
AxisDecl prompt_axis(std::string name, std::string help);
// Decode attention batch sizes (--attention-batches): decode attention, decode whole layers.
AxisDecl attention_batch_axis(std::string name, std::string help);
// Decode context lengths (--contexts): decode attention, decode whole layers.
AxisDecl context_axis(std::string name, std::string help);
// The paged KV cache's page size in tokens (--page-size, a multiple of 16): one value.
AxisDecl page_size_axis();
// GPUs a point spans (NCCL ranks, one a GPU; 1 to 72): the collectives and the
// tensor-parallel whole layers; `phasebench run --gpus` sets it in every group that has it.
AxisDecl gpus_axis(std::string help, std::vector<std::uint64_t> gpu_default, std::vector<std::uint64_t> cpu_default);

// The models the attention groups (decode, prefill, KV append) run for: grouped-query
// attention, every model but the MLA ones (whose attention is latent_attention's;
// their projections still run); with no --model given on a GPU, Llama-3.1-8B and
// 70B (4 and 8 query heads per KV head).
bool grouped_query_attention(const ModelConfig& m);
inline constexpr const char* kGroupedQueryAttentionModels = "grouped-query attention models (all but MLA)";
std::vector<std::string> attention_gpu_models();

}  // namespace phasebench
