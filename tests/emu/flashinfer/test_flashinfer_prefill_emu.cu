// FlashInfer 0.6.9's prefill (SinglePrefillWithKVCacheDispatched and
// BatchPrefillWithRaggedKVCacheDispatched, the tensor-core FA2 kernels, causal, NHD)
// under the functional emulation, against the double-precision CPU reference.
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "flashinfer_emu_util.hpp"

namespace {

using namespace fi_emu;
using bf16 = __nv_bfloat16;
using Variant = flashinfer::DefaultAttention<false, false, false, false>;
constexpr auto kCausal = flashinfer::MaskMode::kCausal;
constexpr auto kNoRope = flashinfer::PosEncodingMode::kNone;

// The causal reference for one request, NHD rows: query i (of qo_len) sees keys
// 0 .. kv_len - qo_len + i (FlashInfer aligns the query block to the end of the keys).
void reference(const float* q, const float* k, const float* v, unsigned qo_len, unsigned kv_len, unsigned Hq,
               unsigned Hkv, unsigned D, double* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (unsigned i = 0; i < qo_len; ++i)
    for (unsigned h = 0; h < Hq; ++h) {
      const unsigned kvh = h / (Hq / Hkv);
      ref::attend(q + (static_cast<std::size_t>(i) * Hq + h) * D, kv_len - qo_len + i + 1, D, D, scale,
                  [&](std::size_t t) { return k + (t * Hkv + kvh) * D; },
                  [&](std::size_t t) { return v + (t * Hkv + kvh) * D; }, out + (static_cast<std::size_t>(i) * Hq + h) * D);
    }
}

template <unsigned D>
void run_single(unsigned len, unsigned Hq, unsigned Hkv) {
  Bf16Data q(static_cast<std::size_t>(len) * Hq * D, 21), k(static_cast<std::size_t>(len) * Hkv * D, 22),
      v(static_cast<std::size_t>(len) * Hkv * D, 23);
  Dev<bf16> dq(q.bits), dk(k.bits), dv(v.bits), dout(static_cast<std::size_t>(len) * Hq * D);
  using Params = flashinfer::SinglePrefillParams<bf16, bf16, bf16>;
  Params p(dq.p, dk.p, dv.p, nullptr, dout.p, nullptr, nullptr, Hq, Hkv, len, len, Hq * D, D, Hkv * D, D, D,
           /*window_left=*/-1, /*logits_soft_cap=*/0.f, 1.0f / std::sqrt(static_cast<float>(D)), 1.f, 1e4f);
  const std::string what = "FlashInfer single prefill D" + std::to_string(D) + " len " + std::to_string(len) +
                           " heads " + std::to_string(Hq) + "/" + std::to_string(Hkv);
  const cudaError_t e =
      flashinfer::SinglePrefillWithKVCacheDispatched<D, D, kNoRope, false, kCausal, Variant, Params>(p, nullptr, nullptr);
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what << ": " << cudaGetErrorString(cudaGetLastError());
  std::vector<double> want(static_cast<std::size_t>(len) * Hq * D);
  reference(q.values.data(), k.values.data(), v.values.data(), len, len, Hq, Hkv, D, want.data());
  expect_rows_close(dout.read(), want, D, what);
}

TEST(FlashInferPrefillEmu, SingleCausal) {
  for (unsigned len : {1u, 33u, 77u}) {
    run_single<64>(len, 4, 1);
    run_single<128>(len, 2, 2);
  }
}

// Ragged batch: requests of different lengths (qo_len = kv_len each), planned by
// FlashInfer's PrefillPlan (which picks the query tile and whether to split KV).
template <unsigned D>
void run_ragged(const std::vector<int>& lens, unsigned Hq, unsigned Hkv) {
  using Params = flashinfer::BatchPrefillRaggedParams<bf16, bf16, bf16, int32_t>;
  std::vector<int> indptr{0};
  for (int l : lens) indptr.push_back(indptr.back() + l);
  const std::size_t rows = static_cast<std::size_t>(indptr.back());
  Bf16Data q(rows * Hq * D, 31), k(rows * Hkv * D, 32), v(rows * Hkv * D, 33);
  Dev<bf16> dq(q.bits), dk(k.bits), dv(v.bits), dout(rows * Hq * D);
  Dev<int> dqo(indptr), dkv(indptr);
  const unsigned B = static_cast<unsigned>(lens.size());

  std::vector<unsigned char> float_ws(64u << 20), int_ws(8u << 20), int_ws_host(8u << 20);
  Dev<unsigned char> dfloat_ws(float_ws.size()), dint_ws(int_ws.size());
  flashinfer::PrefillPlanInfo plan;
  std::vector<int> qo_h = indptr, kv_h = indptr;
  const std::string what = "FlashInfer ragged prefill D" + std::to_string(D) + " heads " + std::to_string(Hq) + "/" +
                           std::to_string(Hkv);
  cudaError_t e = flashinfer::PrefillPlan<int32_t>(
      dfloat_ws.p, float_ws.size(), dint_ws.p, int_ws_host.data(), int_ws.size(), plan, qo_h.data(), kv_h.data(),
      static_cast<uint32_t>(rows), B, Hq, Hkv, D, D, /*page_size=*/1, /*enable_cuda_graph=*/false,
      /*sizeof_dtype_o=*/2, /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
      /*num_colocated_ctas=*/0, nullptr);
  ASSERT_EQ(e, cudaSuccess) << what << " plan: " << cudaGetErrorString(e);

  Params p(dq.p, dk.p, dv.p, nullptr, dqo.p, dkv.p, nullptr, nullptr, nullptr, dout.p, nullptr, nullptr, Hq, Hkv,
           Hq * D, D, Hkv * D, D, /*window_left=*/-1, 0.f, 1.0f / std::sqrt(static_cast<float>(D)), 1.f, 1e4f);
  auto* ib = dint_ws.p;
  auto at = [](unsigned char* base, int64_t off) { return base + off; };
  p.request_indices = reinterpret_cast<int*>(at(ib, plan.request_indices_offset));
  p.qo_tile_indices = reinterpret_cast<int*>(at(ib, plan.qo_tile_indices_offset));
  p.kv_tile_indices = reinterpret_cast<int*>(at(ib, plan.kv_tile_indices_offset));
  p.o_indptr = reinterpret_cast<int*>(at(ib, plan.o_indptr_offset));
  p.kv_chunk_size_ptr = reinterpret_cast<int*>(at(ib, plan.kv_chunk_size_ptr_offset));
  bf16* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (plan.split_kv) {
    p.merge_indptr = reinterpret_cast<int*>(at(ib, plan.merge_indptr_offset));
    tmp_v = reinterpret_cast<bf16*>(at(dfloat_ws.p, plan.v_offset));
    tmp_s = reinterpret_cast<float*>(at(dfloat_ws.p, plan.s_offset));
  }
  p.padded_batch_size = static_cast<uint32_t>(plan.padded_batch_size);
  p.max_total_num_rows = static_cast<uint32_t>(plan.total_num_rows);
  switch (plan.cta_tile_q) {
    case 16:
      e = flashinfer::BatchPrefillWithRaggedKVCacheDispatched<16, D, D, kNoRope, false, kCausal, Variant, Params>(
          p, tmp_v, tmp_s, false, nullptr);
      break;
    case 64:
      e = flashinfer::BatchPrefillWithRaggedKVCacheDispatched<64, D, D, kNoRope, false, kCausal, Variant, Params>(
          p, tmp_v, tmp_s, false, nullptr);
      break;
    default:
      e = flashinfer::BatchPrefillWithRaggedKVCacheDispatched<128, D, D, kNoRope, false, kCausal, Variant, Params>(
          p, tmp_v, tmp_s, false, nullptr);
      break;
  }
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what << ": " << cudaGetErrorString(cudaGetLastError());
  std::vector<double> want(rows * Hq * D);
  for (unsigned b = 0; b < B; ++b) {
    const std::size_t r0 = static_cast<std::size_t>(indptr[b]);
    reference(q.values.data() + r0 * Hq * D, k.values.data() + r0 * Hkv * D, v.values.data() + r0 * Hkv * D,
              static_cast<unsigned>(lens[b]), static_cast<unsigned>(lens[b]), Hq, Hkv, D, want.data() + r0 * Hq * D);
  }
  expect_rows_close(dout.read(), want, D,
                    what + " cta_tile_q " + std::to_string(plan.cta_tile_q) + (plan.split_kv ? " split" : ""));
}

TEST(FlashInferPrefillEmu, RaggedCausal) {
  run_ragged<64>({33, 1, 77}, 4, 1);
  run_ragged<128>({17, 70}, 2, 2);
}

}  // namespace
