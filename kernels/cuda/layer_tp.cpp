// The tensor-parallel whole layer (kind layer, shape gpus > 1) on CUDA: one shard
// of the layer a GPU of this process (layer_shard.hpp), sharded as Megatron-LM and
// vLLM shard it (tensor_parallel_shard: heads, KV heads and the MLP's width
// split; QKV and gate/up column-parallel, O and down row-parallel), with NCCL
// all-reduces (sum, in place) of o_proj's and down_proj's partial outputs, one
// communicator a GPU (ncclCommInitAll).
//
// How it is timed (the engine's view: the step waits for the slowest rank), as
// collectives.cpp: run() records an event on the backend's stream, every rank's
// stream waits for it, each rank enqueues its attention half, the ranks'
// all-reduces go in one NCCL group, then the MLP halves and the second group; the
// backend's stream waits for an event recorded on each rank's stream, so its
// timing events bracket the layer on every GPU. One launch a sample
// (single_launch_only). No kernel of its own (the shards' are layer.cuh's and the
// libraries'). Started by mpirun or srun (more than one process), the layer
// spans the processes instead: this process runs its rank's shard on the
// backend's device, NCCL's ncclCommInitRank with rank 0's id broadcast, and
// verify() adds the shards' partial sums over MPI. Never run on a GPU yet:
// verified under the functional emulation's devices and NCCL stand-in only.
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_op.hpp"
#include "cuda/layer.hpp"
#include "cuda/layer_plan.hpp"
#include "cuda/layer_shard.hpp"
#include "cuda/nccl_util.hpp"
#include "cuda/rank_context.hpp"
#include "phasebench/error.hpp"
#include "phasebench/nvtx.hpp"
#include "phasebench/ops/layer.hpp"
#include "phasebench/processes.hpp"

namespace phasebench::cuda {

namespace {

// One rank: its Context (device, stream, handles), its shard, communicator and
// the event after its part of the step.
struct Rank {
  std::unique_ptr<RankContext> context;
  std::unique_ptr<LayerShard> shard;
  ncclComm_t comm = nullptr;
  cudaEvent_t done = nullptr;
};

class TensorParallelLayerOp final : public PreparedOp, public LayerOpAccess {
 public:
  TensorParallelLayerOp(Context& ctx, const OpRequest& r, const LayerPlan& plan)
      : ctx_(ctx), dtype_(r.dtype), gpus_(plan.gpus) {
    spans_processes_ = processes().size() > 1;
    const LocalRanks mine = local_ranks(gpus_, ctx.device);
    devices_ = mine.devices;
    ranks_.resize(mine.ranks.size());
    std::string failed;
    bool unsupported = false;  // a shard this device cannot hold: the point is skipped, not an error
    try {
      for (std::size_t i = 0; i < ranks_.size(); ++i) {
        Rank& k = ranks_[i];
        k.context = std::make_unique<RankContext>(devices_[i]);
        DeviceScope on(devices_[i]);
        k.shard = std::make_unique<LayerShard>(k.context->get(), r, plan, mine.ranks[i]);
        PB_CUDA_CHECK(cudaEventCreateWithFlags(&k.done, cudaEventDisableTiming));
      }
      DeviceScope on(ctx.device);
      PB_CUDA_CHECK(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming));
    } catch (const Unsupported& e) {
      failed = e.what();
      unsupported = true;
    } catch (const std::exception& e) {
      failed = e.what();
    }
    try {
      if (!spans_processes_ && unsupported) throw Unsupported(failed);
      const auto comms = communicators(gpus_, mine, failed);
      for (std::size_t i = 0; i < ranks_.size(); ++i) ranks_[i].comm = comms[i];
    } catch (...) {
      release();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  ~TensorParallelLayerOp() override { release(); }

  void run() override {
    PB_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream));
    for (Rank& k : ranks_) PB_CUDA_CHECK(cudaStreamWaitEvent(k.context->get().stream, start_, 0));
    for (Rank& k : ranks_) {
      DeviceScope on(k.context->get().device);
      k.shard->enqueue_attention();
    }
    all_reduce("attn_all_reduce", &LayerShard::o);
    for (Rank& k : ranks_) {
      DeviceScope on(k.context->get().device);
      k.shard->enqueue_mlp();
    }
    all_reduce("mlp_all_reduce", &LayerShard::out);
    for (Rank& k : ranks_) {
      DeviceScope on(k.context->get().device);
      PB_CUDA_CHECK(cudaEventRecord(k.done, k.context->get().stream));
      PB_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, k.done, 0));
    }
  }

  std::vector<std::string> op_names() const override {
    return {"attn_norm", "qkv_proj", "rope",         "qkv_split", "kv_append", "attention",     "o_proj",
            "attn_all_reduce", "mlp_norm", "gate_up_proj", "act_mul", "down_proj", "mlp_all_reduce"};
  }

  // Runs the step once, then follows a few tokens through the CPU reference of
  // the whole layer over every shard (verify_layer_token): each rank's K and V,
  // attention output and layer output (the same sum on every rank).
  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    if (fault_) {
      Rank& last = ranks_.back();
      DeviceScope on(last.context->get().device);
      corrupt_for_test(true, last.shard->out(), last.shard->hidden_elements() * 2, last.context->get().stream);
      PB_CUDA_CHECK(cudaStreamSynchronize(last.context->get().stream));
    }
    std::vector<LayerShard*> shards;
    std::vector<reference::LayerWeights> w;
    for (Rank& k : ranks_) {
      DeviceScope on(k.context->get().device);
      shards.push_back(k.shard.get());
      w.push_back(k.shard->weights());
    }
    const auto tol = layer_tolerance(dtype_);
    for (const auto& [b, s] : layer_tokens_to_verify(*shards.front()))
      verify_layer_token(shards, w, tol, b, s, spans_processes_);
  }

  std::vector<float> output_values() override { return output_as_float(); }
  std::vector<float> output_as_float() override {
    DeviceScope on(ranks_.front().context->get().device);
    return ranks_.front().shard->output_all();
  }
  void set_fault_injection(bool on) override { fault_ = on; }

  std::map<std::string, std::string> notes() const override { return nccl_notes(devices_); }

  std::optional<std::string> single_launch_only() const override {
    return "a tensor-parallel layer is timed one launch at a time (each copy of a rotating graph would need "
           "communicators of its own)";
  }

 private:
  // The ranks' in-place sum of `buffer` ([M, h] of the type), one NCCL group.
  void all_reduce(const char* name, void* (LayerShard::*buffer)()) {
    auto range = nvtx_range(ranks_.front().shard->range(name));
    const auto type = *nccl_type(dtype_);
    PB_NCCL_CHECK(ncclGroupStart());
    for (Rank& k : ranks_) {
      void* p = (k.shard.get()->*buffer)();
      PB_NCCL_CHECK(ncclAllReduce(p, p, k.shard->hidden_elements(), type, ncclSum, k.comm, k.context->get().stream));
    }
    PB_NCCL_CHECK(ncclGroupEnd());
  }

  void release() noexcept {
    for (Rank& k : ranks_) {
      if (!k.context) continue;
      DeviceScope on(k.context->get().device);
      cudaStreamSynchronize(k.context->get().stream);
      if (k.comm) ncclCommDestroy(k.comm);
      if (k.done) cudaEventDestroy(k.done);
      k.comm = nullptr;
      k.done = nullptr;
      k.shard.reset();
      k.context.reset();
    }
    if (start_) cudaEventDestroy(start_);
    start_ = nullptr;
  }

  Context& ctx_;
  DType dtype_;
  int gpus_ = 1;
  bool spans_processes_ = false;  // started by mpirun: one rank of gpus_ here
  std::vector<Rank> ranks_;       // this process's ranks
  std::vector<int> devices_;      // their devices
  cudaEvent_t start_ = nullptr;
  bool fault_ = false;
};

std::unique_ptr<PreparedOp> make_tensor_parallel_layer(Context& ctx, const OpRequest& r, const LayerPlan& plan) {
  return std::make_unique<TensorParallelLayerOp>(ctx, r, plan);
}

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(layer_tp) {
  (void)registry;  // the layer's entry is layer.cu's; this build can shard it
  phasebench::cuda::tensor_parallel_layer_maker() = phasebench::cuda::make_tensor_parallel_layer;
}
