#pragma once
// What the KV-cache and attention operations of the CUDA backend share
// (decode_attention.cu, latent_attention.cu, kv_append.cu,
// prefill_attention.cu): the seeds of their buffers, the paged pool's fill,
// reading results back for verification, the test access every one of them
// implements, and the registration of a contiguous and a paged kind.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_op.hpp"
#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// The buffers of one request, each with its own seed derived from the request's.
enum class KvBuf : std::uint64_t { q = 1, k = 2, v = 3, k_new = 4, v_new = 5, block_table = 6, k_pool = 7, v_pool = 8 };
std::uint64_t seed_of(std::uint64_t seed, KvBuf b);

// Host encoding of a float into 16-bit storage bits, as fill_random does on the device.
std::uint16_t encode_host(DType t, float v);

// `rows` rows of `row_elems` elements, `pitch_elems` apart on the device, decoded to floats [rows][row_elems].
std::vector<float> download_2d_as_float(const void* src, DType t, std::size_t rows, std::size_t row_elems,
                                        std::size_t pitch_elems, cudaStream_t stream);

// n indices in [0, total) including the first and the last, evenly spaced; all when total <= n.
std::vector<std::uint64_t> spread_sample(std::uint64_t total, std::uint64_t n);

// Fills a page pool [pages, Hkv, P, D] so that logical element (b, h, t, d), t < L,
// holds what a contiguous [B, Hkv, L, D] cache filled with fill_random(seed) holds
// there: a paged op and a contiguous op of the same seed see the same cache.
void paged_logical_fill(void* pool, const std::int32_t* block_table, DType t, std::uint64_t seed, int B, int Hkv, int L,
                        int D, int P, int pages_per_seq, cudaStream_t stream);

// The block table of a paged op: pages of r.params["page_size"] tokens, enough
// for `tokens` per sequence, scattered by seed_of(r.seed, KvBuf::block_table)
// (common/paged_kv.hpp); the host copy for verification, the device copy
// (to_device, enqueued on the stream) for the kernel. Default: a contiguous op's, none.
struct BlockTable {
  BlockTable() = default;
  BlockTable(const OpRequest& r, int B, std::uint64_t tokens);
  void to_device(cudaStream_t stream);
  const std::int32_t* table() const { return device.as<std::int32_t>(); }

  int page_size = 0, pages_per_seq = 0;
  std::vector<std::int32_t> host;  // [B, pages_per_seq] page ids
  DeviceBuffer device;
};

// Test access to a KV-cache or attention op from make_op (cuda_op.hpp): a test
// can dynamic_cast the PreparedOp to read its output or to check that verify()
// catches a wrong result. Nothing in the benchmarks needs it.
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

// Registers `Op` (built from the context and the request) as our own bf16/fp16
// implementation of an operation's contiguous and paged kinds, with
// `unsupported`'s limits and `scratch`'s bytes beyond the footprint (empty: none).
template <class Op>
void add_contiguous_and_paged(CudaOps& registry, const char* kind, const char* paged_kind,
                              std::function<std::optional<std::string>(const OpRequest&, const Context&)> unsupported,
                              std::function<std::uint64_t(const OpRequest&, const Context&)> scratch = {}) {
  auto prepare = [](Context& ctx, const OpRequest& r) -> std::unique_ptr<PreparedOp> { return std::make_unique<Op>(ctx, r); };
  for (const char* k : {kind, paged_kind}) registry.add({k, Impl::own, takes_16bit, {}, unsupported, scratch, prepare});
}

// The scratch of a split-KV decode op: its plan's workspace, Plan(ctx, r).workspace_floats floats.
template <auto Plan>
std::uint64_t split_workspace_bytes(const OpRequest& r, const Context& ctx) {
  return Plan(ctx, r).workspace_floats * sizeof(float);
}

}  // namespace phasebench::cuda
