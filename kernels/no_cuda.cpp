// Linked when the build has no CUDA backend.
#include "backend.hpp"

namespace phasebench {
bool cuda_backend_built() { return false; }
std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  if (why) *why = "this build has no CUDA backend";
  return nullptr;
}
}  // namespace phasebench
