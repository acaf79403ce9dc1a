// Sweeps (sweep.hpp): the axes' values and defaults, and the points the
// operations' sweep groups make for each model and dtype.
#include "sweep.hpp"

#include <algorithm>
#include <sstream>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"

namespace phasebench {

namespace {

std::uint64_t parse_uint(const std::string& s, const std::string& flag) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    throw InputError(flag + ": " + quote_value(s) + " is not a positive integer");
  std::uint64_t v = 0;
  try {
    v = std::stoull(s);
  } catch (const std::exception&) {
    throw InputError(flag + ": " + quote_value(s) + " is out of range");
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
    if (item[0] == '-' || item[0] == '+')
      throw InputError(flag + ": " + quote_value(item) + " is not a positive integer (sizes are 1 or more)");
    auto range = item.find("..");
    if (range == std::string::npos) range = item.find('-');
    if (range != std::string::npos) {
      const std::size_t skip = item.compare(range, 2, "..") == 0 ? 2 : 1;
      const auto lo = parse_uint(item.substr(0, range), flag), hi = parse_uint(item.substr(range + skip), flag);
      if (lo > hi) throw InputError(flag + ": empty range " + quote_value(item) + " (the first bound is larger than the second)");
      for (std::uint64_t v = lo; v <= hi; v *= 2) {
        out.push_back(v);
        if (v > (UINT64_MAX >> 1)) break;
      }
    } else {
      out.push_back(parse_uint(item, flag));
    }
  }
  if (out.empty())
    throw InputError(flag + ": empty list; give sizes like 1,2,4 or a range like 1..256 (doubling from the first bound)");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

LinearShape parse_shape(const std::string& text) {
  std::stringstream ss(text);
  std::string a, b, c, extra;
  const char sep = text.find('x') != std::string::npos ? 'x' : ',';
  if (!std::getline(ss, a, sep) || !std::getline(ss, b, sep) || !std::getline(ss, c, sep) || std::getline(ss, extra, sep))
    throw InputError("--shape: " + quote_value(text) + " is not M,N,K (e.g. 4096,4096,4096 or 4096x4096x4096)");
  return {parse_uint(a, "--shape M"), parse_uint(b, "--shape N"), parse_uint(c, "--shape K")};
}

void apply_defaults(SweepConfig& c, const Backend& backend) {
  const bool gpu = backend.device().backend != "cpu";
  if (c.dtypes.empty()) c.dtypes = {gpu ? DType::bf16 : DType::fp32};
  if (c.attention_models.empty())
    c.attention_models = gpu && !c.models_given ? std::vector<std::string>{"llama-3.1-8b", "llama-3.1-70b"} : c.models;
  if (c.moe_models.empty()) {
    if (c.models_given) {
      for (const auto& name : c.models)
        if (load_model(name).experts) c.moe_models.push_back(name);
    } else {
      c.moe_models = gpu ? std::vector<std::string>{"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"}
                         : std::vector<std::string>{"qwen3-30b-a3b"};
    }
  }
  if (c.mla_models.empty()) {
    if (c.models_given) {
      for (const auto& name : c.models)
        if (load_model(name).uses_mla()) c.mla_models.push_back(name);
    } else {
      c.mla_models = gpu ? std::vector<std::string>{"deepseek-v2-lite", "deepseek-v3"}
                         : std::vector<std::string>{"deepseek-v2-lite"};
    }
  }
  for (const auto& a : OpRegistry::get().axes()) {
    if (a.text) {
      auto& w = c.axes.texts[a.key];
      if (w.empty()) w = gpu ? a.gpu_text : a.cpu_text;
      if (a.check_text) a.check_text(w);
      continue;
    }
    auto& v = c.axes.sizes[a.key];
    if (v.empty()) v = gpu ? a.gpu_default : a.cpu_default;
    if (a.check) a.check(v);
  }
}

namespace {

bool listed(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The implementations the backend runs for `r`, own first; the vendor row beside
// our own only when asked (decode GEMVs: --no-blas leaves it out).
std::vector<Impl> impls_for(const Backend& backend, OpRequest r, bool beside_own) {
  std::vector<Impl> v;
  r.impl = Impl::own;
  if (backend.implements(r.kind, r.dtype, Impl::own) && backend.applies(r)) v.push_back(Impl::own);
  r.impl = Impl::blas;
  if ((v.empty() || beside_own) && backend.implements(r.kind, r.dtype, Impl::blas) && backend.applies(r))
    v.push_back(Impl::blas);
  return v;
}

}  // namespace

std::vector<Point> build_sweep(const SweepConfig& c, const Backend& backend) {
  const auto& reg = OpRegistry::get();
  for (const auto& g : c.groups)
    if (std::none_of(reg.groups().begin(), reg.groups().end(), [&](const SweepGroup& x) { return x.name == g; })) {
      std::string known;
      for (const auto& k : reg.groups()) known += (known.empty() ? "" : ", ") + k.name;
      throw InputError("--ops: unknown group '" + g + "'; use " + known);
    }
  auto wanted = [&](const SweepGroup& g) { return c.groups.empty() || c.groups.count(g.name); };
  SweepScope scope;
  scope.dtypes = c.dtypes;
  scope.axes = &c.axes;
  scope.compare_blas = c.compare_blas;
  scope.impls = [&](const OpRequest& r, bool beside_own) { return impls_for(backend, r, beside_own); };
  std::vector<Point> pts;
  auto add = [&](std::vector<Point> more) { pts.insert(pts.end(), more.begin(), more.end()); };
  // Every model of either list, in order; each group runs for the models it is
  // meant for (attention shapes for attention_models, the rest for models).
  std::vector<std::string> all_models = c.models;
  for (const auto& a : c.attention_models)
    if (!listed(all_models, a)) all_models.push_back(a);
  for (const auto& a : c.moe_models)
    if (!listed(all_models, a)) all_models.push_back(a);
  for (const auto& a : c.mla_models)
    if (!listed(all_models, a)) all_models.push_back(a);
  for (const auto& name : all_models) {
    const ModelConfig m = load_model(name);
    scope.model = &m;
    for (DType t : c.dtypes) {
      scope.dtype = t;
      for (const auto& g : reg.groups()) {
        const bool for_model = g.models == SweepGroup::Models::linear      ? listed(c.models, name)
                               : g.models == SweepGroup::Models::attention ? listed(c.attention_models, name)
                               : g.models == SweepGroup::Models::moe       ? listed(c.moe_models, name) && m.experts > 0
                               : g.models == SweepGroup::Models::mla       ? listed(c.mla_models, name) && m.uses_mla()
                                                                           : false;
        // Our attention kernels are grouped-query attention: an MLA model (DeepSeek)
        // has no attention points, its projections still run.
        if (g.models == SweepGroup::Models::attention && m.uses_mla()) continue;
        if (for_model && wanted(g)) add(g.points(scope));
      }
    }
  }
  scope.model = nullptr;
  for (const auto& g : reg.groups())
    if (g.models == SweepGroup::Models::none && wanted(g))
      for (DType t : c.dtypes) {
        scope.dtype = t;
        add(g.points(scope));
      }
  return pts;
}

}  // namespace phasebench
