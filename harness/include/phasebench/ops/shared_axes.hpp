#pragma once
// Sweep axes that several groups declare alike (harness/src/ops/common_axes.cpp):
// each with the old flag that fed all of them as its alias, and one default per
// backend, so an old command line gives the points it gave.
#include <string>

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

}  // namespace phasebench
