// FlashInfer 0.6.9's batch decode (BatchDecodeWithPagedKVCacheDispatched, the CUDA-core
// kernel over a paged HND cache) run under the functional emulation, against the
// double-precision CPU reference; without split-KV and with it (partials merged by FlashInfer).
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <numeric>
#include <random>

#include "flashinfer_emu_util.hpp"

namespace {

using namespace fi_emu;
using bf16 = __nv_bfloat16;
using Params = flashinfer::BatchDecodeParams<bf16, bf16, bf16, int32_t>;
using Variant = flashinfer::DefaultAttention<false, false, false, false>;

struct DecodeCase {
  unsigned head_dim, page_size, group, num_kv_heads;
  std::vector<int> lens;
  bool split;  // split-KV: chunks of 2 pages per CTA, merged by VariableLengthMergeStates
};

std::string name_of(const DecodeCase& c) {
  std::string s = "D" + std::to_string(c.head_dim) + " page" + std::to_string(c.page_size) + " group" +
                  std::to_string(c.group) + (c.split ? " split" : " nosplit") + " lens";
  for (int l : c.lens) s += " " + std::to_string(l);
  return s;
}

template <unsigned D>
cudaError_t dispatch(Params p, bf16* tmp_v, float* tmp_s) {
  return flashinfer::BatchDecodeWithPagedKVCacheDispatched<D, flashinfer::PosEncodingMode::kNone, Variant, Params>(
      p, tmp_v, tmp_s, /*enable_pdl=*/false, nullptr);
}

void run_decode(const DecodeCase& c) {
  const unsigned D = c.head_dim, P = c.page_size, Hkv = c.num_kv_heads, Hq = Hkv * c.group;
  const unsigned B = static_cast<unsigned>(c.lens.size());
  // Pages: each request's pages, shuffled over the pool so that the indirection matters.
  std::vector<int> indptr{0}, last_page_len;
  for (int l : c.lens) {
    const int pages = (l + static_cast<int>(P) - 1) / static_cast<int>(P);
    indptr.push_back(indptr.back() + pages);
    last_page_len.push_back(l - (pages - 1) * static_cast<int>(P));
  }
  const int num_pages = indptr.back() + 1;  // one page nobody uses
  std::vector<int> indices(static_cast<std::size_t>(num_pages));
  std::iota(indices.begin(), indices.end(), 0);
  std::shuffle(indices.begin(), indices.end(), std::mt19937(7));
  indices.pop_back();

  const std::size_t page_elems = static_cast<std::size_t>(Hkv) * P * D;  // HND: [page][head][slot][d]
  Bf16Data k(num_pages * page_elems, 11), v(num_pages * page_elems, 12), q(static_cast<std::size_t>(B) * Hq * D, 13);
  Dev<bf16> dk(k.bits), dv(v.bits), dq(q.bits), dout(static_cast<std::size_t>(B) * Hq * D);
  Dev<int> dindices(indices), dindptr(indptr), dlast(last_page_len);

  flashinfer::paged_kv_t<bf16, int32_t> paged_kv(Hkv, P, D, B, flashinfer::QKVLayout::kHND, dk.p, dv.p, dindices.p,
                                                 dindptr.p, dlast.p);
  const float sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
  Params params(dq.p, nullptr, paged_kv, dout.p, nullptr, nullptr, Hq, static_cast<int>(Hq * D), static_cast<int>(D),
                /*window_left=*/-1, /*logits_soft_cap=*/0.f, sm_scale, /*rope_scale=*/1.f, /*rope_theta=*/1e4f);

  // The work list FlashInfer's DecodePlan makes, written by hand: one CTA per request,
  // or (split) one per chunk of 2 pages, o_indptr giving each request's chunks.
  std::vector<int> request_indices, kv_tile_indices, o_indptr{0};
  const int chunk_tokens = c.split ? 2 * static_cast<int>(P) : 1 << 30;
  for (unsigned b = 0; b < B; ++b) {
    const int chunks = c.split ? (c.lens[b] + chunk_tokens - 1) / chunk_tokens : 1;
    for (int t = 0; t < chunks; ++t) {
      request_indices.push_back(static_cast<int>(b));
      kv_tile_indices.push_back(t);
    }
    o_indptr.push_back(o_indptr.back() + chunks);
  }
  const std::size_t ctas = request_indices.size();
  Dev<int> dreq(request_indices), dtile(kv_tile_indices), doind(o_indptr), dchunk(std::vector<int>{chunk_tokens});
  Dev<bf16> tmp_v(c.split ? ctas * Hq * D : 0);
  Dev<float> tmp_s(c.split ? ctas * Hq : 0);
  params.padded_batch_size = static_cast<uint32_t>(ctas);
  params.request_indices = dreq.p;
  params.kv_tile_indices = dtile.p;
  params.o_indptr = doind.p;
  params.kv_chunk_size_ptr = dchunk.p;
  params.block_valid_mask = nullptr;

  const cudaError_t e = D == 64 ? dispatch<64>(params, c.split ? tmp_v.p : nullptr, c.split ? tmp_s.p : nullptr)
                                : dispatch<128>(params, c.split ? tmp_v.p : nullptr, c.split ? tmp_s.p : nullptr);
  ASSERT_EQ(e, cudaSuccess) << name_of(c) << ": " << cudaGetErrorString(e);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name_of(c) << ": " << cudaGetErrorString(cudaGetLastError());

  // The reference: each query head over its request's tokens, token t of a request at
  // page indices[indptr[b] + t / P], slot t % P.
  std::vector<double> want(static_cast<std::size_t>(B) * Hq * D);
  for (unsigned b = 0; b < B; ++b)
    for (unsigned h = 0; h < Hq; ++h) {
      const unsigned kvh = h / c.group;
      auto at = [&](const std::vector<float>& kv, std::size_t t) {
        const std::size_t page = static_cast<std::size_t>(indices[static_cast<std::size_t>(indptr[b]) + t / P]);
        return kv.data() + page * page_elems + (static_cast<std::size_t>(kvh) * P + t % P) * D;
      };
      ref::attend(q.values.data() + (static_cast<std::size_t>(b) * Hq + h) * D, static_cast<std::size_t>(c.lens[b]),
                  D, D, sm_scale, [&](std::size_t t) { return at(k.values, t); },
                  [&](std::size_t t) { return at(v.values, t); }, want.data() + (static_cast<std::size_t>(b) * Hq + h) * D);
    }
  expect_rows_close(dout.read(), want, D, "FlashInfer batch decode " + name_of(c));
}

// Tail-heavy contexts: 1 token, partial first page, partial last pages, one past a page.
const std::vector<int> kLens{1, 17, 100, 257};

TEST(FlashInferDecodeEmu, NoSplitPage16Group4) {
  for (unsigned D : {64u, 128u}) run_decode({D, 16, 4, 2, kLens, false});
}
TEST(FlashInferDecodeEmu, NoSplitPage32Group1) {
  for (unsigned D : {64u, 128u}) run_decode({D, 32, 1, 2, kLens, false});
}
TEST(FlashInferDecodeEmu, SplitPage16Group1) {
  for (unsigned D : {64u, 128u}) run_decode({D, 16, 1, 2, kLens, true});
}
TEST(FlashInferDecodeEmu, SplitPage32Group4) {
  for (unsigned D : {64u, 128u}) run_decode({D, 32, 4, 2, {257, 33, 1}, true});
}

}  // namespace
