#pragma once
// Sweeps declared as data: from a model's shapes and the axes (batch, prompt,
// context, dtype) build the list of benchmark points, each with its name (a
// path, DESIGN.md "Names"), its structured parameters and the OpRequest the
// backend prepares.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend.hpp"
#include "phasebench/model.hpp"

namespace phasebench {

// The groups of benchmarks a sweep can contain.
inline const std::vector<std::string>& sweep_groups() {
  static const std::vector<std::string> g{"prefill_linear", "decode_linear", "decode_attention", "kv_append",
                                          "prefill_attention", "layer", "free"};
  return g;
}

struct SweepConfig {
  std::vector<std::string> models{"llama-3.1-8b"};
  // Models whose attention shapes (decode and prefill attention) are swept;
  // empty: `models`. On a GPU, with no --model given, Llama-3.1-8B and 70B
  // (4 and 8 query heads per KV head).
  std::vector<std::string> attention_models;
  bool models_given = false;  // --model (or PHASEBENCH_MODEL) was set
  std::vector<DType> dtypes;                   // empty: the backend's default
  std::vector<std::uint64_t> prefill_batches;  // prefill linear and attention
  std::vector<std::uint64_t> prompts;
  std::vector<std::uint64_t> decode_batches;     // decode linear (GEMV) rows
  std::vector<std::uint64_t> attention_batches;  // decode attention
  std::vector<std::uint64_t> contexts;           // decode attention
  std::vector<std::uint64_t> append_batches;     // KV append
  std::uint64_t append_context = 0;              // cache length KV append writes into
  std::vector<std::uint64_t> prefill_attention_prompts;
  std::vector<LinearShape> free_shapes;  // --shape M,N,K
  std::set<std::string> groups;          // empty: every group with points
  std::uint64_t page_size = 16;
  bool compare_blas = true;  // put the vendor-library row beside our own kernels
};

// The backend's default axes (the CPU's finish in a few minutes on 2 cores; the
// GPU's in a few minutes on one GPU), filled into empty fields of `c`.
void apply_defaults(SweepConfig& c, const Backend& backend);

struct Point {
  std::string name;    // e.g. decode/gemv/llama-3.1-8b.down_proj/bf16/batch:8/impl:own
  std::string phase;   // prefill | decode | free
  std::string op;      // linear | gemv | attention | attention_paged | kv_append | kv_append_paged
  std::string model;   // short name, or "custom" for free-form shapes
  std::string target;  // projection name (qkv_proj, ...) or empty
  std::map<std::string, std::uint64_t> args;  // batch, prompt, context, page_size; layer: + layers, vocab
  OpRequest request;
};

// Every point of the sweep that the backend implements. Shapes that cannot run
// (e.g. do not fit) stay in the list: the fixture skips them with the reason.
std::vector<Point> build_sweep(const SweepConfig& c, const Backend& backend);

// "1,2,4" or "1-256" (powers of two) or "64..4096" (powers of two); throws InputError.
std::vector<std::uint64_t> parse_size_list(const std::string& text, const std::string& flag);
LinearShape parse_shape(const std::string& text);

}  // namespace phasebench
