// The whole layer's host plan (layer_plan.hpp): the limits of every op the layer
// chains, and a request's plan.
#include "cuda/layer_plan.hpp"

#include <climits>
#include <string>
#include <utility>

#include "cuda/decode_attention_plan.hpp"
#include "cuda/kv_append_plan.hpp"
#include "cuda/linear_cublaslt.hpp"
#include "cuda/prefill_attention.hpp"
#include "cuda/prefill_attention_plan.hpp"
#include "cuda/rank_context.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/layer.hpp"
#include "phasebench/processes.hpp"

namespace phasebench::cuda {

namespace {

int to_int(std::uint64_t v, const std::string& what) { return to_int32(v, "layer: " + what); }

std::optional<std::string> layer_op_unsupported(const OpRequest& r, const Context& ctx) {
  if (r.dtype != DType::bf16 && r.dtype != DType::fp16)
    return "layer: the CUDA backend runs whole layers in bf16 or fp16, not " + std::string(to_string(r.dtype));
  const auto gpus = layer_gpus(r);
  const auto procs = static_cast<std::uint64_t>(processes().size());
  if (procs > 1 && gpus != procs)
    return "layer: under mpirun with " + std::to_string(procs) + " ranks a layer spans every rank (one a process): "
           "gpus " + std::to_string(gpus) + " is not " + std::to_string(procs);
  if (gpus > 1) {
    if (!tensor_parallel_layer_maker())
      return "layer: a tensor-parallel layer needs NCCL, and this build has none (no nccl.h was found at configure time)";
    const int have = device_count();
    if (procs == 1 && gpus > static_cast<std::uint64_t>(have))
      return "layer: tensor-parallel over " + std::to_string(gpus) + " GPUs (one NCCL rank a GPU); this machine shows " +
             std::to_string(have) + " (CUDA_VISIBLE_DEVICES)";
  }
  ModelConfig d;
  try {
    d = layer_shard(r);  // the dimensions one GPU runs
  } catch (const InputError& e) {
    return "layer: " + std::string(e.what());
  }
  if (d.norms_per_layer != 2)
    return "layer: " + std::to_string(d.norms_per_layer) +
           " norms per layer (sandwich norms, gemma2) are not implemented; the layer runs two";
  const StepShape st = layer_step(r);
  for (auto [v, name] : {std::pair{d.hidden, "hidden"}, {d.intermediate, "intermediate"}, {d.heads, "heads"},
                         {d.kv_heads, "kv heads"}, {d.head_dim, "head_dim"}, {st.batch, "batch"},
                         {st.new_tokens, "tokens"}})
    if (v == 0) return std::string("layer: ") + name + " must be >= 1";
  if (st.phase == Phase::decode && st.context == 0) return std::string("layer: a decode step needs context >= 1");
  if (d.hidden % 8 || d.intermediate % 8)
    return "layer: hidden (" + std::to_string(d.hidden) + ") and intermediate (" + std::to_string(d.intermediate) +
           ") sizes must be multiples of 8";
  const auto t = r.dtype;
  const auto Hq = static_cast<long long>(d.heads), Hkv = static_cast<long long>(d.kv_heads),
             D = static_cast<long long>(d.head_dim);
  if (st.batch > 65535) return "layer: batch " + std::to_string(st.batch) + " exceeds 65535 (a grid dimension)";
  if (auto why = st.phase == Phase::prefill ? prefill_attention_unsupported(t, Hq, Hkv, D, false)
                                            : decode_attention_unsupported(t, Hq, Hkv, D, false, 0))
    return "layer: " + *why;
  // The flash kernel's tiles, against this device's shared memory (sm_120: 99 KiB a block).
  if (st.phase == Phase::prefill)
    if (auto why = shared_memory_unsupported("prefill flash attention (head_dim " + std::to_string(D) + ")",
                                             prefill_flash_smem_bytes(static_cast<int>(D)), ctx))
      return "layer: " + *why;
  if (auto why = kv_append_unsupported(t, D, false, 0)) return "layer: " + *why;
  const auto M = st.batch * st.new_tokens;
  const auto Nq = d.heads * d.head_dim, Nqkv = (d.heads + 2 * d.kv_heads) * d.head_dim;
  for (auto [v, name] : {std::pair{M, "batch x tokens"}, {Nqkv, "(heads + 2 kv heads) x head_dim"},
                         {2 * d.intermediate, "2 x intermediate"}})
    if (v > static_cast<std::uint64_t>(INT_MAX)) return std::string("layer: ") + name + " exceeds 32-bit indexing";
  for (const LinearShape& s : {LinearShape{M, Nqkv, d.hidden}, LinearShape{M, d.hidden, Nq},
                               LinearShape{M, 2 * d.intermediate, d.hidden}, LinearShape{M, d.hidden, d.intermediate}})
    if (auto w = cublaslt_linear_unsupported(t, s, ctx.cc_major, ctx.cc_minor)) return "layer: " + *w;
  return std::nullopt;
}

// The step's dimensions and decode attention's split plan (or why not: a dimension past 32 bits).
void fill_plan(LayerPlan& p, const OpRequest& r, const Context& ctx) {
  const StepShape st = layer_step(r);
  const ModelConfig m = layer_shard(r);
  try {
    p.gpus = to_int(layer_gpus(r), "gpus");
    p.prefill = st.phase == Phase::prefill;
    p.B = to_int(st.batch, "batch");
    p.S = to_int(st.new_tokens, "new tokens");
    p.M = to_int(st.batch * st.new_tokens, "tokens");
    p.L = p.prefill ? p.S : to_int(st.context, "context");
    p.h = to_int(m.hidden, "hidden");
    p.I = to_int(m.intermediate, "intermediate");
    p.Hq = to_int(m.heads, "heads");
    p.Hkv = to_int(m.kv_heads, "kv heads");
    p.D = to_int(m.head_dim, "head_dim");
  } catch (const Unsupported& e) {
    p.unsupported = e.what();
    return;
  }
  p.Nq = p.Hq * p.D;
  p.Nkv = p.Hkv * p.D;
  p.cap = p.L;                         // prefill: the prompt; decode: the context incl. the new token
  p.pos = p.prefill ? 0 : p.L - 1;     // where the step's first token goes
  // Decode attention's split-KV over the contiguous cache, the benchmark's own choice.
  if (!p.prefill) p.split = plan_decode_splits(r.dtype, p.B, p.Hq, p.Hkv, p.L, p.D, 0, 0, ctx.sm_count);
  p.scratch_bytes = p.split.workspace_floats * sizeof(float);
}

}  // namespace

TensorParallelLayerMaker& tensor_parallel_layer_maker() {
  static TensorParallelLayerMaker maker = nullptr;
  return maker;
}

std::shared_ptr<const LayerPlan> plan_layer(const OpRequest& r, const Context& ctx) {
  return make_plan<LayerPlan>(layer_op_unsupported(r, ctx), [&](LayerPlan& p) { fill_plan(p, r, ctx); });
}

}  // namespace phasebench::cuda
