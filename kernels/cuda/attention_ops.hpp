#pragma once
// Test access to the KV-cache and attention ops that make_attention_op
// (cuda_common.hpp) returns: every one of them also implements this interface,
// so a test can dynamic_cast the PreparedOp to read its output or to check that
// verify() catches a wrong result. Nothing in the benchmarks needs it.
#include <vector>

namespace phasebench::cuda {

class AttentionOpAccess {
 public:
  virtual ~AttentionOpAccess() = default;
  // The op's output decoded to floats (synchronises the stream). Decode and
  // prefill attention: `out`; KV append: the whole K cache (or K page pool).
  virtual std::vector<float> output_as_float() = 0;
  // Test only: when on, verify() corrupts the output after its run and before
  // the comparison (zeroes the attention output; zeroes the first appended K
  // slot), so the comparison must throw VerificationError.
  virtual void set_fault_injection(bool on) = 0;
  // Number of KV splits the decode kernel uses (1 for the other ops).
  virtual int splits() const { return 1; }
};

}  // namespace phasebench::cuda
