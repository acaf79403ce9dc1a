// The whole-layer PreparedOp (see layer.hpp), built from its request's plan
// (layer_plan.hpp). The constructor allocates and fills everything (weights
// scaled by 1/sqrt(fan-in) so activations stay of order one through the layer),
// builds the four cuBLASLt matmuls and the kernels' parameters, and
// synchronises; run() only enqueues; verify() runs once and checks a few tokens'
// outputs against a CPU reference of the whole layer (reference/layer.hpp's
// steps, reference/decode_attention.hpp's attention).
#include "cuda/layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reference/common.hpp"
#include "reference/decode_attention.hpp"
#include "reference/layer.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/elementwise.hpp"
#include "cuda/kv_append.hpp"
#include "cuda/layer.cuh"
#include "cuda/layer_plan.hpp"
#include "cuda/linear_cublaslt.hpp"
#include "cuda/prefill_attention.hpp"
#include "phasebench/error.hpp"
#include "phasebench/nvtx.hpp"
#include "phasebench/ops/layer.hpp"

namespace phasebench::cuda {

namespace {

constexpr float kNormEps = 1e-5f;
constexpr float kRopeTheta = 500000.0f;  // Llama 3's rope_theta (the value does not change the cost)

// Seeds of the layer's buffers, distinct per buffer, derived from the request's seed.
enum class Buf : std::uint64_t { x = 11, attn_norm = 12, qkv = 13, o = 14, mlp_norm = 15, gate_up = 16, down = 17, k = 18, v = 19 };
std::uint64_t seed_of(std::uint64_t seed, Buf b) { return buffer_seed(seed, static_cast<std::uint64_t>(b)); }

void launch_qkv_split(const void* qkv, void* q, void* k, void* v, int M, int Nq, int Nkv, cudaStream_t stream) {
  const unsigned long long n = static_cast<unsigned long long>(M) * (Nq + 2 * Nkv) / 8;
  if (n >= (1ull << 32)) throw Unsupported("qkv_split: too many elements for one launch");
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  qkv_split_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint4*>(qkv), static_cast<uint4*>(q),
                                                   static_cast<uint4*>(k), static_cast<uint4*>(v),
                                                   static_cast<unsigned>(n), Nq / 8, Nkv / 8);
  PB_CUDA_CHECK_LAUNCH("qkv_split_kernel");
}

// ---- the op ---------------------------------------------------------------------

class WholeLayerOp final : public PreparedOp, public LayerOpAccess {
 public:
  WholeLayerOp(Context& ctx, const OpRequest& r, const LayerPlan& plan)
      : ctx_(ctx), r_(r), prefill_(plan.prefill), B_(plan.B), S_(plan.S), M_(plan.M), L_(plan.L), h_(plan.h),
        I_(plan.I), Hq_(plan.Hq), Hkv_(plan.Hkv), D_(plan.D), Nq_(plan.Nq), Nkv_(plan.Nkv), cap_(plan.cap),
        pos_(plan.pos), chunk_(plan.split.chunk), splits_(plan.split.splits) {
    prefix_ = r.name.empty() ? std::string("layer") : r.name;
    allocate_and_fill(plan.split.workspace_floats);
    make_matmuls();
    set_kernel_params(plan.split.workspace_floats);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  }

  void run() override {
    const DType t = r_.dtype;
    const auto s = ctx_.stream;
    {
      auto range = nvtx_range(prefix_ + "/attn_norm");
      launch_rmsnorm(t, x_.get(), w_attn_norm_.get(), xn_.get(), M_, h_, kNormEps, s);
    }
    {
      auto range = nvtx_range(prefix_ + "/qkv_proj");
      qkv_proj_->run();
    }
    {
      auto range = nvtx_range(prefix_ + "/rope");
      launch_rope_neox(t, qkv_.get(), positions_.as<std::int32_t>(), M_, Hq_, Hkv_, D_, kRopeTheta, s);
    }
    {
      auto range = nvtx_range(prefix_ + "/qkv_split");
      launch_qkv_split(qkv_.get(), q_.get(), k_new_.get(), v_new_.get(), M_, Nq_, Nkv_, s);
    }
    {
      auto range = nvtx_range(prefix_ + "/kv_append");
      launch_kv_append(ap_, s);
    }
    {
      auto range = nvtx_range(prefix_ + "/attention");
      if (prefill_)
        launch_prefill_flash(pp_, s);
      else
        launch_decode_attention(dp_, chunk_, s);
    }
    {
      auto range = nvtx_range(prefix_ + "/o_proj");
      o_proj_->run();
    }
    {
      auto range = nvtx_range(prefix_ + "/mlp_norm");
      launch_rmsnorm(t, o_.get(), w_mlp_norm_.get(), xn2_.get(), M_, h_, kNormEps, s);
    }
    {
      auto range = nvtx_range(prefix_ + "/gate_up_proj");
      gate_up_proj_->run();
    }
    {
      auto range = nvtx_range(prefix_ + "/act_mul");
      launch_silu_mul(t, gate_up_.get(), act_.get(), M_, I_, s);
    }
    {
      auto range = nvtx_range(prefix_ + "/down_proj");
      down_proj_->run();
    }
  }

  std::vector<std::string> op_names() const override {
    return {"attn_norm", "qkv_proj", "rope", "qkv_split", "kv_append", "attention",
            "o_proj",    "mlp_norm", "gate_up_proj", "act_mul", "down_proj"};
  }

  // Runs the layer once, then follows a few tokens through a CPU reference of
  // the whole layer and compares: the token's own K and V in the cache (after
  // qkv_proj, rope, split and append), its attention output, and the layer's
  // output. The reference's other context tokens (earlier cache entries, and in
  // prefill the prompt's other tokens) are read from the device cache. Tokens:
  // decode, the first and the last sequence; prefill, the last token of the first
  // sequence, the middle token of the last one and token 0. Tolerance: twice the
  // dtype's (atol scaled by the sum of |x*w| where the value is a projection),
  // since six ops' roundings compound along the chain.
  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
    const DType t = r_.dtype;
    reference::LayerWeights w{t, {}, {}, {}, {}, {}, {}};
    auto all_of = [&](const DeviceBuffer& b) { return download_u16(b.get(), b.bytes() / 2, ctx_.stream); };
    w.attn_norm = all_of(w_attn_norm_);
    w.qkv = all_of(w_qkv_);
    w.o = all_of(w_o_);
    w.mlp_norm = all_of(w_mlp_norm_);
    w.gate_up = all_of(w_gate_up_);
    w.down = all_of(w_down_);
    const auto base = reference::tolerance_for(t);
    const reference::Tolerance tol{2 * base.atol, 2 * base.rtol};

    std::vector<std::pair<int, int>> tokens;  // (sequence, token within the step)
    if (prefill_)
      tokens = {{0, S_ - 1}, {B_ - 1, (S_ - 1) / 2}, {0, 0}};
    else
      tokens = {{0, 0}, {B_ - 1, 0}};
    std::sort(tokens.begin(), tokens.end());
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());

    for (const auto& [b, s] : tokens) verify_token(w, tol, b, s);
  }

  std::vector<float> output_values() override { return output_as_float(); }
  std::vector<float> output_as_float() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(out_.get(), r_.dtype, static_cast<std::size_t>(M_) * h_, ctx_.stream);
  }
  void set_fault_injection(bool on) override { fault_ = on; }

 private:
  // One token through the reference layer (see verify()), compared at its K and V
  // in the cache, its attention output and the layer's output.
  void verify_token(const reference::LayerWeights& w, const reference::Tolerance& tol, int b, int s) {
    const DType t = r_.dtype;
    const std::size_t es = element_bytes(t);
    const std::size_t h = static_cast<std::size_t>(h_), I = static_cast<std::size_t>(I_), D = static_cast<std::size_t>(D_),
                      Nq = static_cast<std::size_t>(Nq_), Nkv = static_cast<std::size_t>(Nkv_), Nqkv = Nq + 2 * Nkv;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const int G = Hq_ / Hkv_;
    const std::size_t m = static_cast<std::size_t>(b) * S_ + s;
    const int pos = prefill_ ? s : pos_;  // cache position (and RoPE position) of the token
    const std::size_t ctx_len = static_cast<std::size_t>(pos) + 1;
    std::ostringstream where;
    where << shape() << ", sequence " << b << ", token " << s << " (position " << pos << ")";

    // attn_norm -> qkv_proj -> rope.
    const std::vector<float> x = download_as_float(byte_ptr(x_.get(), m * h, es), t, h, ctx_.stream);
    const std::vector<float> xn = reference::layer_rmsnorm(w, x, w.attn_norm, kNormEps);
    std::vector<float> qkv;
    std::vector<double> qkv_abs;
    reference::layer_linear(w, w.qkv, xn, Nqkv, qkv, &qkv_abs);
    for (int head = 0; head < Hq_ + Hkv_; ++head)
      reference::layer_rope(t, qkv.data() + head * D, qkv_abs.data() + head * D, D_, pos, kRopeTheta);

    // This sequence's K and V cache rows [Hkv][ctx_len][D], read back from the device.
    std::vector<float> K, V;
    for (int which = 0; which < 2; ++which) {
      const void* cache = which == 0 ? k_cache_.get() : v_cache_.get();
      std::vector<unsigned char> raw(Hkv_ * ctx_len * D * es);
      PB_CUDA_CHECK(cudaMemcpy2DAsync(raw.data(), ctx_len * D * es,
                                      byte_ptr(cache, static_cast<std::size_t>(b) * Hkv_ * cap_ * D, es),
                                      static_cast<std::size_t>(cap_) * D * es, ctx_len * D * es, Hkv_,
                                      cudaMemcpyDeviceToHost, ctx_.stream));
      PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      (which == 0 ? K : V) = reference::to_float(raw.data(), t, raw.size() / es);
    }
    // The token's own K and V slots against the reference (qkv_proj, rope, split, append).
    for (int which = 0; which < 2; ++which) {
      const std::vector<float>& cache = which == 0 ? K : V;
      const std::size_t off = Nq + (which == 0 ? 0 : Nkv);
      std::vector<float> got(Nkv);
      for (int hk = 0; hk < Hkv_; ++hk)
        for (std::size_t d = 0; d < D; ++d) got[hk * D + d] = cache[(hk * ctx_len + pos) * D + d];
      const std::vector<double> want(qkv.begin() + static_cast<std::ptrdiff_t>(off),
                                     qkv.begin() + static_cast<std::ptrdiff_t>(off + Nkv));
      const std::vector<double> sc(qkv_abs.begin() + static_cast<std::ptrdiff_t>(off),
                                   qkv_abs.begin() + static_cast<std::ptrdiff_t>(off + Nkv));
      reference::check_close(got, want, tol,
                             where.str() + ": its " + (which == 0 ? "K" : "V") +
                                 " in the cache (elements are kv_head * D + d)",
                             &sc);
    }
    // attention: keys 0..pos, the token's own from the reference, the others from the cache.
    const float* own_k = qkv.data() + Nq;
    const float* own_v = qkv.data() + Nq + Nkv;
    std::vector<float> attn(Nq);
    for (int hq = 0; hq < Hq_; ++hq) {
      const std::size_t hk = static_cast<std::size_t>(hq / G);
      auto key = [&](std::size_t l) {
        return l == static_cast<std::size_t>(pos) ? own_k + hk * D : K.data() + (hk * ctx_len + l) * D;
      };
      auto value = [&](std::size_t l) {
        return l == static_cast<std::size_t>(pos) ? own_v + hk * D : V.data() + (hk * ctx_len + l) * D;
      };
      reference::decode_attention_head(qkv.data() + hq * D, ctx_len, D, scale, key, value, attn.data() + hq * D);
    }
    for (float& a : attn) a = reference::round_to(a, t);
    {
      const std::vector<float> got = download_as_float(byte_ptr(attn_.get(), m * Nq, es), t, Nq, ctx_.stream);
      // Per-head RMS-scaled atol: a wrong softmax (scale, a missing token) moves
      // the outputs by less than a fixed atol at long contexts. The kernels' own
      // error (P rounding, 1-ulp differences of q and k) is a small fraction of
      // that RMS; the output rounding is rtol's.
      reference::check_rows_close(got, std::vector<double>(attn.begin(), attn.end()), D, tol,
                                  where.str() + ": attention output (elements are q_head * D + d)");
    }
    // o_proj -> mlp_norm -> gate_up_proj -> act_mul -> down_proj.
    std::vector<float> o, gu, out;
    reference::layer_linear(w, w.o, attn, h, o, nullptr);
    const std::vector<float> xn2 = reference::layer_rmsnorm(w, o, w.mlp_norm, kNormEps);
    reference::layer_linear(w, w.gate_up, xn2, 2 * I, gu, nullptr);
    const std::vector<float> act = reference::layer_silu_mul(t, gu);
    std::vector<double> out_abs;
    reference::layer_linear(w, w.down, act, h, out, &out_abs, false);
    const std::vector<float> got = download_as_float(byte_ptr(out_.get(), m * h, es), t, h, ctx_.stream);
    reference::check_close(got, std::vector<double>(out.begin(), out.end()), tol,
                           where.str() + ": layer output (elements are hidden indices)", &out_abs);
  }

  // Every buffer of the layer (none reused), weights scaled by 1/sqrt(fan-in),
  // the cache filled as earlier tokens' K and V, activations zeroed, positions.
  void allocate_and_fill(std::size_t ws_floats) {
    const DType t = r_.dtype;
    const std::uint64_t seed = r_.seed;
    const auto s = ctx_.stream;
    const std::size_t es = element_bytes(t), M = static_cast<std::size_t>(M_), h = static_cast<std::size_t>(h_),
                      I = static_cast<std::size_t>(I_), Nq = static_cast<std::size_t>(Nq_),
                      Nkv = static_cast<std::size_t>(Nkv_), Nqkv = Nq + 2 * Nkv;
    const std::size_t cache_elems = static_cast<std::size_t>(B_) * Hkv_ * cap_ * D_;
    auto alloc = [&](DeviceBuffer& b, std::size_t elems) { b = DeviceBuffer(elems * es); };
    // The weights are model.hpp's layer_weights (the one list of a layer's weights),
    // norms' scales filled around 1, projections scaled by 1/sqrt(fan-in).
    const struct {
      const char* name;
      DeviceBuffer* buf;
      Buf seed;
    } slots[] = {{"attn_norm", &w_attn_norm_, Buf::attn_norm}, {"qkv_proj", &w_qkv_, Buf::qkv},
                 {"o_proj", &w_o_, Buf::o},                    {"mlp_norm", &w_mlp_norm_, Buf::mlp_norm},
                 {"gate_up_proj", &w_gate_up_, Buf::gate_up},  {"down_proj", &w_down_, Buf::down}};
    for (const LayerWeight& w : layer_weights(layer_model(r_))) {
      const auto* slot = std::find_if(std::begin(slots), std::end(slots), [&](const auto& x) { return w.name == x.name; });
      if (slot == std::end(slots)) throw std::logic_error("layer: no buffer for the weight " + w.name);
      alloc(*slot->buf, w.elements());
      const float scale = w.rows == 1 ? 1.0f : static_cast<float>(1.0 / std::sqrt(static_cast<double>(w.cols)));
      fill_random(slot->buf->get(), t, w.elements(), seed_of(seed, slot->seed), scale, s);
    }
    alloc(x_, M * h);
    alloc(xn_, M * h);
    alloc(qkv_, M * Nqkv);
    alloc(q_, M * Nq);
    alloc(k_new_, M * Nkv);
    alloc(v_new_, M * Nkv);
    alloc(attn_, M * Nq);
    alloc(o_, M * h);
    alloc(xn2_, M * h);
    alloc(gate_up_, M * 2 * I);
    alloc(act_, M * I);
    alloc(out_, M * h);
    alloc(k_cache_, cache_elems);
    alloc(v_cache_, cache_elems);
    positions_ = DeviceBuffer(M * sizeof(std::int32_t));
    if (ws_floats) ws_ = DeviceBuffer(ws_floats * sizeof(float));

    fill_random(x_.get(), t, M * h, seed_of(seed, Buf::x), 1.0f, s);
    // The cache holds earlier tokens' K and V (random); the step writes its own.
    fill_random(k_cache_.get(), t, cache_elems, seed_of(seed, Buf::k), 1.0f, s);
    fill_random(v_cache_.get(), t, cache_elems, seed_of(seed, Buf::v), 1.0f, s);
    for (DeviceBuffer* b : {&xn_, &qkv_, &q_, &k_new_, &v_new_, &attn_, &o_, &xn2_, &gate_up_, &act_, &out_})
      PB_CUDA_CHECK(cudaMemsetAsync(b->get(), 0, b->bytes(), s));
    std::vector<std::int32_t> pos(M);
    for (std::size_t i = 0; i < M; ++i) pos[i] = static_cast<std::int32_t>(prefill_ ? i % S_ : pos_);
    upload(positions_.get(), pos.data(), M * sizeof(std::int32_t), s);
  }

  // The four projections through cuBLASLt, bound to their buffers.
  void make_matmuls() {
    const DType t = r_.dtype;
    const std::size_t M = static_cast<std::size_t>(M_), h = static_cast<std::size_t>(h_), I = static_cast<std::size_t>(I_),
                      Nq = static_cast<std::size_t>(Nq_), Nqkv = Nq + 2 * static_cast<std::size_t>(Nkv_);
    qkv_proj_ = std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, Nqkv, h}, xn_.get(), w_qkv_.get(), qkv_.get());
    o_proj_ = std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, h, Nq}, attn_.get(), w_o_.get(), o_.get());
    gate_up_proj_ =
        std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, 2 * I, h}, xn2_.get(), w_gate_up_.get(), gate_up_.get());
    down_proj_ = std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, h, I}, act_.get(), w_down_.get(), out_.get());
  }

  // The parameters of the KV-append and attention kernels.
  void set_kernel_params(std::size_t ws_floats) {
    const DType t = r_.dtype;
    ap_ = kv_append_params(t, k_new_.get(), v_new_.get(), k_cache_.get(), v_cache_.get(), B_, S_, Hkv_, D_, cap_, pos_);
    if (prefill_)  // prefill attention reads the step's own (roped) k and v: no cached prefix
      pp_ = prefill_attention_params(t, q_.get(), k_new_.get(), v_new_.get(), attn_.get(), B_, S_, Hq_, Hkv_, D_);
    else
      dp_ = decode_attention_params(t, q_.get(), attn_.get(), k_cache_.get(), v_cache_.get(), B_, Hq_, Hkv_, L_, D_,
                                    splits_, ws_floats ? ws_.as<float>() : nullptr);
  }

  std::string shape() const {
    std::ostringstream os;
    os << (prefill_ ? "prefill" : "decode") << " " << to_string(r_.dtype) << " B=" << B_
       << (prefill_ ? " S=" : " L=") << L_ << " h=" << h_ << " I=" << I_ << " Hq=" << Hq_ << " Hkv=" << Hkv_
       << " D=" << D_;
    if (!prefill_) os << " splits=" << splits_;
    return os.str();
  }

  Context& ctx_;
  OpRequest r_;
  bool prefill_ = false;
  bool fault_ = false;
  int B_ = 0, S_ = 0, M_ = 0, L_ = 0, h_ = 0, I_ = 0, Hq_ = 0, Hkv_ = 0, D_ = 0, Nq_ = 0, Nkv_ = 0;
  int cap_ = 0, pos_ = 0, chunk_ = 1, splits_ = 1;
  std::string prefix_;
  DeviceBuffer w_attn_norm_, w_qkv_, w_o_, w_mlp_norm_, w_gate_up_, w_down_;
  DeviceBuffer x_, xn_, qkv_, q_, k_new_, v_new_, attn_, o_, xn2_, gate_up_, act_, out_;
  DeviceBuffer k_cache_, v_cache_, positions_, ws_;
  std::unique_ptr<CublasLtLinear> qkv_proj_, o_proj_, gate_up_proj_, down_proj_;
  KvAppendParams ap_;
  DecodeAttentionParams dp_;
  PrefillAttentionParams pp_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(layer) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kLayer, Impl::own, takes_16bit, {},
                [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> { return plan_layer(r, ctx); },
                prepare_op<WholeLayerOp, LayerPlan>()});
}
