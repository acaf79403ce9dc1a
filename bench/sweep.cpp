// Sweeps (sweep.hpp): the groups' axis values (--axis, the old flags, the
// defaults), the models each group runs for, and the points the groups make for
// each model and dtype.
#include "sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"

namespace phasebench {

namespace {

// Ranges make at most this many values: a typo (1:1000000000:+1) is refused, not swept.
constexpr std::size_t kMaxAxisValues = 4096;

std::uint64_t parse_uint(const std::string& s, const std::string& flag) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    throw InputError(flag + ": " + quote_value(s) + " is not a positive integer");
  std::uint64_t v = 0;
  try {
    v = std::stoull(s);
  } catch (const std::exception&) {
    throw InputError(flag + ": " + quote_value(s) + " is out of range");
  }
  if (v == 0) throw InputError(flag + ": sizes must be positive, got " + quote_value(s));
  return v;
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ",") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string join(const std::vector<std::uint64_t>& v) {
  std::vector<std::string> w;
  for (auto x : v) w.push_back(std::to_string(x));
  return join(w);
}

// start:end:xF or start:end:+S, nvbench's range syntax on whole numbers.
void add_stepped_range(const std::string& item, const std::string& flag, std::vector<std::uint64_t>& out) {
  const auto c1 = item.find(':'), c2 = item.find(':', c1 + 1);
  const auto bad = [&](const std::string& why) {
    return InputError(flag + ": " + quote_value(item) + " " + why +
                      "; ranges are start:end:xF (times F) or start:end:+S (plus S), e.g. 512:32768:x4 or 16:64:+16");
  };
  if (c2 == std::string::npos || item.find(':', c2 + 1) != std::string::npos) throw bad("is not a range");
  const std::string step = item.substr(c2 + 1);
  if (step.size() < 2 || (step[0] != 'x' && step[0] != '+')) throw bad("has no step x<factor> or +<step>");
  const auto lo = parse_uint(item.substr(0, c1), flag), hi = parse_uint(item.substr(c1 + 1, c2 - c1 - 1), flag);
  const auto by = parse_uint(step.substr(1), flag);
  if (lo > hi) throw bad("is empty (the start is larger than the end)");
  if (step[0] == 'x' && by < 2) throw bad("never grows (use a factor of 2 or more)");
  for (std::uint64_t v = lo; v <= hi;) {
    out.push_back(v);
    if (out.size() > kMaxAxisValues) throw bad("makes more than " + std::to_string(kMaxAxisValues) + " values");
    if (step[0] == 'x' ? v > UINT64_MAX / by : v > UINT64_MAX - by) break;
    v = step[0] == 'x' ? v * by : v + by;
  }
}

// How --axis names an axis, in messages and notes.
std::string axis_flag(const std::string& group, const std::string& axis) { return "--axis " + group + "." + axis; }

// An axis's values against its declaration; errors name `what`.
void check_values(const AxisValues& vals, const AxisDecl& a, const std::string& what) {
  if (a.text) {
    if (!a.check_text) return;
    try {
      a.check_text(vals.text(a.name), what);
    } catch (const InputError& e) {
      // The shared parsers (routing, context distributions) name the old flag;
      // through --axis, say which axis it was.
      if (what == a.alias) throw;
      throw InputError(what + ": " + e.what());
    }
    return;
  }
  const auto& v = vals[a.name];
  if (a.single && v.size() != 1) throw InputError(what + " takes one value, got " + quote_value(join(v)));
  if (a.check) a.check(v, what);
}

// A text axis's words, or its sizes, from `text`, checked; errors name `what`.
void set_values(AxisValues& into, const AxisDecl& a, const std::string& text, const std::string& what) {
  if (a.text) {
    std::vector<std::string> words;
    std::stringstream ss(text);
    std::string w;
    while (std::getline(ss, w, ',')) {
      if (w.empty()) throw InputError(what + ": an empty item in " + quote_value(text));
      words.push_back(w);
    }
    if (words.empty() || text.back() == ',') throw InputError(what + ": an empty item in " + quote_value(text));
    into.texts[a.name] = std::move(words);
  } else {
    auto v = parse_size_list(text, what);
    if (a.single && v.size() != 1) throw InputError(what + " takes one value, got " + quote_value(text));
    into.sizes[a.name] = std::move(v);
  }
  check_values(into, a, what);
}

std::string group_names() {
  std::vector<std::string> names;
  for (const auto& g : OpRegistry::get().groups()) names.push_back(g.name);
  return join(names, ", ");
}

std::string axis_names(const SweepGroup& g) {
  std::vector<std::string> names;
  for (const auto& a : g.axes) names.push_back(a.name);
  return names.empty() ? "it has none" : "its axes are " + join(names, ", ");
}

}  // namespace

std::vector<std::uint64_t> parse_size_list(const std::string& text, const std::string& flag) {
  std::vector<std::uint64_t> out;
  // 1,,2 and 1,2, are typos, not lists with an item left out.
  if (!text.empty() && (text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos))
    throw InputError(flag + ": an empty item in " + quote_value(text) + "; give sizes like 1,2,4");
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item[0] == '-' || item[0] == '+')
      throw InputError(flag + ": " + quote_value(item) + " is not a positive integer (sizes are 1 or more)");
    if (item.find(':') != std::string::npos) {
      add_stepped_range(item, flag, out);
      continue;
    }
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

std::string axis_example() {
  for (const auto& g : OpRegistry::get().groups())
    for (const auto& a : g.axes)
      if (!a.text && !a.single && !a.gpu_default.empty()) return g.name + "." + a.name + "=" + join(a.gpu_default);
  return "GROUP.AXIS=1,8,64";
}

void set_axis(SweepConfig& c, const std::string& assignment) {
  const auto eq = assignment.find('='), dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw InputError("--axis " + quote_value(assignment) +
                     ": give GROUP.AXIS=VALUES, e.g. " + axis_example() + " (phasebench run --list-axes lists them)");
  const std::string group = assignment.substr(0, dot), axis = assignment.substr(dot + 1, eq - dot - 1);
  const SweepGroup* g = OpRegistry::get().find_group_or_former(group);
  if (!g) throw InputError("--axis " + quote_value(assignment) + ": unknown group " + quote_value(group) + "; the groups are " + group_names());
  if (g->name != group) c.former_groups.emplace(group, g->name);
  const AxisDecl* a = g->axis(axis);
  if (!a)
    throw InputError("--axis " + quote_value(assignment) + ": " + group + " has no axis " + quote_value(axis) + "; " +
                     axis_names(*g) + " (phasebench run --list-axes)");
  set_values(c.axes[g->name], *a, assignment.substr(eq + 1), axis_flag(group, axis));
}

std::vector<AxisAlias> axis_aliases() {
  std::vector<AxisAlias> out;
  for (const auto& g : OpRegistry::get().groups())
    for (const auto& a : g.axes) {
      if (a.alias.empty()) continue;
      auto it = std::find_if(out.begin(), out.end(), [&](const AxisAlias& x) { return x.flag == a.alias; });
      if (it == out.end()) {
        std::string env = "PHASEBENCH_" + a.alias.substr(2);
        for (auto& ch : env) ch = ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        it = out.insert(out.end(), AxisAlias{a.alias, env, {}, ""});
      }
      it->targets.emplace_back(g.name, a.name);
    }
  for (auto& x : out) {
    std::vector<std::string> axes;
    for (const auto& [g, a] : x.targets) axes.push_back(g + "." + a);
    const std::string last = axes.back();
    axes.pop_back();
    x.help = "old flag, kept for one release: --axis " + (axes.empty() ? last : join(axes, ", ") + " and " + last);
  }
  return out;
}

std::string set_alias(SweepConfig& c, const AxisAlias& a, const std::string& values) {
  std::string replacement;
  for (const auto& [group, axis] : a.targets) {
    set_values(c.axes[group], *OpRegistry::get().find_group(group)->axis(axis), values, a.flag);
    if (!replacement.empty()) replacement += " ";
    replacement += axis_flag(group, axis) + "=" + values;
  }
  return replacement;
}

std::string list_axes() {
  const std::string default_models = join(SweepConfig{}.models);
  std::string out =
      "Sweep groups (--ops) and their axes (--axis GROUP.AXIS=VALUES; VALUES 1,8,64, 1..256 doubling, 512:32768:x4, "
      "16:64:+16, or words for text axes). Defaults are GPU | CPU; old: the flag that set the axis before --axis, "
      "an alias for one release.\n";
  for (const auto& g : OpRegistry::get().groups()) {
    out += fmt::format("\n{}: {}{}\n", g.name, g.help, g.on_request ? " (only when --ops names it)" : "");
    if (g.per_model) {
      auto models = [&](const std::vector<std::string>& v) { return v.empty() ? "--model (" + default_models + ")" : join(v); };
      std::string line = (g.takes_what.empty() ? "every model" : "the " + g.takes_what) + " of --model";
      if (!g.gpu_models.empty() || !g.cpu_models.empty())
        line += "; without --model: " + models(g.gpu_models) + " | " + models(g.cpu_models);
      out += "  models: " + line + "\n";
    } else {
      out += "  models: none";
      out += g.from_shapes ? " (its shapes are --shape M,N,K)\n" : "\n";
    }
    for (const auto& a : g.axes) {
      const std::string dflt = a.text ? join(a.gpu_text) + " | " + join(a.cpu_text)
                                      : join(a.gpu_default) + " | " + join(a.cpu_default);
      out += fmt::format("  {:<14} {:<44} {}{}{}\n", a.name, dflt, a.help,
                         a.single ? " (one value)" : "", a.alias.empty() ? "" : "; old: " + a.alias);
    }
  }
  return out;
}

void apply_defaults(SweepConfig& c, const Backend& backend) {
  const bool gpu = backend.device().backend != "cpu";
  if (c.dtypes.empty()) c.dtypes = {gpu ? DType::bf16 : DType::fp32};
  for (const auto& g : OpRegistry::get().groups()) {
    auto& vals = c.axes[g.name];
    for (const auto& a : g.axes) {
      if (a.text) {
        auto& w = vals.texts[a.name];
        if (w.empty()) w = gpu ? a.gpu_text : a.cpu_text;
      } else {
        auto& v = vals.sizes[a.name];
        if (v.empty()) v = gpu ? a.gpu_default : a.cpu_default;
      }
      check_values(vals, a, axis_flag(g.name, a.name));
    }
  }
}

namespace {

bool listed(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The implementations the backend runs for `r` of those the run wants, own first;
// the vendor BLAS row beside our own only when asked (decode GEMVs: --no-blas
// leaves it out); the attention libraries' rows wherever the backend has them
// (a shape a library refuses is a skipped point with its reason, not no point).
std::vector<Impl> impls_for(const Backend& backend, const std::set<Impl>& wanted, OpRequest r, bool beside_own) {
  std::vector<Impl> v;
  auto has = [&](Impl i) {
    r.impl = i;
    return (wanted.empty() || wanted.count(i)) && backend.implements(r.kind, r.dtype, i) && backend.applies(r);
  };
  if (has(Impl::own)) v.push_back(Impl::own);
  if ((v.empty() || beside_own) && has(Impl::blas)) v.push_back(Impl::blas);
  for (Impl lib : {Impl::flashinfer, Impl::cudnn, Impl::nccl})
    if (has(lib)) v.push_back(lib);
  return v;
}

}  // namespace

std::vector<std::string> group_models(const SweepGroup& g, const SweepConfig& c, bool gpu) {
  if (!g.per_model) return {};
  const auto& defaults = gpu ? g.gpu_models : g.cpu_models;
  const auto& from = c.models_given || defaults.empty() ? c.models : defaults;
  if (!g.takes) return from;
  std::vector<std::string> out;
  for (const auto& name : from)
    if (g.takes(load_model(name))) out.push_back(name);
  return out;
}

namespace {

// A group asked for by --ops that cannot make a point: say what it needs,
// rather than leave an empty sweep to blame the backend or the dtypes.
void check_requested_group(const SweepGroup& g, const SweepConfig& c, const std::vector<std::string>& models, bool gpu) {
  if (!c.groups.count(g.name)) return;
  if (g.from_shapes && !g.per_model && c.shapes.empty())
    throw InputError("--ops " + g.name + ": the group measures the shapes --shape M,N,K gives, and none is given");
  if (!g.per_model || !models.empty()) return;
  const auto& defaults = gpu ? g.gpu_models : g.cpu_models;
  const auto& tried = c.models_given || defaults.empty() ? c.models : defaults;
  std::string names;
  for (const auto& n : tried) names += (names.empty() ? "" : ", ") + n;
  throw InputError("--ops " + g.name + ": it runs for " + (g.takes_what.empty() ? std::string("other models") : g.takes_what) +
                   ", and " + (tried.size() == 1 ? "the model " + names + " is not one" : "none of " + names + " is one") +
                   (defaults.empty() ? std::string() : "; give --model with one, e.g. " + defaults.front()));
}

// The longest context (or prompt) of a model's points beyond its max_position_embeddings, as one warning.
void warn_beyond_positions(const ModelConfig& m, const std::vector<Point>& pts, std::size_t from,
                           std::vector<std::string>* warnings) {
  if (!warnings || !m.max_position) return;
  std::uint64_t longest = 0;
  for (std::size_t i = from; i < pts.size(); ++i)
    for (const char* key : {"context", "prompt"})
      if (const auto it = pts[i].args.find(key); it != pts[i].args.end()) longest = std::max(longest, it->second);
  if (longest <= m.max_position) return;
  warnings->push_back(m.name + ": contexts of up to " + std::to_string(longest) + " tokens are beyond the model's " +
                      "max_position_embeddings (" + std::to_string(m.max_position) +
                      "): measured anyway, but the model was not trained for them");
}

}  // namespace

// The library rows a sweep has none of although its operations have them somewhere
// (OpDecl::libraries) and the run did not leave them out (--impl): one warning each,
// with why (the CPU backend has none; a CUDA build configured without their headers).
void warn_missing_libraries(const SweepConfig& c, const Backend& backend, const std::vector<Point>& pts,
                            std::vector<std::string>* warnings) {
  if (!warnings) return;
  const auto& reg = OpRegistry::get();
  std::map<Impl, std::set<std::string>> kinds_of;  // library -> kinds of this sweep it has rows of somewhere
  std::set<Impl> present;
  for (const auto& p : pts) {
    present.insert(p.request.impl);
    for (Impl lib : reg.op(p.request.kind).libraries) kinds_of[lib].insert(p.request.kind);
  }
  for (const auto& [lib, kinds] : kinds_of) {
    if (present.count(lib) || (!c.impls.empty() && !c.impls.count(lib))) continue;
    std::string names;
    for (const auto& k : kinds) names += (names.empty() ? "" : ", ") + k;
    const bool cpu = backend.device().backend == "cpu";
    warnings->push_back(
        "no " + std::string(to_string(lib)) + " rows of " + names +
        (cpu ? ": the cpu backend has none (the attention libraries' rows run on the CUDA backend)"
             : ": this build has none (its headers were not found when it was configured: run scripts/setup, then "
               "configure and build again)"));
  }
}

std::vector<Point> build_sweep(const SweepConfig& c, const Backend& backend, std::vector<std::string>* warnings) {
  const auto& reg = OpRegistry::get();
  for (const auto& g : c.groups)
    if (!reg.find_group(g)) throw InputError("--ops: unknown group '" + g + "'; use " + group_names());  // sweep_config maps former names
  auto wanted = [&](const SweepGroup& g) { return c.groups.empty() ? !g.on_request : c.groups.count(g.name) > 0; };
  const bool gpu = backend.device().backend != "cpu";
  static const AxisValues kNoValues;
  auto axes_of = [&](const SweepGroup& g) {
    const auto it = c.axes.find(g.name);
    return it == c.axes.end() ? &kNoValues : &it->second;
  };
  SweepScope scope;
  scope.dtypes = c.dtypes;
  scope.shapes = &c.shapes;
  scope.compare_blas = c.compare_blas;
  scope.impls = [&](const OpRequest& r, bool beside_own) { return impls_for(backend, c.impls, r, beside_own); };
  // Each wanted group's models; every model of any of them, --model's first,
  // then the others in the order of the groups that run them.
  std::map<std::string, std::vector<std::string>> models_of;
  std::vector<std::string> all_models = c.models;
  for (const auto& g : reg.groups()) {
    if (!wanted(g) || !g.per_model) continue;
    auto& mine = models_of[g.name] = group_models(g, c, gpu);
    check_requested_group(g, c, mine, gpu);
    for (const auto& name : mine)
      if (!listed(all_models, name)) all_models.push_back(name);
  }
  std::vector<Point> pts;
  auto add = [&](std::vector<Point> more) { pts.insert(pts.end(), more.begin(), more.end()); };
  for (const auto& name : all_models) {
    const ModelConfig m = load_model(name);
    const std::size_t first = pts.size();
    scope.model = &m;
    for (DType t : c.dtypes) {
      scope.dtype = t;
      for (const auto& g : reg.groups()) {
        if (!wanted(g) || !g.per_model || !listed(models_of[g.name], name)) continue;
        scope.axes = axes_of(g);
        add(g.points(scope));
      }
    }
    warn_beyond_positions(m, pts, first, warnings);
  }
  scope.model = nullptr;
  for (const auto& g : reg.groups()) {
    if (g.per_model || !wanted(g)) continue;
    check_requested_group(g, c, {}, gpu);
    for (DType t : c.dtypes) {
      scope.dtype = t;
      scope.axes = axes_of(g);
      add(g.points(scope));
    }
  }
  warn_missing_libraries(c, backend, pts, warnings);
  return pts;
}

}  // namespace phasebench
