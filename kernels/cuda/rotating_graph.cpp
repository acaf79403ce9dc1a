// Rotating copies of one op in one CUDA graph (rotating_graph.hpp): the cold
// timing of short launches, with every copy's output checked after a replay.
#include "cuda/rotating_graph.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cuda/cuda_op.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

namespace {

// The op's output, or nothing when it does not hand it out.
std::optional<std::vector<float>> output_of(PreparedOp& op) {
  try {
    return op.output_values();
  } catch (const std::logic_error&) {
    return std::nullopt;
  }
}

}  // namespace

RotatingGraph::RotatingGraph(Context& ctx, const OpRequest& r, PreparedOp& first, std::uint64_t copies,
                             CheckedRequest checked) {
  if (copies < 2) throw std::logic_error("RotatingGraph: needs at least two copies");
  // What the verified op computes. It stays outside the graph, so that no copy's
  // output can pass the check by having been computed before the replay.
  first.run();
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  const auto verified = output_of(first);
  if (!checked.plan) checked = check_request(ctx, r);
  for (std::uint64_t i = 0; i < copies; ++i) copies_.push_back(make_op(ctx, r, checked));
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

  const std::string problem = capture_graph(ctx.stream, [&] {
    for (auto& op : copies_) op->run();
  }, &exec_);
  if (!problem.empty()) throw Unsupported(problem);
  try {
    PB_CUDA_CHECK(cudaGraphUpload(exec_, ctx.stream));
    launch(ctx.stream);  // the replay that is checked, and the graph's own warm-up
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    if (verified) check(*verified);
  } catch (...) {
    cudaGraphExecDestroy(exec_);  // the destructor does not run for a constructor that throws
    exec_ = nullptr;
    throw;
  }
}

RotatingGraph::~RotatingGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);  // before the copies it points into
}

void RotatingGraph::launch(cudaStream_t stream) { PB_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

void RotatingGraph::check(const std::vector<float>& verified) {
  float scale = 0;
  for (float v : verified)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  // The copies hold the same inputs (one request, one seed); only the order of
  // fp32 atomics (split-K, stream-K) may differ between them.
  auto compare = [&](PreparedOp& op, std::uint64_t index) {
    const auto got = output_of(op);
    if (!got) return;
    if (got->size() != verified.size())
      throw VerificationError("verification failed: rotating copy " + std::to_string(index) + ": output size differs");
    for (std::size_t i = 0; i < got->size(); ++i) {
      const float a = (*got)[i], b = verified[i];
      const bool ok = a == b || (std::isnan(a) && std::isnan(b)) || std::fabs(a - b) <= 1e-2f * std::fabs(b) + 1e-3f * scale;
      if (!ok) {
        std::ostringstream m;
        m << "verification failed: rotating copy " << index << " of " << copies() << " computed " << a << " at element "
          << i << " where the verified op computed " << b << ": the timing graph did not run what was verified";
        throw VerificationError(m.str());
      }
    }
  };
  for (std::size_t i = 0; i < copies_.size(); ++i) compare(*copies_[i], i + 1);
  checked_ = true;
}

}  // namespace phasebench::cuda
