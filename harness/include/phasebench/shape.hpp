#pragma once
// Named integer dimensions, in a fixed order: the shape of an operation (B, Hq,
// Hkv, L, D; M, N, K; ...) and its other integer parameters (page_size, ...).
// Operations are declared as data (phasebench/op.hpp), so a shape is a list of
// named sizes rather than one struct per operation; the typed shapes of
// workload.hpp convert to and from it.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace phasebench {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::pair<std::string, std::uint64_t>> dims);
  // The value of `name`; std::logic_error naming it when absent (a declaration bug).
  std::uint64_t operator[](std::string_view name) const;
  std::uint64_t get(std::string_view name, std::uint64_t dflt) const;
  bool has(std::string_view name) const;
  // Sets `name` (appended when new, so the order is the order of first setting).
  Shape& set(std::string_view name, std::uint64_t value);
  const std::vector<std::pair<std::string, std::uint64_t>>& dims() const { return dims_; }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  // {"B": 8, "Hq": 32, ...} in this order.
  nlohmann::json to_json() const;

 private:
  std::vector<std::pair<std::string, std::uint64_t>> dims_;
};

}  // namespace phasebench
