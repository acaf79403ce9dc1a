// Prefill attention on CUDA (prefill_attention.hpp): the launchers of the flash
// kernel and of the cuBLAS path with a materialised score matrix (the kernels are
// prefill_attention.cuh), and the operation (kind prefill_attention, impls own
// and blas), built from its request's plan (prefill_attention_plan.hpp) and
// verified row by row against the CPU reference.
#include "cuda/prefill_attention.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reference/common.hpp"
#include "reference/prefill_attention.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/dispatch.cuh"
#include "cuda/prefill_attention.cuh"
#include "cuda/prefill_attention_op.hpp"
#include "cuda/prefill_attention_plan.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench::cuda {

// ---- the launchers --------------------------------------------------------------

namespace {

template <class Tag, int D>
void launch_flash_t(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr std::size_t smem = FlashConfig<D>::total;
  allow_dynamic_smem<prefill_flash_kernel<Tag, D>>(smem);
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const dim3 grid(static_cast<unsigned>((p.S + kBM - 1) / kBM), static_cast<unsigned>(p.Hq),
                  static_cast<unsigned>(p.B));
  prefill_flash_kernel<Tag, D><<<grid, FlashConfig<D>::kThreads, smem, stream>>>(
      static_cast<const std::uint16_t*>(p.q), static_cast<const std::uint16_t*>(p.k),
      static_cast<const std::uint16_t*>(p.v), static_cast<std::uint16_t*>(p.out), p.S, p.Hq, p.Hkv, scale_log2);
  PB_CUDA_CHECK_LAUNCH("prefill_flash_kernel");
}

}  // namespace

PrefillAttentionParams prefill_attention_params(DType t, const void* q, const void* k, const void* v, void* out, int B,
                                                int S, int Hq, int Hkv, int D) {
  return {t, q, k, v, out, B, S, Hq, Hkv, D};
}

std::size_t prefill_flash_smem_bytes(int D) {
  switch (D) {
    case 64: return FlashConfig<64>::total;
    case 128: return FlashConfig<128>::total;
    case 256: return FlashConfig<256>::total;
    default: return 0;
  }
}

void launch_prefill_flash(const PrefillAttentionParams& p, cudaStream_t stream) {
  if (auto why = prefill_attention_unsupported(p.dtype, p.Hq, p.Hkv, p.D, false)) throw Unsupported(*why);
  if (p.B <= 0 || p.S <= 0) throw Unsupported("prefill attention: batch and prompt length must be >= 1");
  if (p.B > 65535) throw Unsupported("prefill attention: batch " + std::to_string(p.B) + " exceeds 65535");
  const bool bf16 = p.dtype == DType::bf16;
  switch (p.D) {
    case 64: bf16 ? launch_flash_t<Bf16Tag, 64>(p, stream) : launch_flash_t<Fp16Tag, 64>(p, stream); break;
    case 128: bf16 ? launch_flash_t<Bf16Tag, 128>(p, stream) : launch_flash_t<Fp16Tag, 128>(p, stream); break;
    default: bf16 ? launch_flash_t<Bf16Tag, 256>(p, stream) : launch_flash_t<Fp16Tag, 256>(p, stream); break;
  }
}

void launch_prefill_blas(const PrefillAttentionParams& p, float* scores, const void* const* pointers,
                         cublasHandle_t cublas, cudaStream_t stream) {
  if (auto why = prefill_attention_unsupported(p.dtype, p.Hq, p.Hkv, p.D, true)) throw Unsupported(*why);
  if (p.B <= 0 || p.S <= 0) throw Unsupported("prefill attention: batch and prompt length must be >= 1");
  if (pointers == nullptr) throw std::logic_error("prefill attention (cuBLAS): no pointer arrays");
  const int S = p.S, D = p.D, Hq = p.Hq, Hkv = p.Hkv;
  const cudaDataType_t t = p.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.f, zero = 0.f;
  const long long n_ll = static_cast<long long>(p.B) * Hq;
  if (n_ll > INT_MAX) throw Unsupported("prefill attention (cuBLAS): more than 2^31 (batch, head) problems");
  const int n = static_cast<int>(n_ll);
  const void* const* ptr = pointers;

  // Scores of every (batch, query head) in one call. Column-major view:
  // C (S_keys x S_queries, ldc S) = K_h^T^T Q_h^T, i.e. row-major scores[i][j] = q_i . k_j.
  PB_CUBLAS_CHECK(cublasGemmBatchedEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, &one, ptr, t, Hkv * D, ptr + n, t,
                                      Hq * D, &zero, const_cast<void* const*>(ptr + 2 * n), CUDA_R_32F, S, n,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));

  const std::size_t smem = static_cast<std::size_t>(S) * sizeof(float);
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const unsigned long long rows = static_cast<unsigned long long>(p.B) * Hq * S;
  if (rows >= (1ull << 31)) throw Unsupported("prefill attention (cuBLAS): too many score rows for one grid");
  auto launch_softmax = [&](auto tag) {
    using Tag = decltype(tag);
    if (smem > 48 * 1024)
      PB_CUDA_CHECK(cudaFuncSetAttribute(causal_softmax_kernel<Tag>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
    causal_softmax_kernel<Tag><<<static_cast<unsigned>(rows), kSoftmaxThreads, smem, stream>>>(scores, S, scale_log2);
    PB_CUDA_CHECK_LAUNCH("causal_softmax_kernel");
  };
  if (p.dtype == DType::bf16)
    launch_softmax(Bf16Tag{});
  else
    launch_softmax(Fp16Tag{});

  // O_h = P_h V_h in one call. Column-major view: C (D x S_queries, ldc Hq*D) =
  // V^T (D x S_keys) P^T (S_keys x S_queries, ld 2S).
  PB_CUBLAS_CHECK(cublasGemmBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &one, ptr + 3 * n, t, Hkv * D,
                                      ptr + 4 * n, t, 2 * S, &zero, const_cast<void* const*>(ptr + 5 * n), t, Hq * D, n,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ---- the operation (prefill_attention_op.hpp) --------------------------------------

PrefillAttentionOp::PrefillAttentionOp(Context& ctx, const OpRequest& r, const PrefillAttentionPlan& plan)
  : AttentionOpBase(ctx, r), blas_(plan.blas), p_(plan.params) {
  const std::size_t es = element_bytes(r.dtype);
  q_elems_ = static_cast<std::size_t>(p_.B) * p_.S * p_.Hq * p_.D;
  kv_elems_ = static_cast<std::size_t>(p_.B) * p_.S * p_.Hkv * p_.D;
  q_ = DeviceBuffer(q_elems_ * es);
  k_ = DeviceBuffer(kv_elems_ * es);
  v_ = DeviceBuffer(kv_elems_ * es);
  out_ = DeviceBuffer(q_elems_ * es);
  if (blas_)
    scores_ = DeviceBuffer(prefill_blas_scores_bytes(static_cast<std::uint64_t>(p_.B), static_cast<std::uint64_t>(p_.Hq),
                                                     static_cast<std::uint64_t>(p_.S)));
  fill_random(q_.get(), r.dtype, q_elems_, seed_of(r.seed, KvBuf::q), 1.0f, ctx.stream);
  fill_random(k_.get(), r.dtype, kv_elems_, seed_of(r.seed, KvBuf::k), 1.0f, ctx.stream);
  fill_random(v_.get(), r.dtype, kv_elems_, seed_of(r.seed, KvBuf::v), 1.0f, ctx.stream);
  PB_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), ctx.stream));
  // The context's cuBLAS handle is already bound to its stream and workspace
  // (cublasSetStream here would silently drop the workspace).
  if (blas_ && ctx.cublas == nullptr)
    throw std::logic_error("prefill attention (cuBLAS): the context has no cuBLAS handle");
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  p_.q = q_.get();
  p_.k = k_.get();
  p_.v = v_.get();
  p_.out = out_.get();
  if (blas_) {
    const auto ptrs = prefill_blas_pointers(p_, scores_.as<float>());
    blas_ptrs_ = DeviceBuffer(ptrs.size() * sizeof(void*));
    upload(blas_ptrs_.get(), ptrs.data(), blas_ptrs_.bytes(), ctx.stream);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // `ptrs` goes out of scope
  }
}

void PrefillAttentionOp::run() {
  if (blas_)
    launch_prefill_blas(p_, scores_.as<float>(), static_cast<const void* const*>(blas_ptrs_.get()), ctx_.cublas,
                        ctx_.stream);
  else
    launch_prefill_flash(p_, ctx_.stream);
}

void PrefillAttentionOp::verify() {
  run();
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
  const DType t = r_.dtype;
  const std::size_t es = element_bytes(t);
  const int B = p_.B, S = p_.S, Hq = p_.Hq, Hkv = p_.Hkv, G = Hq / Hkv;
  const std::size_t D = static_cast<std::size_t>(p_.D);
  // (batch, head) pairs: corners and the middle.
  std::vector<std::pair<int, int>> heads = {{0, 0}, {B - 1, Hq - 1}, {B / 2, Hq / 2}, {0, Hq - 1}, {B - 1, 0}};
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  // Rows around the flash kernel's 128-row CTAs, 64- and 32-key tiles and 16-row
  // warps (and the cuBLAS path's same rows).
  std::vector<std::uint64_t> rows;
  for (std::uint64_t tile : {128u, 64u, 32u, 16u})
    for (std::uint64_t r : reference::prefill_rows_to_check(static_cast<std::uint64_t>(S), tile)) rows.push_back(r);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const reference::Tolerance tol = reference::tolerance_for(t);
  std::vector<float> ref(D);
  for (const auto& [b, hq] : heads) {
    const int hkv = hq / G;
    const std::size_t qrow0 = (static_cast<std::size_t>(b) * S * Hq + hq) * D;
    const std::size_t krow0 = (static_cast<std::size_t>(b) * S * Hkv + hkv) * D;
    const auto q = download_2d_as_float(byte_ptr(q_.get(), qrow0, es), t, S, D, Hq * D, ctx_.stream);
    const auto o = download_2d_as_float(byte_ptr(out_.get(), qrow0, es), t, S, D, Hq * D, ctx_.stream);
    const auto k = download_2d_as_float(byte_ptr(k_.get(), krow0, es), t, S, D, Hkv * D, ctx_.stream);
    const auto v = download_2d_as_float(byte_ptr(v_.get(), krow0, es), t, S, D, Hkv * D, ctx_.stream);
    for (const std::uint64_t row : rows) {
      const int i = static_cast<int>(row);  // row < S, which fits in int
      reference::prefill_attention_row(
          q.data() + i * D, static_cast<std::size_t>(i), D, scale, [&](std::size_t l) { return k.data() + l * D; },
          [&](std::size_t l) { return v.data() + l * D; }, ref.data());
      const std::vector<float> got(o.begin() + static_cast<std::ptrdiff_t>(i * D),
                                   o.begin() + static_cast<std::ptrdiff_t>((i + 1) * D));
      const std::vector<double> want(ref.begin(), ref.end());
      // atol scaled by the row's RMS: late rows average many keys and are small,
      // so a fixed atol would accept a kernel that drops a whole key tile.
      reference::check_rows_close(got, want, D, tol,
                                  shape() + ", batch " + std::to_string(b) + ", query head " + std::to_string(hq) +
                                      ", row " + std::to_string(i) + " (elements are head_dim indices)");
    }
  }
}

std::string PrefillAttentionOp::shape() const {
  std::ostringstream os;
  os << "prefill attention (" << (blas_ ? "cuBLAS" : "flash") << ") " << to_string(r_.dtype)
     << " B=" << p_.B << " S=" << p_.S << " Hq=" << p_.Hq << " Hkv=" << p_.Hkv << " D=" << p_.D;
  return os.str();
}

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(prefill_attention) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  for (const Impl impl : {Impl::own, Impl::blas})
    registry.add({kPrefillAttention, impl, takes_16bit, {},
                  [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> {
                    return plan_prefill_attention(r, ctx);
                  },
                  prepare_op<PrefillAttentionOp, PrefillAttentionPlan>()});
}
