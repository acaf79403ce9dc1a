#pragma once
// The analytical model: from a config, a step shape and a GPU's ceilings, predict
// each operation's time on the roofline (max(FLOPs/P, bytes/W)), phase totals,
// TTFT and per-token latency, KV-cache size and the largest batch that fits.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phasebench/gpu_specs.hpp"
#include "phasebench/model.hpp"
#include "phasebench/roofline.hpp"

namespace phasebench {

struct EstimateInputs {
  std::uint64_t batch = 1;
  std::uint64_t prompt = 1024;   // S of the prefill step
  std::uint64_t context = 1024;  // L of the decode step
  // S new tokens per sequence in the decode step (speculative verification of
  // S - 1 drafted tokens plus one: causal among themselves, logits for all S).
  std::uint64_t new_tokens = 1;
  DType dtype = DType::bf16;     // weights (and activations unless 8-bit)
  DType kv_dtype = DType::bf16;
  CeilingSource ceiling = CeilingSource::datasheet;
  // The linear layers' weights (--weight-dtype); nothing: the config's
  // quantization_config, else plain `dtype`.
  std::optional<WeightFormat> weights;
  // A whole request: `generate` tokens after the prompt (0: the two steps only).
  std::uint64_t generate = 0;
  // A prompt or context beyond max_position_embeddings: an InputError, or with
  // this a warning in the text and the JSON.
  bool allow_long_context = false;
  // Tensor-parallel degree (tensor_parallel_shard): every op per GPU, plus the
  // collectives timed on the GPU's interconnect.
  std::uint64_t tp = 1;
  // Each GPU's power draw in watts (--power), held constant over the steps:
  // the energy estimate (EnergyEstimate) is made only when it is given.
  std::optional<double> power_w;
  // Measured collectives (--collectives FILE): the time of a collective op where the
  // measured points cover it, else nothing (the link model's time stands); and the file.
  std::function<std::optional<double>(const LayerOp& op)> measured_collective = {};
  std::string measured_collectives_from;
};

// Energy at a constant power per GPU: joules = power x GPUs x time.
struct EnergyEstimate {
  double power_w = 0;              // per GPU
  double prefill_j_per_token = 0;  // the prefill step over its batch x prompt tokens
  double decode_j_per_token = 0;   // one decode step over its batch tokens
  double decode_j_per_byte = 0;    // one decode step over the bytes it moves (per GPU)
  std::optional<double> request_j_per_token;  // a whole request (--generate) over its generated tokens
};

// A request of P prompt tokens and G generated ones: the prefill (which yields
// the first token), then G - 1 decode steps at contexts P+1 .. P+G-1.
struct RequestEstimate {
  std::uint64_t prompt = 0, generate = 0;
  double ttft_s = 0;            // the prefill
  double decode_s = 0;          // the G - 1 decode steps
  double total_s = 0;
  double mean_per_token_s = 0;  // decode_s / (G - 1) (time per output token after the first)
  double tokens_per_s = 0;      // batch * G / total_s
  double prefill_share = 0;     // ttft_s / total_s
};

// The link collectives run over (tensor parallelism): one direction of it sets their
// bandwidth term, and each takes base + steps x per_step before it moves a byte (the
// alpha of an alpha-beta model; NCCL's own tuning model gives the figures, gpus.json).
struct LinkModel {
  double gbps = 0;  // bidirectional, per GPU
  double base_s = 0, step_s = 0;
  std::string latency_source;
  static LinkModel of(const GpuSpec& g);
  // Steps of the collective `op` (its kind and shape["gpus"]): all_reduce 2(n-1),
  // all_gather and reduce_scatter n-1, else n.
  static std::uint64_t steps(const LayerOp& op);
  double latency_s(const LayerOp& op) const { return base_s + static_cast<double>(steps(op)) * step_s; }
};

struct OpEstimate {
  LayerOp op;
  DType compute_dtype = DType::bf16;
  double peak_flops = 0, bandwidth = 0;
  double time_s = 0;  // per occurrence
  double latency_s = 0;  // a collective: the part of time_s that is the link's latency
  bool measured = false;  // a collective timed from measured points (EstimateInputs::measured_collective)
  Bound bound = Bound::memory;
};

struct PhaseEstimate {
  Phase phase = Phase::decode;
  StepShape step;
  std::vector<OpEstimate> ops;
  OpCost total;         // all ops, counts applied
  double time_s = 0;    // sum of op times, counts applied
};

struct Estimate {
  ModelConfig model;
  GpuSpec gpu;
  EstimateInputs in;
  Precision precision;
  std::uint64_t params = 0;
  std::uint64_t active_params = 0;  // what a token uses (MoE: its experts only)
  std::uint64_t weight_bytes = 0;
  std::uint64_t kv_bytes_per_token = 0;
  std::uint64_t kv_cache_bytes = 0;  // batch sequences at the decode context
  std::uint64_t max_batch = 0;       // largest batch whose weights + KV fit in memory at the decode context
  PhaseEstimate prefill, decode;
  double ttft_s = 0;       // prefill step time
  double per_token_s = 0;  // decode step time
  std::optional<RequestEstimate> request;  // when inputs.generate > 0
  std::optional<EnergyEstimate> energy;    // when inputs.power_w is given
  std::vector<std::string> warnings;       // e.g. a context beyond max_position_embeddings
};

// The dtype whose compute ceiling an op uses.
DType compute_dtype_for(const LayerOp& op, DType dtype);
// One op's time on a roofline, max(FLOPs/P, bytes/W) at the ceilings of `source`
// (`dtype`: the run's activations; a collective: its link bytes over one direction
// of `link`, plus its latency). InputError naming `gpu_name` when a ceiling is missing.
OpEstimate estimate_op(const LayerOp& op, const Ceilings& ceil, CeilingSource source, DType dtype, const LinkModel& link,
                       const std::string& gpu_name);
// The step's precision: the activations and KV cache as asked, the linear layers'
// weights as --weight-dtype says, else as the checkpoint stores them.
Precision step_precision(const ModelConfig& m, const EstimateInputs& in);
Estimate estimate(const ModelConfig& m, const GpuSpec& gpu, const EstimateInputs& in);

// The simple model of docs/design.md: a layer of 12*h^2 parameters whose only traffic is its weights.
struct SimpleEstimate {
  std::uint64_t hidden = 0, layers = 0, batch = 0, prompt = 0;
  DType dtype = DType::fp16;
  std::uint64_t params_per_layer = 0;
  std::uint64_t weight_bytes = 0;
  std::uint64_t prefill_flops = 0, decode_flops = 0;
  double prefill_intensity = 0, decode_intensity = 0;
};
SimpleEstimate simple_estimate(std::uint64_t hidden, std::uint64_t layers, std::uint64_t batch, std::uint64_t prompt,
                               DType dtype);

nlohmann::json to_json(const Estimate& e);
nlohmann::json to_json(const SimpleEstimate& s);
std::string to_text(const Estimate& e);
std::string to_text(const SimpleEstimate& s, const GpuSpec* gpu);

}  // namespace phasebench
