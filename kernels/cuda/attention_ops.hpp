#pragma once
// What the KV-cache and attention operations of the CUDA backend share
// (decode_attention.cu, latent_attention.cu, kv_append.cu, prefill_attention.cu):
// the seeds of their buffers, the paged pool and its fill, reading caches and
// results back for verification, the test access every one of them implements
// (and its common part), and the registration of a contiguous and a paged kind.
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

// The block table of a paged op: pages of `page_size` tokens, enough
// for `tokens` per sequence, scattered by seed_of(r.seed, KvBuf::block_table)
// (common/paged_kv.hpp); the host copy for verification, the device copy
// (to_device, enqueued on the stream) for the kernel. Default: a contiguous op's, none.
struct BlockTable {
  BlockTable() = default;
  BlockTable(const OpRequest& r, std::uint64_t page_size, int B, std::uint64_t tokens);
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

// A KV-cache or attention op's common part: its context and request, and the
// test access over its output buffer (output()) and the fault-injection flag
// its verify() reads (fault_).
class AttentionOpBase : public PreparedOp, public AttentionOpAccess {
 public:
  std::vector<float> output_values() override { return output_as_float(); }
  std::vector<float> output_as_float() override;
  void set_fault_injection(bool on) override { fault_ = on; }

 protected:
  AttentionOpBase(Context& ctx, const OpRequest& r) : ctx_(ctx), r_(r) {}
  // The buffer output_as_float() reads, of the request's dtype.
  virtual const DeviceBuffer& output() const = 0;

  Context& ctx_;
  OpRequest r_;
  bool fault_ = false;
};

// Fills a [B, Hkv, L, D] cache of type t, contiguous or (pool.page_size > 0) in
// `pool`'s pages ([pages, Hkv, P, D], `elems` elements in all, the block table on
// the device already): the logical elements as a contiguous cache filled with
// seed_of(seed, logical) holds them, the pool's other slots (past L in each
// sequence's last page, read by nobody) with seed_of(seed, pool_fill).
void fill_kv_cache(void* cache, DType t, std::size_t elems, const BlockTable& pool, std::uint64_t seed, KvBuf logical,
                   KvBuf pool_fill, int B, int Hkv, int L, int D, cudaStream_t stream);

// Enqueues the copy of tokens [0, len) of (sequence b, KV head h) of a cache of
// `es`-byte elements, rows of `row_elems`, into `dst` as [len][row_elems]: a
// contiguous [B, Hkv, L, row_elems] cache (L its stride), or (pool.page_size > 0)
// through `pool`'s host block table. The caller synchronises.
void download_kv_rows(void* dst, const void* cache, std::size_t es, const BlockTable& pool, std::size_t b,
                      std::size_t h, std::size_t Hkv, std::size_t L, std::size_t len, std::size_t row_elems,
                      cudaStream_t stream);

// Registers `Op` (built from the context, the request and its plan, a `Plan`
// made by `planner`) as our own bf16/fp16 implementation of an operation's
// contiguous and paged kinds.
template <class Op, class Plan>
void add_contiguous_and_paged(CudaOps& registry, const char* kind, const char* paged_kind,
                              std::shared_ptr<const Plan> (*planner)(const OpRequest&, const Context&)) {
  auto plan = [planner](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> { return planner(r, ctx); };
  for (const char* k : {kind, paged_kind}) registry.add({k, Impl::own, takes_16bit, {}, plan, prepare_op<Op, Plan>()});
}

}  // namespace phasebench::cuda
