// Reading JSON files with one-line errors naming the file and what is wrong
// (json_file.hpp), and the required-field helpers of the config readers.
#include "phasebench/json_file.hpp"

#include <algorithm>
#include <cmath>
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

std::string json_kind(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "true or false";
  if (v.is_null()) return "null";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d) ? "a number written with a fraction or exponent" : "a fraction";
  }
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0) return "a negative number";
  return "a number";
}

std::optional<std::uint64_t> whole_number(const nlohmann::json& v, std::uint64_t least, std::uint64_t most) {
  if (!v.is_number_integer()) return std::nullopt;
  if (!v.is_number_unsigned() && v.get<std::int64_t>() < 0) return std::nullopt;
  const auto u = v.get<std::uint64_t>();
  if (u < least || u > most) return std::nullopt;
  return u;
}

namespace {

std::string integer_wording(std::uint64_t least, std::uint64_t most) {
  std::string s = least == 0 ? "a whole number of 0 or more" : "a positive integer";
  if (most != UINT64_MAX) s += " (at most " + std::to_string(most) + ")";
  return s;
}

}  // namespace

void JsonFields::wrong(const std::string& key, const std::string& should) const {
  const auto& v = j_.at(key);
  throw InputError(origin_ + ": field \"" + key + "\" must be " + should + "; it holds " + quote_value(v.dump()) + " (" +
                   json_kind(v) + ")");
}

void JsonFields::wrong_item(const std::string& key, std::size_t index, const std::string& should) const {
  const auto& v = j_.at(key).at(index);
  throw InputError(origin_ + ": field \"" + key + "\" must be " + should + "; its item " + std::to_string(index) +
                   " is " + quote_value(v.dump()) + " (" + json_kind(v) + ")");
}

const nlohmann::json& JsonFields::at(const std::string& key) const {
  if (!has(key)) throw InputError(origin_ + ": missing required field \"" + key + "\"");
  return j_.at(key);
}

std::uint64_t JsonFields::positive(const std::string& key, std::uint64_t most, const std::string& should) const {
  if (const auto v = whole_number(at(key), 1, most)) return *v;
  wrong(key, should.empty() ? integer_wording(1, most) : should);
}

std::uint64_t JsonFields::positive_or(const std::string& key, std::uint64_t dflt, std::uint64_t most) const {
  return has(key) ? positive(key, most) : dflt;
}

std::uint64_t JsonFields::count_or(const std::string& key, std::uint64_t dflt, std::uint64_t most) const {
  if (!has(key)) return dflt;
  if (const auto v = whole_number(j_.at(key), 0, most)) return *v;
  wrong(key, integer_wording(0, most));
}

bool JsonFields::boolean_or(const std::string& key, bool dflt) const {
  if (!has(key)) return dflt;
  if (!j_.at(key).is_boolean()) wrong(key, "true or false");
  return j_.at(key).get<bool>();
}

std::string JsonFields::text(const std::string& key) const {
  if (!at(key).is_string()) wrong(key, "a string");
  return j_.at(key).get<std::string>();
}

std::string JsonFields::text_or(const std::string& key, const std::string& dflt) const {
  return has(key) ? text(key) : dflt;
}

const nlohmann::json& JsonFields::list(const std::string& key, const std::string& should) const {
  static const nlohmann::json none = nlohmann::json::array();
  if (!has(key)) return none;
  if (!j_.at(key).is_array()) wrong(key, should);
  return j_.at(key);
}

std::vector<std::uint64_t> JsonFields::layer_indices(const std::string& key, std::uint64_t layers) const {
  const std::string should = "a list of layer indices from 0 to " + std::to_string(layers - 1);
  const auto& a = list(key, should);
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto v = whole_number(a[i], 0, layers - 1);
    if (!v) wrong_item(key, i, should);
    if (std::find(out.begin(), out.end(), *v) != out.end()) wrong_item(key, i, should + ", each once");
    out.push_back(*v);
  }
  return out;
}

std::vector<std::string> JsonFields::strings(const std::string& key) const {
  const auto& a = list(key, "a list of strings");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_string()) wrong_item(key, i, "a list of strings");
    out.push_back(a[i].get<std::string>());
  }
  return out;
}

const nlohmann::json& JsonFields::object(const std::string& key, const std::string& should) const {
  if (!at(key).is_object()) wrong(key, should);
  return j_.at(key);
}

std::uint64_t require_positive(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  return JsonFields(j, origin).positive(key);
}

std::string require_string(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  return JsonFields(j, origin).text(key);
}

}  // namespace phasebench
