#pragma once
// One GPU's part of a whole layer (layer.hpp): its buffers, its four cuBLASLt
// matmuls and its kernels' parameters on one Context, enqueued in two halves
// around the points where a tensor-parallel layer all-reduces (after o_proj and
// after down_proj); and the CPU reference of a token through every shard of the
// layer. The one-GPU layer is one shard (layer.cu); the tensor-parallel layer
// one shard a GPU with NCCL between (layer_tp.cpp). Host code; kernels in layer.cuh.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_common.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/kv_append.hpp"
#include "cuda/layer_plan.hpp"
#include "cuda/linear_cublaslt.hpp"
#include "cuda/prefill_attention.hpp"
#include "phasebench/op.hpp"
#include "reference/common.hpp"
#include "reference/layer.hpp"

namespace phasebench::cuda {

class LayerShard {
 public:
  // Shard `rank` of plan.gpus, on ctx's device (current while this runs) and
  // stream: weights seeded per rank, except the norms' scales, which every rank
  // holds alike (replicated), as it holds the same input x; the KV cache filled
  // as earlier tokens' (random); activations zeroed. Synchronises.
  LayerShard(Context& ctx, const OpRequest& r, const LayerPlan& plan, int rank);
  LayerShard(const LayerShard&) = delete;
  LayerShard& operator=(const LayerShard&) = delete;

  // attn_norm -> qkv_proj -> rope -> qkv_split -> kv_append -> attention -> o_proj (into o()).
  void enqueue_attention();
  // mlp_norm (of o()) -> gate_up_proj -> act_mul -> down_proj (into out()).
  void enqueue_mlp();
  // The NVTX range names "<prefix>/<op>" (rank k > 0 of several: "<prefix>/rank<k>/<op>").
  std::string range(const char* op) const { return prefix_ + "/" + op; }

  Context& ctx() { return ctx_; }
  void* o() { return o_.get(); }      // [M, h]: o_proj's output (a partial sum when sharded)
  void* out() { return out_.get(); }  // [M, h]: down_proj's output (a partial sum when sharded)
  std::size_t hidden_elements() const { return static_cast<std::size_t>(M_) * h_; }
  std::string describe() const;  // the shard's step and dimensions, for messages

  // The weights as the reference reads them, downloaded (synchronises).
  reference::LayerWeights weights();
  // Row m (token b * step_tokens + s) of the input x.
  std::vector<float> input_row(std::size_t m);
  // Of token (sequence b, token s of the step), from the normed input xn: the
  // shard's qkv_proj and RoPE through the reference, checked against its K and V
  // in the cache and its attention output; returns o_proj's output (the shard's
  // partial sum when sharded), rounded as the kernels store it. The first
  // mismatch goes into `wrong` (and the reference goes on).
  std::vector<float> reference_attention_part(const reference::LayerWeights& w, const std::vector<float>& xn, int b,
                                              int s, const reference::Tolerance& tol, std::string& wrong);
  // The shard's MLP part of a token from the normed o: down_proj's partial output
  // (rounded when `round_out`), its |x*w| sums into abs.
  std::vector<float> reference_mlp_part(const reference::LayerWeights& w, const std::vector<float>& xn2,
                                        std::vector<double>& abs, bool round_out);
  // The device's layer output of token m (row m of out()).
  std::vector<float> output_row(std::size_t m);
  std::vector<float> output_all();

  bool prefill() const { return prefill_; }
  int batch() const { return B_; }
  int step_tokens() const { return S_; }

 private:
  void allocate_and_fill(std::size_t ws_floats, int rank);
  void make_matmuls();
  void set_kernel_params(std::size_t ws_floats);

  Context& ctx_;
  OpRequest r_;
  bool prefill_ = false;
  int B_ = 0, S_ = 0, M_ = 0, L_ = 0, h_ = 0, I_ = 0, Hq_ = 0, Hkv_ = 0, D_ = 0, Nq_ = 0, Nkv_ = 0;
  int cap_ = 0, pos_ = 0, chunk_ = 1, splits_ = 1;
  int rank_ = 0, gpus_ = 1;
  std::string prefix_;
  DeviceBuffer w_attn_norm_, w_qkv_, w_o_, w_mlp_norm_, w_gate_up_, w_down_;
  DeviceBuffer x_, xn_, qkv_, q_, k_new_, v_new_, attn_, o_, xn2_, gate_up_, act_, out_;
  DeviceBuffer k_cache_, v_cache_, positions_, ws_;
  std::unique_ptr<CublasLtLinear> qkv_proj_, o_proj_, gate_up_proj_, down_proj_;
  KvAppendParams ap_;
  DecodeAttentionParams dp_;
  PrefillAttentionParams pp_;
};

// Runs one token (sequence b, token s of the step) through the reference of the
// whole layer over its shards (one, or one a GPU with the partial sums of o_proj
// and down_proj added as the all-reduces add them) and compares each shard's K
// and V in the cache, its attention output and its layer output (after the
// all-reduces: every rank holds the sum). `shards`: this process's;
// `across_processes`: the others' are in the run's other processes (mpirun),
// whose partial sums are added over MPI. VerificationError on a mismatch (over
// processes, on every rank: the first rank's).
void verify_layer_token(const std::vector<LayerShard*>& shards, const std::vector<reference::LayerWeights>& w,
                        const reference::Tolerance& tol, int b, int s, bool across_processes);
// The tokens verify() follows: decode, the first and the last sequence; prefill,
// the last token of the first sequence, the middle token of the last one and token 0.
std::vector<std::pair<int, int>> layer_tokens_to_verify(const LayerShard& s);
// Twice the dtype's tolerance: six ops' roundings compound along the chain.
reference::Tolerance layer_tolerance(DType t);

}  // namespace phasebench::cuda
