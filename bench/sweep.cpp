#include "sweep.hpp"

#include <algorithm>
#include <sstream>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"

namespace phasebench {

namespace {

std::uint64_t parse_uint(const std::string& s, const std::string& flag) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    throw InputError(flag + ": '" + s + "' is not a positive integer");
  std::uint64_t v = 0;
  try {
    v = std::stoull(s);
  } catch (const std::exception&) {
    throw InputError(flag + ": '" + s + "' is out of range");
  }
  if (v == 0) throw InputError(flag + ": sizes must be positive, got 0");
  return v;
}

}  // namespace

std::vector<std::uint64_t> parse_size_list(const std::string& text, const std::string& flag) {
  std::vector<std::uint64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto range = item.find("..");
    if (range == std::string::npos) range = item.find('-');
    if (range != std::string::npos) {
      const std::size_t skip = item.compare(range, 2, "..") == 0 ? 2 : 1;
      const auto lo = parse_uint(item.substr(0, range), flag), hi = parse_uint(item.substr(range + skip), flag);
      if (lo > hi) throw InputError(flag + ": empty range '" + item + "' (the first bound is larger than the second)");
      for (std::uint64_t v = lo; v <= hi; v *= 2) {
        out.push_back(v);
        if (v > (UINT64_MAX >> 1)) break;
      }
    } else {
      out.push_back(parse_uint(item, flag));
    }
  }
  if (out.empty()) throw InputError(flag + ": empty list; give sizes like 1,2,4 or a range like 1..256 (powers of two)");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

LinearShape parse_shape(const std::string& text) {
  std::stringstream ss(text);
  std::string a, b, c, extra;
  const char sep = text.find('x') != std::string::npos ? 'x' : ',';
  if (!std::getline(ss, a, sep) || !std::getline(ss, b, sep) || !std::getline(ss, c, sep) || std::getline(ss, extra, sep))
    throw InputError("--shape: '" + text + "' is not M,N,K (e.g. 4096,4096,4096 or 4096x4096x4096)");
  return {parse_uint(a, "--shape M"), parse_uint(b, "--shape N"), parse_uint(c, "--shape K")};
}

void apply_defaults(SweepConfig& c, const Backend& backend) {
  const bool gpu = backend.device().backend != "cpu";
  auto set = [](std::vector<std::uint64_t>& v, std::vector<std::uint64_t> d) {
    if (v.empty()) v = std::move(d);
  };
  if (c.dtypes.empty()) c.dtypes = {gpu ? DType::bf16 : DType::fp32};
  if (c.attention_models.empty())
    c.attention_models = gpu && !c.models_given ? std::vector<std::string>{"llama-3.1-8b", "llama-3.1-70b"} : c.models;
  if (gpu) {
    set(c.prefill_batches, {1, 4});
    set(c.prompts, {128, 512, 2048, 8192});
    set(c.decode_batches, {1, 2, 4, 8, 16, 32, 64, 128, 256});
    set(c.attention_batches, {1, 8, 32, 128, 256});
    set(c.contexts, {512, 2048, 8192, 32768});
    set(c.append_batches, {1, 16, 64, 256});
    set(c.prefill_attention_prompts, {512, 1024, 2048, 4096, 8192});
    if (c.append_context == 0) c.append_context = 4096;
  } else {
    // Two CPU cores: a few minutes in all. Weights of 100 MB to 2 GB in fp32
    // keep the decode points far beyond the last-level cache.
    set(c.prefill_batches, {1});
    set(c.prompts, {32, 128});
    set(c.decode_batches, {1, 2, 4, 8, 16, 32, 64});
    set(c.attention_batches, {1, 8, 32});
    set(c.contexts, {1024, 4096});
    set(c.append_batches, {1, 16, 64});
    set(c.prefill_attention_prompts, {128, 512});
    if (c.append_context == 0) c.append_context = 1024;
  }
}

namespace {

std::string dt(DType t) { return std::string(to_string(t)); }

bool wanted(const SweepConfig& c, const std::string& group) { return c.groups.empty() || c.groups.count(group); }

Point linear_point(const std::string& phase, const std::string& op, const ModelConfig& m, const LayerOp& lin, DType t,
                   Impl impl, std::map<std::string, std::uint64_t> args) {
  Point p;
  p.phase = phase;
  p.op = op;
  p.model = m.name;
  p.target = lin.name;
  p.args = std::move(args);
  p.request.kind = OpKind::linear;
  p.request.dtype = t;
  p.request.impl = impl;
  p.request.linear = lin.linear;
  std::string name = phase + "/" + op + "/" + m.name + "." + lin.name + "/" + dt(t);
  for (const char* k : {"batch", "prompt"})
    if (p.args.count(k)) name += "/" + std::string(k) + ":" + std::to_string(p.args.at(k));
  name += "/impl:" + std::string(to_string(impl));
  p.name = name;
  return p;
}

}  // namespace

std::vector<Point> build_sweep(const SweepConfig& c, const Backend& backend) {
  for (const auto& g : c.groups)
    if (std::find(sweep_groups().begin(), sweep_groups().end(), g) == sweep_groups().end()) {
      std::string known;
      for (const auto& k : sweep_groups()) known += (known.empty() ? "" : ", ") + k;
      throw InputError("--ops: unknown group '" + g + "'; use " + known);
    }
  if (c.page_size == 0 || c.page_size % 16 != 0) throw InputError("--page-size must be a positive multiple of 16");
  std::vector<Point> pts;
  auto impls_for = [&](OpKind kind, DType t, std::uint64_t M, bool gemv) {
    std::vector<Impl> v;
    // Our own kernel where it applies (decode GEMV: batch <= 16), the vendor library beside it.
    if (gemv && M <= 16 && backend.implements(kind, t, Impl::own)) v.push_back(Impl::own);
    if ((!gemv || c.compare_blas || v.empty()) && backend.implements(kind, t, Impl::blas)) v.push_back(Impl::blas);
    return v;
  };
  // Every model of either list, in order; each group runs for the models it is
  // meant for (attention shapes for attention_models, the rest for models).
  std::vector<std::string> all_models = c.models;
  for (const auto& a : c.attention_models)
    if (std::find(all_models.begin(), all_models.end(), a) == all_models.end()) all_models.push_back(a);
  auto listed = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  for (const auto& model_name : all_models) {
    const ModelConfig m = load_model(model_name);
    const bool linear_model = listed(c.models, model_name);
    const bool attention_model = c.attention_models.empty() ? linear_model : listed(c.attention_models, model_name);
    for (DType t : c.dtypes) {
      const auto p = Precision::from(t, t);
      if (linear_model && wanted(c, "prefill_linear"))
        for (auto B : c.prefill_batches)
          for (auto S : c.prompts) {
            const auto M = mul(B, S, "tokens");
            for (const auto& lin : linear_ops(m, M, p)) {
              if (lin.name == "lm_head") continue;  // prefill computes logits for the last token only
              for (Impl impl : impls_for(OpKind::linear, t, M, false))
                pts.push_back(linear_point("prefill", "linear", m, lin, t, impl, {{"batch", B}, {"prompt", S}}));
            }
          }
      if (linear_model && wanted(c, "decode_linear"))
        for (auto B : c.decode_batches)
          for (const auto& lin : linear_ops(m, B, p))
            for (Impl impl : impls_for(OpKind::linear, t, B, true))
              pts.push_back(linear_point("decode", "gemv", m, lin, t, impl, {{"batch", B}}));
      if (attention_model && wanted(c, "decode_attention"))
        for (OpKind kind : {OpKind::decode_attention, OpKind::decode_attention_paged}) {
          if (!backend.implements(kind, t, Impl::own)) continue;
          const bool paged = kind == OpKind::decode_attention_paged;
          for (auto B : c.attention_batches)
            for (auto L : c.contexts) {
              Point pt;
              pt.phase = "decode";
              pt.op = paged ? "attention_paged" : "attention";
              pt.model = m.name;
              pt.args = {{"batch", B}, {"context", L}};
              if (paged) pt.args["page_size"] = c.page_size;
              pt.request.kind = kind;
              pt.request.dtype = t;
              pt.request.attention = {B, m.heads, m.kv_heads, L, m.head_dim};
              pt.request.page_size = c.page_size;
              pt.name = "decode/" + pt.op + "/" + m.name + "/" + dt(t) + "/batch:" + std::to_string(B) +
                        "/context:" + std::to_string(L) + (paged ? "/page:" + std::to_string(c.page_size) : "");
              pts.push_back(pt);
            }
        }
      if (linear_model && wanted(c, "kv_append"))
        for (OpKind kind : {OpKind::kv_append, OpKind::kv_append_paged}) {
          if (!backend.implements(kind, t, Impl::own)) continue;
          const bool paged = kind == OpKind::kv_append_paged;
          for (auto B : c.append_batches) {
            Point pt;
            pt.phase = "decode";
            pt.op = paged ? "kv_append_paged" : "kv_append";
            pt.model = m.name;
            pt.args = {{"batch", B}, {"context", c.append_context}};
            if (paged) pt.args["page_size"] = c.page_size;
            pt.request.kind = kind;
            pt.request.dtype = t;
            pt.request.append = {B, 1, m.kv_heads, m.head_dim};
            pt.request.append_capacity = c.append_context;
            pt.request.page_size = c.page_size;
            pt.name = "decode/" + pt.op + "/" + m.name + "/" + dt(t) + "/batch:" + std::to_string(B) +
                      "/context:" + std::to_string(c.append_context) +
                      (paged ? "/page:" + std::to_string(c.page_size) : "");
            pts.push_back(pt);
          }
        }
      if (attention_model && wanted(c, "prefill_attention"))
        for (Impl impl : {Impl::own, Impl::blas}) {
          if (!backend.implements(OpKind::prefill_attention, t, impl)) continue;
          for (auto B : c.prefill_batches)
            for (auto S : c.prefill_attention_prompts) {
              Point pt;
              pt.phase = "prefill";
              pt.op = "attention";
              pt.model = m.name;
              pt.args = {{"batch", B}, {"prompt", S}};
              pt.request.kind = OpKind::prefill_attention;
              pt.request.dtype = t;
              pt.request.impl = impl;
              pt.request.prefill = {B, m.heads, m.kv_heads, S, m.head_dim};
              pt.name = "prefill/attention/" + m.name + "/" + dt(t) + "/batch:" + std::to_string(B) +
                        "/prompt:" + std::to_string(S) + "/impl:" + std::string(to_string(impl));
              pts.push_back(pt);
            }
        }
      // Whole layers: prefill at each (prefill batch, prompt), decode at each
      // (attention batch, context). args carry the model's layer count and
      // vocabulary, which turn a layer time into a step time (fixture.cpp).
      if (linear_model && wanted(c, "layer") && backend.implements(OpKind::layer, t, Impl::own)) {
        auto layer_point = [&](Phase ph, std::uint64_t B, std::uint64_t n) {
          const bool prefill = ph == Phase::prefill;
          Point pt;
          pt.phase = std::string(to_string(ph));
          pt.op = "layer";
          pt.model = m.name;
          pt.args = {{"batch", B}, {prefill ? "prompt" : "context", n}, {"layers", m.layers}, {"vocab", m.vocab}};
          pt.request.kind = OpKind::layer;
          pt.request.dtype = t;
          pt.request.impl = Impl::own;
          pt.request.layer = LayerDims::of(m);
          pt.request.layer_phase = ph;
          if (prefill)
            pt.request.prefill = {B, m.heads, m.kv_heads, n, m.head_dim};
          else
            pt.request.attention = {B, m.heads, m.kv_heads, n, m.head_dim};
          pt.name = pt.phase + "/layer/" + m.name + "/" + dt(t) + "/batch:" + std::to_string(B) +
                    (prefill ? "/prompt:" : "/context:") + std::to_string(n);
          pt.request.name = pt.name;
          pts.push_back(pt);
        };
        for (auto B : c.prefill_batches)
          for (auto S : c.prompts) layer_point(Phase::prefill, B, S);
        for (auto B : c.attention_batches)
          for (auto L : c.contexts) layer_point(Phase::decode, B, L);
      }
    }
  }
  if (wanted(c, "free"))
    for (const auto& s : c.free_shapes)
      for (DType t : c.dtypes)
        for (Impl impl : {Impl::blas, Impl::own}) {
          if (!backend.implements(OpKind::linear, t, impl)) continue;
          if (impl == Impl::own && s.M > 16) continue;
          Point pt;
          pt.phase = "free";
          pt.op = "linear";
          pt.model = "custom";
          pt.target = std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K);
          pt.args = {{"M", s.M}, {"N", s.N}, {"K", s.K}};
          pt.request.kind = OpKind::linear;
          pt.request.dtype = t;
          pt.request.impl = impl;
          pt.request.linear = s;
          pt.name = "free/linear/" + pt.target + "/" + dt(t) + "/impl:" + std::string(to_string(impl));
          pts.push_back(pt);
        }
  return pts;
}

}  // namespace phasebench
