#pragma once
// What the KV-cache and attention operations of the CUDA backend share
// (decode_attention.cu, kv_append.cu, prefill_attention.cu): the seeds of their
// buffers, the paged pool's fill, reading results back for verification, and the
// test access every one of them implements.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

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

}  // namespace phasebench::cuda
