#pragma once
// Errors a user can act on. Every message names what is wrong and how to fix it;
// main() prints it on one line and exits non-zero.
#include <stdexcept>
#include <string>

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

}  // namespace phasebench
