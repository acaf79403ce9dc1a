#pragma once
// The whole layer's host plan: what the layer runs (the limits of every op it
// chains) and a request's plan, built once before anything is allocated: the
// step's dimensions and decode attention's split-KV plan. Host code; the
// layer's own kernel is layer.cuh, the operation layer.cu.
#include <memory>

#include "cuda/cuda_op.hpp"
#include "cuda/split_kv.hpp"

namespace phasebench::cuda {

// A whole-layer request's plan (kind layer): its limits, and when it can run,
// the step's dimensions (one GPU's shard's when tensor-parallel) and decode
// attention's split plan.
struct LayerPlan : OpPlan {
  bool prefill = false;
  int B = 0, S = 0, M = 0;  // sequences, new tokens per sequence, B*S tokens
  int L = 0;                // keys per query: the prompt (prefill) or the context incl. the new token (decode)
  int h = 0, I = 0, Hq = 0, Hkv = 0, D = 0, Nq = 0, Nkv = 0;  // hidden, intermediate, heads, head_dim, Hq*D, Hkv*D
  int cap = 0, pos = 0;     // the cache's tokens per (sequence, head); where the step's first token goes
  int gpus = 1;             // tensor-parallel ranks: the dimensions above are then one GPU's shard (Hq, Hkv, I)
  SplitKvPlan split;        // decode attention's, planned as the decode attention benchmark plans it
};
std::shared_ptr<const LayerPlan> plan_layer(const OpRequest& r, const Context& ctx);

// The tensor-parallel layer's maker (plan.gpus > 1): layer_tp.cpp, built where NCCL
// is, sets it when the ops are registered; null in a build without NCCL.
using TensorParallelLayerMaker = std::unique_ptr<PreparedOp> (*)(Context& ctx, const OpRequest& r, const LayerPlan& plan);
TensorParallelLayerMaker& tensor_parallel_layer_maker();

}  // namespace phasebench::cuda
