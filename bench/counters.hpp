#pragma once
// `phasebench counters` (commands.cpp parses its flags): each selected point is
// prepared and verified against its reference, then one run() is counted by the
// emulation's counting build (Backend::count) and put on a GPU of the spec table
// by the speed-of-light estimate (phasebench/speed_of_light.hpp). Counts and a
// model, never a time: the table and the JSON say so.
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "backend.hpp"
#include "phasebench/gpu_specs.hpp"
#include "results.hpp"
#include "sweep.hpp"

namespace phasebench {

inline constexpr int kCountersSchemaVersion = 1;

// The emulated target (PB_EMU_TARGET) that stands for a spec-table GPU, or nothing.
std::optional<std::string> emulated_target_for(const std::string& gpu_key);
// The GPUs counters can place points on, for messages.
std::string counted_gpus();

struct CountersTally {
  std::size_t ok = 0, skipped = 0, errors = 0;
};

// Counts every point into `file` (one entry per point, written after each) and
// prints its rows to `out`, progress to `progress`.
CountersTally count_points(Backend& backend, const std::vector<const Point*>& points, const GpuSpec& gpu,
                           ResultsFile& file, std::ostream& out, std::ostream& progress);

}  // namespace phasebench
