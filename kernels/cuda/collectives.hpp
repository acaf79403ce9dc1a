#pragma once
// The collectives' op on CUDA (collectives.cpp): what the GPU tests reach through
// the prepared op beyond PreparedOp.
#include <vector>

namespace phasebench::cuda {

class CollectivesOpAccess {
 public:
  virtual ~CollectivesOpAccess() = default;
  // Test only: when on, verify() zeroes the last rank's first received element after
  // its run and before the comparison, so the comparison must throw VerificationError.
  virtual void set_fault_injection(bool on) = 0;
  // The devices of the ranks, in rank order (rank 0 on the backend's device).
  virtual const std::vector<int>& devices() const = 0;
};

}  // namespace phasebench::cuda
