#pragma once
// Reading JSON data files with errors that name the file and the problem.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace phasebench {

// The largest file read_json_file parses (configs and results are far smaller;
// a larger one is refused before it is read, not parsed for minutes).
inline constexpr std::uint64_t kMaxJsonFileBytes = 16ull << 20;

// Reads and parses `path`; throws InputError naming the file when it is missing,
// unreadable, over kMaxJsonFileBytes or not valid JSON (with the parser's position).
nlohmann::json read_json_file(const std::string& path, const std::string& what);
// The text of `path`, with the same checks (missing, unreadable, too large).
std::string read_text_file(const std::string& path, const std::string& what);
nlohmann::json parse_json_text(const std::string& text, const std::string& origin);

// The fields of one JSON object of a file (a config.json, the GPU table), each
// read as what it should hold. A wrong type, sign or size is one InputError that
// names the file, the field, what it holds and what it should hold: never
// nlohmann's own type_error, never a negative number wrapped to 2^64, never a
// fraction cut to an integer. A null field is an absent one (transformers reads
// them alike).
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string origin) : j_(object), origin_(std::move(origin)) {}
  const std::string& origin() const { return origin_; }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const nlohmann::json& at(const std::string& key) const;  // "missing required field" when absent

  // Whole numbers from 1 (positive) or 0 (count) up to `most`; absent: `dflt`,
  // or for positive(key) the missing-field error. `should` replaces the wording
  // "a positive integer" in the error.
  std::uint64_t positive(const std::string& key, std::uint64_t most = UINT64_MAX, const std::string& should = "") const;
  std::uint64_t positive_or(const std::string& key, std::uint64_t dflt, std::uint64_t most = UINT64_MAX) const;
  std::uint64_t count_or(const std::string& key, std::uint64_t dflt, std::uint64_t most = UINT64_MAX) const;
  bool boolean_or(const std::string& key, bool dflt) const;
  std::string text(const std::string& key) const;  // a required string
  std::string text_or(const std::string& key, const std::string& dflt) const;
  // A list (absent or null: empty); its items are checked by the callers, through wrong_item.
  const nlohmann::json& list(const std::string& key, const std::string& should) const;
  // A list of distinct layer indices, each below `layers`; absent: none.
  std::vector<std::uint64_t> layer_indices(const std::string& key, std::uint64_t layers) const;
  // A list of strings; absent: none.
  std::vector<std::string> strings(const std::string& key) const;
  // An object; InputError naming `should` when it is not one.
  const nlohmann::json& object(const std::string& key, const std::string& should) const;

  // The one error of them all: <origin>: field "<key>" must be <should>; it holds <value> (<what that is>).
  [[noreturn]] void wrong(const std::string& key, const std::string& should) const;
  [[noreturn]] void wrong_item(const std::string& key, std::size_t index, const std::string& should) const;

 private:
  const nlohmann::json& j_;
  std::string origin_;
};

// `v` as a whole number in [least, most], or nothing (a string, a fraction, a
// negative number, out of range).
std::optional<std::uint64_t> whole_number(const nlohmann::json& v, std::uint64_t least, std::uint64_t most);
// What a JSON value is, for messages: "a string", "a negative number", "a fraction", ...
std::string json_kind(const nlohmann::json& v);

// Required fields through JsonFields, for readers of a single field.
std::uint64_t require_positive(const nlohmann::json& j, const std::string& key, const std::string& origin);
std::string require_string(const nlohmann::json& j, const std::string& key, const std::string& origin);

}  // namespace phasebench
