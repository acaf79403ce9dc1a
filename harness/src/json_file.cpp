// Reading JSON files with one-line errors naming the file and what is wrong
// (json_file.hpp), and the required-field helpers of the config readers.
#include "phasebench/json_file.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "phasebench/error.hpp"

namespace phasebench {

nlohmann::json parse_json_text(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // The parser quotes the token it stopped at, which may be enormous.
    const std::string why = e.what();
    throw InputError(origin + " is not valid JSON (byte " + std::to_string(e.byte) +
                     "): " + (why.size() > 120 ? why.substr(0, 120) + "..." : why));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number beyond any type
    const std::string why = e.what();
    throw InputError(origin + " cannot be read: " + (why.size() > 120 ? why.substr(0, 120) + "..." : why));
  }
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  // A FIFO would leave the read waiting for a writer for ever, a device never end: files only.
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st))
    throw InputError(what + " '" + path + "' is a folder; give the path of a file");
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw InputError(what + " '" + path + "' is not a regular file (a FIFO, device or socket); give the path of a file");
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxJsonFileBytes)
    throw InputError(what + " '" + path + "' is " + std::to_string(size) + " bytes; phasebench reads files of at most " +
                     std::to_string(kMaxJsonFileBytes >> 20) + " MiB (is it the right file?)");
  std::ifstream in(path);
  if (!in) throw InputError("cannot read " + what + " '" + path + "': no such file or not readable");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  return parse_json_text(read_text_file(path, what), what + " '" + path + "'");
}

std::uint64_t require_positive(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  if (!j.contains(key)) throw InputError(origin + ": missing required field \"" + key + "\"");
  const auto& v = j.at(key);
  if (!v.is_number_integer())
    throw InputError(origin + ": field \"" + key + "\" must be a positive integer, got " + quote_value(v.dump()));
  if (v.get<std::int64_t>() <= 0)
    throw InputError(origin + ": field \"" + key + "\" must be a positive integer, got " + quote_value(v.dump()));
  return v.get<std::uint64_t>();
}

std::string require_string(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  if (!j.contains(key) || !j.at(key).is_string())
    throw InputError(origin + ": missing or non-string field \"" + key + "\"");
  return j.at(key).get<std::string>();
}

}  // namespace phasebench
