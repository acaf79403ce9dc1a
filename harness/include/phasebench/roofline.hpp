#pragma once
// Roofline: ceilings with their source, attainable rate, ridge point, bound.
// attainable(I) = min(P, I*W); ridge = P/W; memory-bound iff I < ridge.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "phasebench/dtype.hpp"

namespace phasebench {

enum class CeilingSource { datasheet, theoretical, measured };
std::string_view to_string(CeilingSource s);
CeilingSource parse_ceiling_source(std::string_view s);  // throws InputError

struct Ceiling {
  double value = 0;  // FLOP/s for compute, bytes/s for bandwidth
  CeilingSource source = CeilingSource::datasheet;
  std::string method;  // how it was obtained: a document, a formula, a measurement
};

// link: a collective between GPUs, bound by their interconnect (the analytical model's --tp).
enum class Bound { memory, compute, link };
std::string_view to_string(Bound b);

struct RooflinePlace {
  double peak_flops = 0;        // P used
  double bandwidth = 0;         // W used
  double ridge = 0;             // P / W, FLOP/byte
  double attainable_flops = 0;  // min(P, I*W)
  Bound bound = Bound::memory;
  // Achieved rate / attainable rate: FLOP/s over attainable FLOP/s for ops with
  // FLOPs; bytes/s over W for ops with none (pure data movement).
  double fraction = 0;
};

double attainable(double intensity, double peak_flops, double bandwidth);
Bound classify(double intensity, double ridge);
// Place a point with `flops` and `bytes` measured in `seconds` on a roofline.
RooflinePlace place(double flops, double bytes, double seconds, double peak_flops, double bandwidth);
// Predicted time of an op on a roofline: max(flops/P, bytes/W).
double roofline_time(double flops, double bytes, double peak_flops, double bandwidth);

// A cache level's read bandwidth over hot data (ERT's hierarchical roofline):
// no roof for points beyond the caches, it explains hot-cache points above the
// memory roof.
struct CacheCeiling {
  std::string level;  // "L2" on a GPU, "LLC" on a CPU
  Ceiling ceiling;
};

// All ceilings known for a device. Several sources may coexist; `preferred`
// says which one percentages use, falling back to the others in the order
// measured, datasheet, theoretical when the preferred one is missing.
class Ceilings {
 public:
  void add_compute(DType t, Ceiling c);
  void add_bandwidth(Ceiling c);
  void add_cache_bandwidth(CacheCeiling c) { cache_.push_back(std::move(c)); }
  const std::map<DType, std::vector<Ceiling>>& compute() const { return compute_; }
  const std::vector<Ceiling>& bandwidth() const { return bandwidth_; }
  const std::vector<CacheCeiling>& cache_bandwidth() const { return cache_; }
  std::optional<Ceiling> compute_for(DType t, CeilingSource preferred) const;
  std::optional<Ceiling> bandwidth_for(CeilingSource preferred) const;
  bool empty() const { return compute_.empty() && bandwidth_.empty(); }

 private:
  std::map<DType, std::vector<Ceiling>> compute_;
  std::vector<Ceiling> bandwidth_;
  std::vector<CacheCeiling> cache_;
};

// A point that moves at least this many times the device's last-level cache is
// "beyond the caches": what it reads comes from memory, whatever the replacement
// policy left behind. The results mark such points ("beyond_caches"); the CPU
// targets and the paired reads count only them; the reads that flush a cache or
// measure the memory beside a point are this size too.
inline constexpr std::uint64_t kBeyondCachesFactor = 4;
bool beyond_caches(std::uint64_t bytes, std::uint64_t cache_bytes);

}  // namespace phasebench
