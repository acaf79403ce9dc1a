// Counter expectations for every one of our CUDA kernels, counted by the
// emulation's counting build through the backend (Backend::count), at shapes
// large enough that fixed costs vanish: the distinct bytes an op's kernels touch
// are its formula's within 2% (weights and the KV cache read once), the streams
// that dominate (weights, K/V, the latent cache) are read once (bytes requested
// over distinct bytes) and coalesced (sector efficiency >= 95%), ldmatrix in the
// mma inner loops has no bank conflicts, and where a design re-reads on purpose
// (FA2 prefill: K/V once per 128-row query tile) the factor is asserted.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend.hpp"
#include "counting.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/elementwise.hpp"
#include "cuda/stream_read.hpp"
#include "phasebench/model.hpp"
#include "phasebench/op.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/fused_add_rmsnorm.hpp"
#include "phasebench/ops/prefill_attention.hpp"
#include "phasebench/ops/kv_append.hpp"
#include "phasebench/ops/latent_attention.hpp"
#include "phasebench/ops/layer.hpp"
#include "phasebench/ops/linear.hpp"
#include "phasebench/ops/linear_fp4.hpp"
#include "phasebench/ops/linear_int4.hpp"
#include "phasebench/ops/moe.hpp"
#include "phasebench/context_dist.hpp"
#include "phasebench/routing.hpp"

namespace phasebench {
namespace {

using nlohmann::json;

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

// What one run() of an op counted: its launches (Backend::count's JSON) and its cost.
struct Counted {
  json launches;
  OpCost cost;

  std::uint64_t unique() const {  // distinct bytes read + written, kernels and copies
    std::uint64_t n = 0;
    for (const auto& L : launches)
      n += L.value("kind", std::string()) == "kernel"
               ? L.value("unique_bytes_read", std::uint64_t{0}) + L.value("unique_bytes_written", std::uint64_t{0})
               : L.value("bytes_read", std::uint64_t{0}) + L.value("bytes_written", std::uint64_t{0});
    return n;
  }
  std::vector<json> kernels(const std::string& name_part) const {
    std::vector<json> v;
    for (const auto& L : launches)
      if (L.value("kind", std::string()) == "kernel" && L.value("kernel", std::string()).find(name_part) != std::string::npos)
        v.push_back(L);
    return v;
  }
  // The buffers of `size` bytes the op's kernels touched (each launch's view).
  std::vector<json> buffers(std::uint64_t size) const {
    std::vector<json> v;
    for (const auto& L : launches)
      if (L.contains("buffers"))
        for (const auto& b : L.at("buffers"))
          if (b.value("size", std::uint64_t{0}) == size) v.push_back(b);
    return v;
  }
};

// A buffer read once (bytes asked for over its distinct bytes) and in whole sectors.
void expect_streamed_once(const json& b, const char* how = "ld") {
  SCOPED_TRACE(b.dump());
  const auto& t = b.at(how);
  const double requested = t.at("bytes").get<double>(), unique = b.at("unique_bytes_read").get<double>();
  EXPECT_GT(unique, 0);
  EXPECT_LE(ratio(requested, unique), 1.02) << "re-read";
  EXPECT_GE(ratio(t.at("ideal").get<double>(), t.at("sectors").get<double>()), 0.95) << "uncoalesced";
}

void expect_formula_bytes(const Counted& c, double tolerance = 0.02, double extra = 0) {
  const double formula = static_cast<double>(c.cost.bytes.total()) + extra, counted = static_cast<double>(c.unique());
  EXPECT_NEAR(counted / formula, 1.0, tolerance) << "counted " << counted << " formula " << formula;
}

// Split-KV by design: each split of each query row writes its partial (fp32, `row_floats`
// of them) once and the reduction reads it once; the splits are an axis of the main kernel's grid.
double split_partials(const Counted& c, const std::string& kernel, std::uint64_t rows, std::uint64_t row_floats,
                      int grid_axis = 0) {
  const auto k = c.kernels(kernel);
  if (k.size() != 1) {
    ADD_FAILURE() << kernel << " launched " << k.size() << " times";
    return 0;
  }
  const std::uint64_t splits = k[0].at("grid")[grid_axis].get<std::uint64_t>();
  return splits > 1 ? 2.0 * static_cast<double>(rows * splits * row_floats * 4) : 0.0;
}

// ldmatrix without conflicts: one wavefront per 8x8 matrix.
void expect_ldmatrix_conflict_free(const json& L) {
  const auto& t = L.at("shared").at("ldsm");
  EXPECT_GT(t.at("requests").get<std::uint64_t>(), 0u) << L.value("kernel", std::string());
  EXPECT_EQ(t.at("sectors"), t.at("ideal")) << L.value("kernel", std::string());
}

class KernelCounters : public ::testing::Test {
 protected:
  static Backend& backend() {
    static std::unique_ptr<Backend> b = [] {
      std::string why;
      auto x = make_cuda_backend(&why);
      if (!x) throw std::runtime_error(why);
      return x;
    }();
    return *b;
  }
  void SetUp() override {
    if (auto no = backend().cannot_count()) FAIL() << *no;
  }
  Counted count(const OpRequest& r) {
    if (auto why = backend().cannot_run(r)) ADD_FAILURE() << *why;
    auto op = backend().prepare(r);
    op->verify();  // a kernel is counted only once it is right
    return Counted{backend().count(*op), OpRegistry::get().op(r.kind).cost(r)};
  }
};

const AttentionShape kLlama8B{4, 32, 8, 2048, 128};   // G = 4: CUDA-core kernel, 33.5 MB of KV
const AttentionShape kLlama70B{4, 64, 8, 2048, 128};  // G = 8: tensor-core kernel

std::uint64_t kv_bytes(const AttentionShape& s, std::uint64_t elem) { return s.B * s.Hkv * s.L * s.D * elem; }

TEST_F(KernelCounters, DecodeGemvReadsItsWeightsOnceAndCoalesced) {
  for (std::uint64_t M : {1, 8, 16}) {
    SCOPED_TRACE("M=" + std::to_string(M));
    const LinearShape s{M, 4096, 4096};
    const auto c = count(linear_request(s, DType::bf16, Impl::own));
    expect_formula_bytes(c);
    const auto w = c.buffers(s.N * s.K * 2);
    ASSERT_EQ(w.size(), 1u);
    expect_streamed_once(w[0]);
  }
}

TEST_F(KernelCounters, GemvInt4ReadsItsPackedWeightsOnce) {
  const LinearShape s{1, 4096, 4096};
  const auto c = count(linear_int4_request(s, 128, Impl::own));
  expect_formula_bytes(c);
  const auto q = c.buffers(s.N * s.K / 2);
  ASSERT_EQ(q.size(), 1u);
  expect_streamed_once(q[0]);
}

// The FP4 GEMV in both formats: its distinct bytes are the formula's (values, block
// scales and nvfp4's tensor scale exactly, X and Y), and its values and scales are
// each read once and in whole sectors; it uses no shared memory, so it has no bank
// conflicts. nvfp4's 8-byte path (K an odd multiple of 16, here 4112) reads rows
// that start inside a sector: values rows of K/2 = 8 (mod 32) bytes, so three rows
// in four take 9 sectors per 256-byte warp step for 8 (65/71 = 0.915 of ideal over
// a row), and scale rows of K/16 = 257 bytes, so 31 rows in 32 take 2 sectors per
// 32-byte step (0.537). Still read once: what is wasted is sectors per request (L1
// and L2 transactions), not DRAM bytes, and only at such K, which no model has.
TEST_F(KernelCounters, LinearFp4ReadsItsPackedWeightsAndScalesOnce) {
  struct Case {
    DType format;
    LinearShape s;
    double values_coalesced, scales_coalesced;  // the least sector efficiency of each
  };
  for (const Case c : {Case{DType::mxfp4, {1, 4096, 4096}, 0.95, 0.95}, Case{DType::nvfp4, {1, 4096, 4096}, 0.95, 0.95},
                       Case{DType::nvfp4, {4, 1024, 4112}, 0.91, 0.53}}) {
    SCOPED_TRACE(std::string(to_string(c.format)) + " K=" + std::to_string(c.s.K));
    const auto cnt = count(linear_fp4_request(c.s, c.format, Impl::own));
    expect_formula_bytes(cnt);
    const auto k = cnt.kernels("linear_fp4_kernel<");
    ASSERT_EQ(k.size(), 1u);
    for (const char* how : {"ld", "st", "atom", "ldsm"})
      EXPECT_EQ(k[0].at("shared").at(how).at("requests").get<std::uint64_t>(), 0u) << how;
    const Fp4Layout l{c.format, c.s.N, c.s.K};
    for (const auto& [bytes, coalesced] : {std::pair{l.value_bytes(), c.values_coalesced},
                                           std::pair{l.scale_bytes(), c.scales_coalesced}}) {
      SCOPED_TRACE(bytes);
      const auto b = cnt.buffers(bytes);
      ASSERT_EQ(b.size(), 1u);
      const auto& t = b[0].at("ld");
      EXPECT_GT(b[0].at("unique_bytes_read").get<double>(), 0);
      EXPECT_LE(ratio(t.at("bytes").get<double>(), b[0].at("unique_bytes_read").get<double>()), 1.02) << "re-read";
      EXPECT_GE(ratio(t.at("ideal").get<double>(), t.at("sectors").get<double>()), coalesced) << "uncoalesced";
    }
  }
}

TEST_F(KernelCounters, DecodeAttentionCudaCoreReadsTheCacheOnce) {
  for (const bool paged : {false, true})
    for (const bool fp8 : {false, true}) {
      SCOPED_TRACE(std::string(paged ? "paged" : "contiguous") + (fp8 ? " fp8" : ""));
      const auto c = count(decode_attention_request(kLlama8B, DType::bf16, paged, 16, 0, 0x5eed, fp8));
      const auto& s = kLlama8B;
      expect_formula_bytes(c, 0.005, split_partials(c, "decode_attention_kernel<", s.B * s.Hq, s.D + 1));
      const auto kernels = c.kernels("decode_attention_kernel<");
      ASSERT_EQ(kernels.size(), 1u);
      const std::uint64_t kv = paged ? 0 : kv_bytes(kLlama8B, fp8 ? 1 : 2);
      if (!paged) {
        const auto kvb = c.buffers(kv);
        ASSERT_EQ(kvb.size(), 2u);  // K and V
        for (const auto& b : kvb) expect_streamed_once(b);
      }
    }
}

TEST_F(KernelCounters, DecodeAttentionTensorCoreReadsTheCacheOnceWithoutLdmatrixConflicts) {
  for (const bool paged : {false, true})
    for (const bool fp8 : {false, true}) {
      SCOPED_TRACE(std::string(paged ? "paged" : "contiguous") + (fp8 ? " fp8" : ""));
      const auto c = count(decode_attention_request(kLlama70B, DType::bf16, paged, 16, 0, 0x5eed, fp8));
      const auto& s = kLlama70B;
      expect_formula_bytes(c, 0.005, split_partials(c, "decode_attention_mma_kernel<", s.B * s.Hq, s.D + 1));
      const auto kernels = c.kernels("decode_attention_mma_kernel<");
      ASSERT_EQ(kernels.size(), 1u);
      expect_ldmatrix_conflict_free(kernels[0]);
      if (!paged) {
        const auto kvb = c.buffers(kv_bytes(kLlama70B, fp8 ? 1 : 2));
        ASSERT_EQ(kvb.size(), 2u);
        for (const auto& b : kvb) expect_streamed_once(b, "ldgsts");
      }
    }
}

// FlashInfer's batch decode (impl:flashinfer, its templates under the emulation) over the
// same cache: each K and V byte read once and in whole sectors, as ours; what it writes
// beyond the formula is its split-KV partials (in its own workspace), so the distinct bytes
// are at least the formula's.
TEST_F(KernelCounters, FlashInferDecodeReadsTheCacheOnce) {
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    auto r = decode_attention_request(kLlama8B, DType::bf16, paged, 16);
    r.impl = Impl::flashinfer;
    if (auto why = backend().cannot_run(r)) GTEST_SKIP() << *why;
    const auto c = count(r);
    EXPECT_GE(static_cast<double>(c.unique()), 0.995 * static_cast<double>(c.cost.bytes.total()));
    const auto k = c.kernels("BatchDecodeWithPagedKVCacheKernel");
    ASSERT_EQ(k.size(), 1u);
    if (!paged) {
      const auto kvb = c.buffers(kv_bytes(kLlama8B, 2));
      ASSERT_EQ(kvb.size(), 2u);  // K and V, through cp.async
      for (const auto& b : kvb) expect_streamed_once(b, "ldgsts");
    }
  }
}

TEST_F(KernelCounters, MultiTokenRaggedStepsReadEachSequencesContextOnce) {
  for (const auto& s : {kLlama8B, kLlama70B}) {
    SCOPED_TRACE("Hq=" + std::to_string(s.Hq));
    AttentionShape small = s;
    small.L = 1024;
    OpRequest r = decode_attention_request(small, DType::bf16, false);
    set_decode_steps(r, 4, parse_context_dist("lognormal:1"));
    const auto c = count(r);
    // The formula counts each sequence's own context (the cache is allocated at the longest).
    const char* kernel = s.Hq / s.Hkv * 4 >= 8 ? "decode_attention_mma_kernel<" : "decode_attention_kernel<";
    expect_formula_bytes(c, 0.005, split_partials(c, kernel, s.B * 4 * s.Hq, s.D + 1));
  }
}

TEST_F(KernelCounters, LatentAttentionReadsTheLatentCacheOnce) {
  const LatentAttentionShape s{4, 16, 4096, 512, 64};  // DeepSeek-V2-Lite's 16 heads: 18.9 MB of latent cache
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    const auto c = count(latent_attention_request(s, DType::bf16, paged, 192));
    expect_formula_bytes(c, 0.005, split_partials(c, "latent_attention_kernel<", s.B * s.H, s.R + 2, 1));
    // The warps' partial scores go through shared memory in padded rows: no bank conflicts
    // (rows of 32 floats had 8-way ones on the loads and 4-way on the stores).
    const auto k = c.kernels("latent_attention_kernel<");
    ASSERT_EQ(k.size(), 1u);
    for (const char* kind : {"ld", "st"})
      EXPECT_EQ(k[0].at("shared").at(kind).at("sectors"), k[0].at("shared").at(kind).at("ideal")) << kind;
    if (!paged) {
      const auto cache = c.buffers(s.B * s.L * (s.R + s.P) * 2);
      ASSERT_EQ(cache.size(), 1u);
      expect_streamed_once(cache[0]);
    }
  }
}

TEST_F(KernelCounters, KvAppendWritesEachNewTokenOnce) {
  const KvAppendShape s{64, 1, 8, 128};
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    const auto c = count(kv_append_request(s, DType::bf16, 64, paged));
    expect_formula_bytes(c, 0.005);
    for (const auto& L : c.kernels("kv_append"))
      EXPECT_GE(ratio(L.at("global").at("st").at("ideal"), L.at("global").at("st").at("sectors")), 0.99);
  }
}

TEST_F(KernelCounters, PrefillFlashReadsKvOncePerQueryTileWithoutLdmatrixConflicts) {
  // 8 query tiles of 128 rows; the causal tile i reads keys 0 .. 128(i + 1): K and V are
  // asked for (1 + 2 + ... + 8) / 8 = 4.5 times their size, by design.
  const PrefillAttentionShape s{1, 8, 8, 1024, 128};
  const auto c = count(prefill_attention_request(s, DType::bf16, Impl::own));
  const auto kernels = c.kernels("prefill_flash_kernel<");
  ASSERT_EQ(kernels.size(), 1u);
  expect_ldmatrix_conflict_free(kernels[0]);
  expect_formula_bytes(c);  // distinct bytes: q, k, v and out once
  const std::uint64_t tensor = s.B * s.S * s.Hq * s.D * 2;
  const auto bufs = c.buffers(tensor);
  ASSERT_EQ(bufs.size(), 4u);  // q, k, v, out
  std::vector<double> factors;
  for (const auto& b : bufs) {
    const double asked = b.at("ldgsts").at("bytes").get<double>() + b.at("ld").at("bytes").get<double>();
    if (b.at("unique_bytes_read").get<double>() > 0) factors.push_back(asked / b.at("unique_bytes_read").get<double>());
  }
  ASSERT_EQ(factors.size(), 3u);  // out is only written
  std::sort(factors.begin(), factors.end());
  EXPECT_NEAR(factors[0], 1.0, 0.01);  // q: once
  EXPECT_NEAR(factors[1], 4.5, 0.01);  // k
  EXPECT_NEAR(factors[2], 4.5, 0.01);  // v
}

TEST_F(KernelCounters, CausalSoftmaxOfTheCublasPathReadsAndWritesItsScoresOnce) {
  const PrefillAttentionShape s{1, 8, 8, 512, 128};
  const auto c = count(prefill_attention_request(s, DType::bf16, Impl::blas));
  const auto k = c.kernels("causal_softmax_kernel");
  ASSERT_EQ(k.size(), 1u);
  // It reads the causal half of the fp32 scores (each row up to its diagonal) and writes the rows.
  const double pairs = static_cast<double>(s.B * s.Hq * s.S * (s.S + 1) / 2);
  EXPECT_NEAR(k[0].at("unique_bytes_read").get<double>() / (pairs * 4), 1.0, 0.02);
  EXPECT_GE(ratio(k[0].at("global").at("ld").at("ideal"), k[0].at("global").at("ld").at("sectors")), 0.95);
}

TEST_F(KernelCounters, MoePermuteActAndCombineMoveTheirRowsOnce) {
  const MoeShape s{64, 8, 32, 512, 256};  // 64 decode tokens, 8 of 32 experts each (small widths: the GEMMs are not counted)
  const auto c = count(moe_request(s, parse_routing("uniform"), DType::bf16, Impl::blas, Phase::decode));
  const std::uint64_t T = s.T, k = s.k, h = s.h;
  const auto permute = c.kernels("moe_permute_kernel");
  ASSERT_EQ(permute.size(), 1u);
  EXPECT_EQ(permute[0].at("unique_bytes_written").get<std::uint64_t>(), T * k * h * 2);
  const auto combine = c.kernels("moe_combine_kernel");
  ASSERT_EQ(combine.size(), 1u);
  EXPECT_EQ(combine[0].at("unique_bytes_written").get<std::uint64_t>(), T * h * 2);
  for (const auto* name : {"moe_permute_kernel", "moe_act_kernel", "moe_combine_kernel"})
    for (const auto& L : c.kernels(name)) {
      SCOPED_TRACE(name);
      EXPECT_GE(ratio(L.at("global").at("st").at("ideal"), L.at("global").at("st").at("sectors")), 0.95);
    }
}

TEST_F(KernelCounters, LayerElementwiseKernelsAndTheQkvSplitAreStreaming) {
  const auto m = load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-llama.json");  // the GEMMs are not counted
  const auto c = count(layer_request(m, Phase::decode, 8, 1024, DType::bf16));
  for (const auto* name : {"rmsnorm_kernel", "rope_neox_kernel", "silu_mul_kernel", "qkv_split_kernel"}) {
    const auto ks = c.kernels(name);
    ASSERT_FALSE(ks.empty()) << name;
    for (const auto& L : ks) {
      SCOPED_TRACE(name);
      for (const char* kind : {"ld", "st"}) {
        const auto& t = L.at("global").at(kind);
        if (t.at("requests").get<std::uint64_t>() > 0) {
          EXPECT_GE(ratio(t.at("ideal"), t.at("sectors")), 0.95) << kind;
        }
      }
    }
  }
}

TEST_F(KernelCounters, FusedAddRmsnormStreamsItsRowsOnceAndKeepsTheSumInRegisters) {
  // x and residual read once, residual_out and y written once, in whole sectors; the
  // second pass reads the sum from registers, not memory; the weight, read by every
  // row's CTA (from L2 on a GPU), is its formula's h elements of distinct bytes.
  // Rows of 544 vectors: two of the CTA's 256 and a tail of 32; 8704 bytes, whole sectors.
  const std::uint64_t M = 48, h = 4352;
  const auto c = count(fused_add_rmsnorm_request(M, h, DType::bf16));
  expect_formula_bytes(c, 0.001);
  const auto ks = c.kernels("fused_add_rmsnorm_kernel<");
  ASSERT_EQ(ks.size(), 1u);
  const auto& st = ks[0].at("global").at("st");
  EXPECT_EQ(st.at("bytes").get<std::uint64_t>(), 2 * M * h * 2) << "each output element written once";
  EXPECT_GE(ratio(st.at("ideal"), st.at("sectors")), 0.99);
  int streamed = 0;
  for (const auto& b : c.buffers(M * h * 2))
    if (b.value("unique_bytes_read", std::uint64_t{0}) > 0) {
      expect_streamed_once(b);
      ++streamed;
    }
  EXPECT_EQ(streamed, 2) << "x and residual; the outputs are never read back";
  const auto w = c.buffers(h * 2);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].at("ld").at("bytes").get<std::uint64_t>(), M * h * 2) << "the weight once per row";
}

TEST_F(KernelCounters, StreamReadReadsEveryByteOnceInWholeSectors) {
  cuda::DeviceBuffer data(std::size_t{16} << 20), sink(sizeof(unsigned));
  ASSERT_EQ(cudaMemset(data.get(), 0, data.bytes()), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  pb_emu::counters::begin();
  cuda::stream_read(data.get(), data.bytes(), sink.as<unsigned>(), 132, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto v = pb_emu::counters::end();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].unique_read, data.bytes());
  EXPECT_EQ(v[0].global_ld.bytes, data.bytes());
  EXPECT_EQ(v[0].global_ld.sectors, v[0].global_ld.ideal);
}

}  // namespace
}  // namespace phasebench
