// Message helpers of the errors a user acts on (error.hpp).
#include "phasebench/error.hpp"

namespace phasebench {

std::string quote_value(std::string_view text, std::size_t max) {
  std::string out;
  const bool cut = text.size() > max;
  out.reserve((cut ? max : text.size()) + 40);
  out.push_back('\'');
  out.append(text.substr(0, cut ? max : text.size()));
  if (!cut) {
    out.push_back('\'');
    return out;
  }
  out.append("...' (");
  out.append(std::to_string(text.size()));
  out.append(" characters)");
  return out;
}

}  // namespace phasebench
