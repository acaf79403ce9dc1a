#pragma once
// Sweeps declared as data: the operations' sweep groups (phasebench/op.hpp, one
// file per operation in harness/src/ops/) make the points of each model and
// dtype from the axes' values, each with its name (a path, docs/design.md
// "Names"), its structured args, its request and its cost.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "backend.hpp"
#include "phasebench/model.hpp"
#include "phasebench/op.hpp"

namespace phasebench {

struct SweepConfig {
  std::vector<std::string> models{"llama-3.1-8b"};
  // Models whose attention shapes (decode and prefill attention) are swept;
  // empty: `models`. On a GPU, with no --model given, Llama-3.1-8B and 70B
  // (4 and 8 query heads per KV head).
  std::vector<std::string> attention_models;
  // Models the moe group runs for; empty: with --model given, the mixture-of-
  // experts models among them; else Mixtral-8x7B, Qwen3-30B-A3B and
  // DeepSeek-V2-Lite on a GPU, Qwen3-30B-A3B on a CPU (the smallest experts).
  std::vector<std::string> moe_models;
  // Models the latent_attention group (MLA decode attention) runs for; empty:
  // with --model given, the MLA models among them; else DeepSeek-V2-Lite and
  // DeepSeek-V3 on a GPU (16 and 128 heads), DeepSeek-V2-Lite on a CPU.
  std::vector<std::string> mla_models;
  bool models_given = false;  // --model (or PHASEBENCH_MODEL) was set
  std::vector<DType> dtypes;  // empty: the backend's default
  std::set<std::string> groups;  // empty: every group with points
  bool compare_blas = true;      // put the vendor-library row beside our own kernels
  AxisValues axes;               // from flags; apply_defaults fills the rest
};

// The backend's defaults (the CPU's sweep finishes in a few minutes on 2 cores;
// the GPU's in a few minutes on one GPU) for what `c` leaves empty, and each
// axis's check of its values.
void apply_defaults(SweepConfig& c, const Backend& backend);

// Every point of the sweep that the backend implements and that applies (our
// GEMV for small batches). Points that cannot run (e.g. do not fit) stay in the
// list: the fixture skips them with the reason.
std::vector<Point> build_sweep(const SweepConfig& c, const Backend& backend);

// "1,2,4", "1..256" or "1-256" (every power of two from the first bound up to the
// second); throws InputError naming `flag`.
std::vector<std::uint64_t> parse_size_list(const std::string& text, const std::string& flag);
LinearShape parse_shape(const std::string& text);

}  // namespace phasebench
