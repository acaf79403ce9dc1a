#pragma once
// Reading JSON data files with errors that name the file and the problem.
#include <cstdint>
#include <string>

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

// Required/optional typed fields, with errors that name the file and the key.
std::uint64_t require_positive(const nlohmann::json& j, const std::string& key, const std::string& origin);
std::string require_string(const nlohmann::json& j, const std::string& key, const std::string& origin);

}  // namespace phasebench
