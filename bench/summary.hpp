#pragma once
// The summary printed after Google Benchmark's table: per phase and operation
// the best and median fraction of roofline, and for the decode linear layers the
// batch at which measured points cross from memory- to compute-bound next to
// the predicted crossing; decode attention paged vs contiguous on the same
// shapes; whole layers measured vs predicted.
#include <string>

#include <nlohmann/json.hpp>

namespace phasebench {

// `results` is a results document (as written by ResultsFile).
std::string summarize(const nlohmann::json& results);

}  // namespace phasebench
