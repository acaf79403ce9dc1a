// The collectives (ops/collectives.hpp) on CUDA: NCCL's all-reduce (sum),
// all-gather, reduce-scatter (sum) and all-to-all over N GPUs of this process,
// one communicator a GPU (ncclCommInitAll, as nccl-tests runs by default).
//
// How it is timed (the engine's view: the step waits for the slowest rank): run()
// records an event on the backend's stream, every rank's stream waits for it, the
// ranks' calls go in one NCCL group, and the backend's stream waits for an event
// recorded on each rank's stream after its call, so the backend's timing events
// bracket the collective on every GPU. Rank 0 is the backend's device, the others
// the next devices in order. Hot or cold, a sample is one launch (single_launch_only):
// a rotating graph would copy the op with a communicator per copy, and capturing
// NCCL across devices is not worth its risk for a timer.
// No kernel of ours: nothing here has ptxas figures. Never run on a GPU yet:
// verified under the functional emulation's NCCL stand-in only (kernels/cuda_emu/nccl.cpp).
#include <nccl.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/collectives.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/nccl_util.hpp"
#include "cuda/rank_context.hpp"
#include "phasebench/processes.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/collectives.hpp"
#include "reference/collectives.hpp"
#include "reference/common.hpp"

namespace phasebench::cuda {

namespace {

bool takes(DType t, const Context&) { return nccl_type(t).has_value(); }

std::optional<std::string> unsupported(const OpRequest& r, const Context&) {
  const auto count = r.shape["count"], n = r.shape["gpus"];
  if (count == 0 || n == 0) return "a collective needs at least one element and one GPU";
  const auto procs = static_cast<std::uint64_t>(processes().size());
  if (procs > 1 && n != procs)
    return "under mpirun with " + std::to_string(procs) + " ranks a collective spans every rank (one a process): gpus " +
           std::to_string(n) + " is not " + std::to_string(procs);
  const int have = device_count();
  if (procs == 1 && n > static_cast<std::uint64_t>(have))
    return "needs " + std::to_string(n) + " GPUs (one NCCL rank a GPU); this machine shows " + std::to_string(have) +
           " (CUDA_VISIBLE_DEVICES)";
  if (r.kind != kAllReduce && count % n != 0)
    return r.kind + " of " + std::to_string(count) + " elements over " + std::to_string(n) +
           " GPUs: the count must divide by the GPU count";
  return std::nullopt;
}

// One rank: its device, communicator, stream, the event after its call, its buffers.
struct Rank {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  DeviceBuffer send, recv;
};

// The op: each rank's send buffer filled with its own seeded values, its receive
// buffer 0xff bytes (NaN in every float type), so an element never written fails.
class CollectivesOp final : public PreparedOp, public CollectivesOpAccess {
 public:
  CollectivesOp(Context& ctx, const OpRequest& r)
      : ctx_(ctx), r_(r), type_(*nccl_type(r.dtype)), count_(r.shape["count"]), n_(r.shape["gpus"]) {
    const auto a = element_bytes(r.dtype);
    std::tie(send_n_, recv_n_) = collective_rank_elements(r.kind, count_, n_);
    spans_processes_ = processes().size() > 1;
    const LocalRanks mine = local_ranks(static_cast<int>(n_), ctx.device);
    for (int g : mine.ranks) global_.push_back(static_cast<std::uint64_t>(g));
    devices_ = mine.devices;
    ranks_.resize(global_.size());
    std::string failed;
    try {
      {
        DeviceScope on(ctx.device);
        PB_CUDA_CHECK(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming));
      }
      for (std::size_t i = 0; i < ranks_.size(); ++i) {
        Rank& k = ranks_[i];
        k.device = devices_[i];
        DeviceScope on(k.device);
        PB_CUDA_CHECK(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking));
        PB_CUDA_CHECK(cudaEventCreateWithFlags(&k.done, cudaEventDisableTiming));
        k.send = DeviceBuffer(mul(send_n_, a, "collective bytes"));
        k.recv = DeviceBuffer(mul(recv_n_, a, "collective bytes"));
        fill_random(k.send.get(), r.dtype, send_n_, r.seed + 1 + global_[i], 1.0f, k.stream);
        PB_CUDA_CHECK(cudaMemsetAsync(k.recv.get(), 0xff, k.recv.bytes(), k.stream));
        PB_CUDA_CHECK(cudaStreamSynchronize(k.stream));
      }
    } catch (const std::exception& e) {
      failed = e.what();
    }
    try {
      const auto comms = communicators(static_cast<int>(n_), mine, failed);
      for (std::size_t i = 0; i < ranks_.size(); ++i) ranks_[i].comm = comms[i];
    } catch (...) {
      release();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  ~CollectivesOp() override { release(); }

  void release() noexcept {
    for (Rank& k : ranks_) {
      DeviceScope on(k.device);
      if (k.stream) cudaStreamSynchronize(k.stream);
      if (k.comm) ncclCommDestroy(k.comm);
      if (k.done) cudaEventDestroy(k.done);
      if (k.stream) cudaStreamDestroy(k.stream);
      k.send = DeviceBuffer();
      k.recv = DeviceBuffer();
      k = Rank{};
    }
    if (start_) cudaEventDestroy(start_);
    start_ = nullptr;
  }

  void run() override {
    PB_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream));
    for (Rank& k : ranks_) PB_CUDA_CHECK(cudaStreamWaitEvent(k.stream, start_, 0));
    PB_NCCL_CHECK(ncclGroupStart());
    for (Rank& k : ranks_) {
      const void* s = k.send.get();
      void* d = k.recv.get();
      if (r_.kind == kAllReduce)
        PB_NCCL_CHECK(ncclAllReduce(s, d, count_, type_, ncclSum, k.comm, k.stream));
      else if (r_.kind == kAllGather)
        PB_NCCL_CHECK(ncclAllGather(s, d, count_ / n_, type_, k.comm, k.stream));
      else if (r_.kind == kReduceScatter)
        PB_NCCL_CHECK(ncclReduceScatter(s, d, count_ / n_, type_, ncclSum, k.comm, k.stream));
      else
        PB_NCCL_CHECK(ncclAlltoAll(s, d, count_ / n_, type_, k.comm, k.stream));
    }
    PB_NCCL_CHECK(ncclGroupEnd());
    for (Rank& k : ranks_) {
      PB_CUDA_CHECK(cudaEventRecord(k.done, k.stream));
      PB_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, k.done, 0));
    }
  }

  std::vector<float> output_values() override { return received(0); }

  // Runs once and checks the receive buffers (check_received).
  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    if (fault_) {
      DeviceScope on(ranks_.back().device);
      corrupt_for_test(true, ranks_.back().recv.get(), element_bytes(r_.dtype), ranks_.back().stream);
      PB_CUDA_CHECK(cudaStreamSynchronize(ranks_.back().stream));
    }
    std::string wrong;
    try {
      check_received();
    } catch (const VerificationError& e) {
      wrong = e.what();
    }
    // Over processes, every rank fails with the first rank's mismatch (or none does).
    const std::string first = spans_processes_ ? processes().first_of(wrong) : wrong;
    if (!first.empty()) throw VerificationError(first);
  }

  std::map<std::string, std::string> notes() const override { return nccl_notes(devices_); }

  std::optional<std::string> single_launch_only() const override {
    return "a collective is timed one launch at a time (each copy of a rotating graph would need communicators of "
           "its own)";
  }

  void set_fault_injection(bool on) override { fault_ = on; }
  const std::vector<int>& devices() const override { return devices_; }

 private:
  // Every element of this process's ranks' receive buffers against the
  // reference over every rank's input (this process's downloaded, the others'
  // made on the host from their seeds, as fill_random makes them). Sums may round
  // once a hop (a ring's n-1 partial sums in the type): n^2 unit roundoffs of
  // slack, far below an input's size (|x| <= 1); moved elements must match exactly.
  void check_received() {
    std::vector<std::vector<float>> inputs(n_);
    for (std::uint64_t g = 0; g < n_; ++g) {
      std::vector<unsigned char> raw(send_n_ * element_bytes(r_.dtype));
      reference::fill_random(raw.data(), r_.dtype, send_n_, r_.seed + 1 + g, 1.0f);
      inputs[g] = reference::to_float(raw.data(), r_.dtype, send_n_);
    }
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      DeviceScope on(ranks_[i].device);
      inputs[global_[i]] = download_as_float(ranks_[i].send.get(), r_.dtype, send_n_, ranks_[i].stream);
    }
    const auto want = reference::collective(r_.kind, inputs, count_);
    const bool sums = r_.kind == kAllReduce || r_.kind == kReduceScatter;
    const double u = r_.dtype == DType::bf16 ? std::ldexp(1.0, -9) : r_.dtype == DType::fp16 ? std::ldexp(1.0, -12)
                                                                                             : std::ldexp(1.0, -24);
    const double n = static_cast<double>(n_);
    const reference::Tolerance tol{sums ? n * n * u : 0.0, 0.0};
    for (std::size_t i = 0; i < ranks_.size(); ++i)
      reference::check_close(received(i), want[global_[i]], tol,
                             r_.kind + " (" + std::string(to_string(r_.dtype)) + ", " + std::to_string(count_) +
                                 " elements over " + std::to_string(n_) + " GPUs) on rank " + std::to_string(global_[i]));
  }

  std::vector<float> received(std::uint64_t i) {
    DeviceScope on(ranks_[i].device);
    PB_CUDA_CHECK(cudaStreamSynchronize(ranks_[i].stream));
    return download_as_float(ranks_[i].recv.get(), r_.dtype, recv_n_, ranks_[i].stream);
  }

  Context& ctx_;
  OpRequest r_;
  ncclDataType_t type_;
  std::uint64_t count_, n_, send_n_ = 0, recv_n_ = 0;
  bool spans_processes_ = false;  // started by mpirun: one rank of n_ here
  std::vector<Rank> ranks_;       // this process's ranks
  std::vector<std::uint64_t> global_;  // their ranks in the communicator
  std::vector<int> devices_;
  cudaEvent_t start_ = nullptr;
  bool fault_ = false;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(collectives) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  library_versions()["nccl"] = nccl_version();
  for (const char* k : {kAllReduce, kAllGather, kReduceScatter, kAllToAll})
    registry.add({k, Impl::nccl, takes, {}, limits_plan(unsupported), prepare_op<CollectivesOp>()});
}
