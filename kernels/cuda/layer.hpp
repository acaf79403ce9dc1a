#pragma once
// One whole transformer layer (kind layer, impl own) as a PreparedOp: the sequence of
// model.hpp's layer_ops, as an engine runs it, all on the context's stream:
//
//   attn_norm (RMSNorm) -> qkv_proj (cuBLASLt) -> rope (q, k in place on qkv)
//   -> qkv_split (q, k, v out of the fused buffer) -> kv_append (contiguous cache)
//   -> attention (decode: decode_attention over L; prefill: flash over S)
//   -> o_proj -> mlp_norm -> gate_up_proj -> act_mul (SiLU * up) -> down_proj
//
// Residual adds are omitted (layer_ops counts none): mlp_norm normalises the
// o_proj output and the layer's output is down_proj's. qkv_split is the one op
// beyond layer_ops: the attention and KV-append kernels take packed
// [tokens, heads, D] buffers, the fused projection emits [tokens, (Hq+2Hkv)*D].
// Each op runs inside an NVTX range "<request name>/<op name>".
#include <string>
#include <vector>

namespace phasebench::cuda {

// The operation is registered in layer.cu (bf16 and fp16), planned by
// layer_plan.hpp, its own kernel in layer.cuh; make it with make_op
// (cuda_op.hpp). Test access to that op (dynamic_cast the PreparedOp):
class LayerOpAccess {
 public:
  virtual ~LayerOpAccess() = default;
  // The layer's output [B*S, hidden] decoded to floats (synchronises).
  virtual std::vector<float> output_as_float() = 0;
  // Test only: verify() zeroes the output before comparing, so it must throw.
  virtual void set_fault_injection(bool on) = 0;
  // The names of the ops run() enqueues, in order (the NVTX ranges' suffixes).
  virtual std::vector<std::string> op_names() const = 0;
};

}  // namespace phasebench::cuda
