#pragma once
// The weight-only FP4 GEMV operation on CUDA (linear_fp4.cu: kernel and operation).

namespace phasebench::cuda {

// Test access to a prepared FP4 GEMV op: with fault injection on, verify() zeroes
// the output after the run, which verification must catch.
class LinearFp4OpAccess {
 public:
  virtual ~LinearFp4OpAccess() = default;
  virtual void set_fault_injection(bool on) = 0;
};

}  // namespace phasebench::cuda
