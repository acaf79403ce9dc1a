#pragma once
// Cold-cache timing of short launches (timing.hpp, ColdTiming::rotate): k copies
// of one prepared op, each with its own inputs, outputs and scratch, captured as
// one CUDA graph that runs each copy once; a sample is the graph's time / k.
#include <cstdint>
#include <memory>
#include <vector>

#include "backend.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"

namespace phasebench::cuda {

class RotatingGraph {
 public:
  // `first` is the op prepared (and verified) for `r`; `copies` more are
  // prepared beside it and captured, and `first` stays outside the graph. After
  // one replay every copy's output is compared with what `first` computed
  // (VerificationError naming the copy), so a graph that skipped or repeated a
  // copy is an error, not a time. Ops that cannot hand out their output
  // (PreparedOp::output_values) are not compared; checked() says so. The copies
  // are built from `checked`, the plan `first` was built from (planning nothing
  // again); without one (checked.plan null) `r` is checked here, once for all.
  RotatingGraph(Context& ctx, const OpRequest& r, PreparedOp& first, std::uint64_t copies, CheckedRequest checked = {});
  ~RotatingGraph();
  RotatingGraph(const RotatingGraph&) = delete;
  RotatingGraph& operator=(const RotatingGraph&) = delete;

  void launch(cudaStream_t stream);
  std::uint64_t copies() const { return copies_.size(); }
  bool checked() const { return checked_; }

 private:
  void check(const std::vector<float>& verified);
  std::vector<std::unique_ptr<PreparedOp>> copies_;
  cudaGraphExec_t exec_ = nullptr;
  bool checked_ = false;
};

}  // namespace phasebench::cuda
