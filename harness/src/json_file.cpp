// Reading JSON files with one-line errors naming the file and what is wrong
// (json_file.hpp), and the required-field helpers of the config readers.
#include "phasebench/json_file.hpp"

#include <fstream>
#include <sstream>

#include "phasebench/error.hpp"

namespace phasebench {

nlohmann::json parse_json_text(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(origin + " is not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what());
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot read " + what + " '" + path + "': no such file or not readable");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), what + " '" + path + "'");
}

std::uint64_t require_positive(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  if (!j.contains(key)) throw InputError(origin + ": missing required field \"" + key + "\"");
  const auto& v = j.at(key);
  if (!v.is_number_integer())
    throw InputError(origin + ": field \"" + key + "\" must be a positive integer, got " + v.dump());
  if (v.get<std::int64_t>() <= 0)
    throw InputError(origin + ": field \"" + key + "\" must be a positive integer, got " + v.dump());
  return v.get<std::uint64_t>();
}

std::string require_string(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  if (!j.contains(key) || !j.at(key).is_string())
    throw InputError(origin + ": missing or non-string field \"" + key + "\"");
  return j.at(key).get<std::string>();
}

}  // namespace phasebench
