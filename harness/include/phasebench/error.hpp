#pragma once
// Errors a user can act on. Every message names what is wrong and how to fix it;
// main() prints it on one line and exits non-zero.
#include <stdexcept>
#include <string>
#include <cstddef>
#include <string_view>

namespace phasebench {

// Bad input: a flag value, a config file, a model or GPU name, a size.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A point that cannot run here (does not fit in memory, dtype unsupported by the
// backend or device). The sweep skips it with this message and goes on.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A kernel's output did not match its reference: never a timing.
class VerificationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `text` quoted for a message, cut to `max` characters (a 2 GB number in a config
// file is named, not printed): 'abc', or 'abcdef...' (123456 characters).
std::string quote_value(std::string_view text, std::size_t max = 40);

}  // namespace phasebench
