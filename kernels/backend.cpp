// The backend seam's shared parts (backend.hpp): the factory that picks the
// CPU or CUDA backend, and PreparedOp's default.
#include "backend.hpp"

#include <stdexcept>

#include "phasebench/error.hpp"

namespace phasebench {

bool counting_build() {
#if defined(PHASEBENCH_CUDA_EMU_COUNT) && PHASEBENCH_CUDA_EMU_COUNT
  return true;
#else
  return false;
#endif
}

std::vector<float> PreparedOp::output_values() {
  throw std::logic_error("this operation does not expose its output");
}

std::unique_ptr<Backend> make_backend(const std::string& which, std::string* why) {
  std::string reason;
  if (which == "cpu") {
    if (why) *why = "backend cpu: chosen with --backend=cpu";
    return make_cpu_backend();
  }
  if (which == "cuda") {
    if (!cuda_backend_built())
      throw InputError("--backend=cuda: this build has no CUDA backend (no CUDA compiler was found at configure time)");
    auto b = make_cuda_backend(&reason);
    if (!b) throw InputError("--backend=cuda: " + reason);
    if (why) *why = "backend cuda: chosen with --backend=cuda; " + reason;
    return b;
  }
  if (which == "auto") {
    if (cuda_backend_built()) {
      if (auto b = make_cuda_backend(&reason)) {
        if (why) *why = "backend cuda (auto): " + reason;
        return b;
      }
      if (why) *why = "backend cpu (auto): " + reason;
    } else if (why) {
      *why = "backend cpu (auto): this build has no CUDA backend";
    }
    return make_cpu_backend();
  }
  throw InputError("unknown backend '" + which + "'; use auto, cuda or cpu");
}

}  // namespace phasebench
