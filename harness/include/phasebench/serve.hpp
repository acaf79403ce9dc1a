#pragma once
// The serving simulation of `phasebench serve`: a discrete-event simulation of
// engine replicas with continuous batching and chunked prefill, as vLLM
// schedules them, over a workload of requests, timed by a step-time model
// (step_time.hpp); TTFT, TPOT, ITL, throughput and goodput per sweep point.
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phasebench/step_time.hpp"

namespace phasebench {

// A length in tokens: fixed ("1024"), uniform over [LO, HI] ("uniform:512:1536")
// or log-normal with median M and shape sigma ("lognormal:M:SIGMA", at least 1).
struct LengthDist {
  enum class Kind { fixed, uniform, lognormal };
  Kind kind = Kind::fixed;
  double a = 0, b = 0;
  std::string text;
  static LengthDist parse(const std::string& text, const std::string& flag);  // InputError naming `flag`
  std::uint64_t draw(std::mt19937_64& rng) const;
  std::uint64_t largest() const;  // the longest it draws (log-normal: its 99.99th percentile, where draws are capped)
};

// "0.5,1,2": request rates per second (each > 0), or InputError naming `flag`.
std::vector<double> parse_rate_list(const std::string& text, const std::string& flag);

struct ServeRequest {
  double arrival_s = 0;
  std::uint64_t input = 0, output = 0;  // prompt tokens; output tokens (>= 1, the first from the prefill)
};

// A request stream: a closed loop of `concurrency` users who each send their next
// request when the last one finishes (vllm bench serve --max-concurrency with
// every request sent at once), Poisson arrivals at `rate` requests per second, or
// the arrivals and lengths of a trace.
struct Workload {
  enum class Kind { concurrency, rate, trace };
  Kind kind = Kind::concurrency;
  std::uint64_t concurrency = 1;
  double rate = 0;
  std::uint64_t requests = 0;  // how many (a trace: its rows)
  LengthDist input, output;
  std::uint64_t seed = 0;
  std::vector<ServeRequest> trace;
  std::string trace_path;
};
// The requests of a workload, arrival times of the closed loop left to the simulation
// (0 for every request): the same seed draws the same lengths at every sweep point.
std::vector<ServeRequest> draw_requests(const Workload& w);
// A trace: CSV with a header naming arrival_s, input_tokens and output_tokens (any
// order, other columns ignored), or JSON Lines with those keys. InputError naming the
// file and line for anything else.
std::vector<ServeRequest> read_trace(const std::string& path);

// One replica's engine, as vLLM's V1 scheduler runs it: each step decodes every
// running sequence and fills the rest of a token budget with prompt chunks, new
// requests admitted while the budget, the sequence limit and the KV blocks allow;
// when the blocks run out the most recently admitted running request is preempted
// (its blocks freed, recomputed later).
struct EngineConfig {
  std::uint64_t max_num_batched_tokens = 8192;
  std::uint64_t max_num_seqs = 256;
  // Host time each step adds to its GPU time (scheduling, input preparation,
  // sampling): 0 leaves it out; a figure measured on an engine puts it in.
  double step_overhead_s = 0;
  std::uint64_t block_size = 16;
  std::uint64_t kv_capacity_tokens = 0;  // per replica
  std::uint64_t gpus_per_replica = 1;    // tensor-parallel degree
  // Disaggregated serving (DistServe, xPyD): prefill replicas hand each request's
  // KV cache to decode replicas over the interconnect. 0 and 0: one colocated replica.
  std::uint64_t prefill_replicas = 0, decode_replicas = 0;
  std::uint64_t kv_bytes_per_token = 0;   // per GPU, what is sent
  double kv_transfer_bytes_per_s = 0;     // per GPU, one direction of its link
  bool disaggregated() const { return prefill_replicas > 0; }
  std::uint64_t gpus() const;
};

struct Slo {
  double ttft_s = 1.0, tpot_s = 0.05;
  double attainment = 0.9;  // a sweep point meets the SLO when this share of its requests meet both
};

struct Percentiles {
  std::optional<double> mean, p50, p90, p99;  // none: no sample
};
// Linear interpolation between the order statistics (numpy's default).
Percentiles percentiles(std::vector<double> v);

struct ServePoint {
  std::optional<std::uint64_t> concurrency;
  std::optional<double> rate;
  std::uint64_t requests = 0, completed = 0, gpus = 1;
  double duration_s = 0;
  Percentiles ttft, tpot, itl, e2e;
  double request_rate = 0, output_tokens_per_s = 0, output_tokens_per_s_per_gpu = 0, output_tokens_per_s_per_user = 0;
  double goodput_rps = 0, slo_attainment = 0;
  bool meets_slo = false, pareto = false;
  std::uint64_t preemptions = 0, steps = 0;
  double mean_batch = 0;  // sequences per step
  std::uint64_t peak_kv_tokens = 0;  // the most KV-cache slots one replica held
  std::uint64_t kv_transfers = 0;
};

using StepTimeFn = std::function<double(const StepMix&)>;
// Runs `requests` (arrivals as given; a closed loop of `concurrency` users when it
// is set) through the engine. InputError when a request can never fit the KV cache.
ServePoint simulate(const EngineConfig& e, std::vector<ServeRequest> requests, std::optional<std::uint64_t> concurrency,
                    const StepTimeFn& step_time, const Slo& slo);
// Marks the points no other point beats on both tokens/s per user and per GPU.
void mark_pareto(std::vector<ServePoint>& points);

nlohmann::json to_json(const Percentiles& p);
nlohmann::json to_json(const ServePoint& p);

}  // namespace phasebench
