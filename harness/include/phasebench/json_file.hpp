#pragma once
// Reading JSON data files with errors that name the file and the problem.
#include <nlohmann/json.hpp>
#include <string>

namespace phasebench {

// Reads and parses `path`; throws InputError naming the file when it is missing,
// unreadable or not valid JSON (with the parser's position).
nlohmann::json read_json_file(const std::string& path, const std::string& what);
nlohmann::json parse_json_text(const std::string& text, const std::string& origin);

// Required/optional typed fields, with errors that name the file and the key.
std::uint64_t require_positive(const nlohmann::json& j, const std::string& key, const std::string& origin);
std::string require_string(const nlohmann::json& j, const std::string& key, const std::string& origin);

}  // namespace phasebench
