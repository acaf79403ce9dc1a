#pragma once
// The step-time model of `phasebench serve`: the time of one engine step of a
// given mix (decode sequences at their contexts, prefill chunks), composed per
// op from the analytical model's step ops, each op's time taken from the measured
// points of a results file where they cover its shape, else from the roofline.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "phasebench/analytical.hpp"
#include "phasebench/op.hpp"

namespace phasebench {

// What one engine step runs: every scheduled sequence's new tokens, as vLLM's
// scheduler batches them (one token per decoding sequence, a chunk of the prompt
// per prefilling one).
struct StepMix {
  // Each decoding sequence's KV length once this step's token is appended.
  std::vector<std::uint64_t> decode_contexts;
  struct Chunk {
    std::uint64_t tokens = 0;  // prompt tokens computed in this step
    std::uint64_t prior = 0;   // tokens already in the sequence's KV cache
  };
  std::vector<Chunk> prefill;
  // Sequences that sample a token this step: the decoding ones and the chunks
  // that finish their prompt (lm_head runs on their last token only).
  std::uint64_t logits = 0;
  std::uint64_t tokens() const;
};

// Measured points of a results file, one curve per StepMatch key: each point's
// efficiency (its roofline time at the run's own ceilings over its measured
// median) at its axes, the best implementation's where several ran the same shape.
class MeasuredCurves {
 public:
  // Reads every point of `results` (a phasebench run's JSON) that an operation's
  // match_point places; the rest are left out. `origin` names the file in errors.
  static MeasuredCurves from_results(const nlohmann::json& results, const std::string& origin);
  struct Hit {
    double efficiency = 0;
    double peak_flops = 0, bandwidth = 0;  // the ceilings the efficiency is against
    double time_s = 0;  // a time curve's (StepMatch::time_curve) interpolated time; 0 otherwise
  };
  // The efficiency at `m`: multilinear over the logarithms of the axes between
  // the measured points around it; nullopt when `m`'s key has no curve, `m` lies
  // outside the measured range on some axis or a corner of its cell is missing.
  std::optional<Hit> at(const StepMatch& m) const;
  std::size_t points() const { return points_; }
  std::size_t curves() const { return curves_.size(); }

 private:
  struct Curve {
    std::vector<std::vector<double>> values;      // per axis, sorted, unique
    std::map<std::vector<double>, double> best;   // axes -> efficiency (a time curve: the fastest time)
    double peak_flops = 0, bandwidth = 0;
    bool time = false;  // StepMatch::time_curve
  };
  std::map<std::string, Curve> curves_;
  std::size_t points_ = 0;
};

// Reading a results point's "phasebench" object in an operation's match_point.
std::optional<std::uint64_t> point_size(const nlohmann::json& point, const char* dim);  // shape[dim]
std::uint64_t point_arg(const nlohmann::json& point, const char* arg, std::uint64_t dflt);  // args[arg]
std::string point_dtype(const nlohmann::json& point);

class StepTimeModel {
 public:
  // `m` whole (sharded here by in.tp); ceilings of `source` from `ceil` (a GPU's
  // datasheet, or a results file's measured ones); every analytical op time is
  // its roofline time over `efficiency` (0 < efficiency <= 1).
  StepTimeModel(const ModelConfig& m, const EstimateInputs& in, Ceilings ceil, CeilingSource source, LinkModel link,
                std::string device, double efficiency);
  // Ops whose shape the curves cover take their times from them.
  void use_measured(MeasuredCurves curves) { curves_ = std::move(curves); }
  bool measured() const { return curves_.has_value(); }
  // Seconds of one step; an empty mix is an error (logic_error).
  double step_time(const StepMix& mix);

  // Per op of the model (its name, with its variant), over every step timed so far.
  struct OpUse {
    std::string op;
    std::uint64_t lookups = 0, measured = 0;  // times it was timed, and from measured points
    double time_s = 0;                        // its share of the steps' time (counts applied)
  };
  std::vector<OpUse> uses() const;
  const ModelConfig& shard() const { return shard_; }
  const Precision& precision() const { return precision_; }
  double efficiency() const { return efficiency_; }

 private:
  struct Contribution {
    std::size_t op = 0;
    double time_s = 0;
    bool measured = false;
  };
  using Part = std::vector<Contribution>;
  // The ops of `ops` that `keep` accepts, each timed.
  template <class Keep>
  Part time_ops(const std::vector<LayerOp>& ops, std::uint64_t tokens, Keep keep, double scale = 1.0);
  // The part cached under `key` in `cache`, made by `make` the first time it is asked for.
  template <class Make>
  static const Part& memo(std::unordered_map<std::uint64_t, Part>& cache, std::uint64_t key, Make make);
  const Part& tokens_part(std::uint64_t M);
  const Part& prefill_only_part(std::uint64_t M);
  const Part& decode_only_part(std::uint64_t B);
  const Part& logits_part(std::uint64_t rows);
  const Part& decode_attention_part(std::uint64_t B, std::uint64_t L);
  const Part& chunk_attention_part(std::uint64_t tokens, std::uint64_t prior);
  Part chunk_attention(std::uint64_t tokens, std::uint64_t prior);  // what chunk_attention_part caches
  std::size_t op_index(const LayerOp& op);
  double add(const Part& p);

  ModelConfig shard_;
  EstimateInputs in_;
  Precision precision_;
  Ceilings ceil_;
  CeilingSource source_;
  LinkModel link_;
  std::string device_;
  double efficiency_;
  std::optional<MeasuredCurves> curves_;
  std::vector<std::string> prefill_only_, decode_only_;  // op names only one phase's steps have
  std::unordered_map<std::uint64_t, Part> tokens_, prefill_only_parts_, decode_only_parts_, logits_, decode_attention_,
      chunk_attention_;
  std::map<std::string, std::size_t> op_ids_;
  std::vector<OpUse> uses_;
};

}  // namespace phasebench
