// Helpers the operations' summary sections share (report.hpp).
#include "phasebench/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace phasebench {

double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string number_or_dash(const nlohmann::json& v, const char* format, double scale) {
  return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>() * scale) : std::string("-");
}

double number_or_nan(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : NAN;
}

}  // namespace phasebench
