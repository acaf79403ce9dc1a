// The operation registry and what every declaration shares (phasebench/op.hpp):
// named shapes, requests' cost and footprint through their declaration, point
// names made with their args, and the registration of harness/src/ops/*.cpp.
#include "phasebench/op.hpp"

#include <algorithm>
#include <stdexcept>

#include "phasebench/error.hpp"

namespace phasebench {

// Written by CMake (harness/CMakeLists.txt): calls every PHASEBENCH_DECLARE_OPS.
void declare_all_ops(OpRegistry& registry);

// ---- Shape ----------------------------------------------------------------------------

Shape::Shape(std::initializer_list<std::pair<std::string, std::uint64_t>> dims) {
  for (const auto& [k, v] : dims) set(k, v);
}

std::uint64_t Shape::operator[](std::string_view name) const {
  for (const auto& [k, v] : dims_)
    if (k == name) return v;
  throw std::logic_error("shape has no dimension '" + std::string(name) + "'");
}

std::uint64_t Shape::get(std::string_view name, std::uint64_t dflt) const {
  for (const auto& [k, v] : dims_)
    if (k == name) return v;
  return dflt;
}

bool Shape::has(std::string_view name) const {
  return std::any_of(dims_.begin(), dims_.end(), [&](const auto& kv) { return kv.first == name; });
}

Shape& Shape::set(std::string_view name, std::uint64_t value) {
  for (auto& [k, v] : dims_)
    if (k == name) {
      v = value;
      return *this;
    }
  dims_.emplace_back(std::string(name), value);
  return *this;
}

nlohmann::json Shape::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : dims_) j[k] = v;
  return j;
}

// ---- requests ---------------------------------------------------------------------------

std::string_view to_string(Impl i) {
  switch (i) {
    case Impl::own: return "own";
    case Impl::blas: return "blas";
    case Impl::flashinfer: return "flashinfer";
    case Impl::cudnn: return "cudnn";
    case Impl::nccl: return "nccl";
  }
  return "?";
}

std::optional<Impl> impl_named(std::string_view name) {
  for (Impl i : kAllImpls)
    if (to_string(i) == name) return i;
  return std::nullopt;
}

OpCost OpRequest::cost() const { return OpRegistry::get().op(kind).cost(*this); }

std::uint64_t OpRequest::footprint_bytes() const { return OpRegistry::get().op(kind).footprint(*this); }

// ---- points -----------------------------------------------------------------------------

const std::vector<std::uint64_t>& AxisValues::operator[](const std::string& name) const {
  auto it = sizes.find(name);
  if (it == sizes.end()) throw std::logic_error("sweep axis '" + name + "' has no values");
  return it->second;
}

std::uint64_t AxisValues::one(const std::string& name) const {
  const auto& v = (*this)[name];
  if (v.size() != 1) throw std::logic_error("sweep axis '" + name + "' takes one value");
  return v.front();
}

const std::vector<std::string>& AxisValues::text(const std::string& name) const {
  auto it = texts.find(name);
  if (it == texts.end()) throw std::logic_error("sweep axis '" + name + "' has no words");
  return it->second;
}

const AxisDecl* SweepGroup::axis(std::string_view axis_name) const {
  for (const auto& a : axes)
    if (a.name == axis_name) return &a;
  return nullptr;
}

Point make_point(const std::string& phase, const std::string& model, const std::string& target, const std::string& subject,
                 OpRequest request, const std::vector<PointArg>& args, bool name_impl) {
  Point p;
  p.phase = phase;
  p.op = request.kind;  // one name per operation: the point's op is its kind
  const auto& op = p.op;
  p.model = model;
  p.target = target;
  p.name = phase + "/" + op + "/" + subject + "/" + std::string(to_string(request.dtype));
  for (const auto& a : args) {
    if (!a.text.empty()) {
      p.text_args[a.key] = a.text;
      if (!a.label.empty()) p.name += "/" + a.label + ":" + a.text;
      continue;
    }
    p.args[a.key] = a.value;
    if (!a.label.empty()) p.name += "/" + a.label + ":" + std::to_string(a.value);
  }
  if (name_impl) p.name += "/impl:" + std::string(to_string(request.impl));
  try {
    p.cost = request.cost();
    request.footprint_bytes();  // the memory a backend would need must be a number too
  } catch (const std::exception& e) {
    p.invalid = std::string("size: ") + e.what();
    p.cost = OpCost{};
  }
  p.request = std::move(request);
  return p;
}

// ---- the registry -----------------------------------------------------------------------

const OpRegistry& OpRegistry::get() {
  static const OpRegistry r = [] {
    OpRegistry reg;
    declare_all_ops(reg);
    std::stable_sort(reg.groups_.begin(), reg.groups_.end(),
                     [](const SweepGroup& a, const SweepGroup& b) { return a.order < b.order; });
    std::stable_sort(reg.sections_.begin(), reg.sections_.end(),
                     [](const SummarySection& a, const SummarySection& b) { return a.order < b.order; });
    return reg;
  }();
  return r;
}

void OpRegistry::declare(OpDecl d) {
  if (std::any_of(ops_.begin(), ops_.end(), [&](const OpDecl& o) { return o.kind == d.kind; }))
    throw std::logic_error("operation '" + d.kind + "' is declared twice");
  if (!d.cost || !d.footprint) throw std::logic_error("operation '" + d.kind + "' declares no cost or footprint");
  for (const auto& f : d.former_kinds)
    for (const auto& o : ops_)
      if (o.kind == f || std::find(o.former_kinds.begin(), o.former_kinds.end(), f) != o.former_kinds.end())
        throw std::logic_error("operation '" + d.kind + "': its former name '" + f + "' names another operation");
  ops_.push_back(std::move(d));
}

void OpRegistry::group(SweepGroup g) {
  if (find_group_or_former(g.name)) throw std::logic_error("sweep group '" + g.name + "' is declared twice");
  for (const auto& f : g.former_names)
    if (find_group_or_former(f)) throw std::logic_error("sweep group '" + g.name + "': its former name '" + f + "' is taken");
  if (g.name.empty() || g.name.find_first_of(".=, ") != std::string::npos)
    throw std::logic_error("sweep group '" + g.name + "': a name without '.', '=', ',' or spaces (--axis group.axis=...)");
  for (std::size_t i = 0; i < g.axes.size(); ++i) {
    const auto& a = g.axes[i];
    const std::string where = "sweep axis '" + g.name + "." + a.name + "'";
    if (a.name.empty() || a.name.find_first_of(".=, ") != std::string::npos)
      throw std::logic_error(where + ": a name without '.', '=', ',' or spaces");
    if (g.axis(a.name) != &a) throw std::logic_error(where + " is declared twice");
    // An old flag sets every axis that names it: one kind of value for all of them.
    for (const auto& o : groups_)
      for (const auto& b : o.axes)
        if (!a.alias.empty() && b.alias == a.alias && (b.text != a.text || b.single != a.single))
          throw std::logic_error(where + " and '" + o.name + "." + b.name + "' share the alias " + a.alias +
                                 " but take different values");
  }
  groups_.push_back(std::move(g));
}

const SweepGroup* OpRegistry::find_group(std::string_view name) const {
  for (const auto& g : groups_)
    if (g.name == name) return &g;
  return nullptr;
}

const SweepGroup* OpRegistry::find_group_or_former(std::string_view name) const {
  if (const auto* g = find_group(name)) return g;
  for (const auto& g : groups_)
    if (std::find(g.former_names.begin(), g.former_names.end(), name) != g.former_names.end()) return &g;
  return nullptr;
}

void OpRegistry::point_report(PointReport r) {
  if (point_report(r.kind)) throw std::logic_error("operation '" + r.kind + "' has two point reports");
  if (!r.json) throw std::logic_error("the point report of '" + r.kind + "' makes no JSON");
  point_reports_.push_back(std::move(r));
}

const PointReport* OpRegistry::point_report(std::string_view kind) const {
  for (const auto& r : point_reports_)
    if (r.kind == kind) return &r;
  return nullptr;
}

void OpRegistry::record(RunRecord r) {
  if (std::any_of(records_.begin(), records_.end(), [&](const RunRecord& o) { return o.key == r.key; }))
    throw std::logic_error("run record '" + r.key + "' is declared twice");
  records_.push_back(std::move(r));
}

void OpRegistry::section(SummarySection s) {
  if (std::any_of(sections_.begin(), sections_.end(), [&](const SummarySection& o) { return o.name == s.name; }))
    throw std::logic_error("summary section '" + s.name + "' is declared twice");
  sections_.push_back(std::move(s));
}

std::string OpRegistry::current_kind(std::string_view kind) const {
  for (const auto& o : ops_)
    if (std::find(o.former_kinds.begin(), o.former_kinds.end(), kind) != o.former_kinds.end()) return o.kind;
  return std::string(kind);
}

const OpDecl& OpRegistry::op(std::string_view kind) const {
  for (const auto& o : ops_)
    if (o.kind == kind) return o;
  throw std::logic_error("no operation '" + std::string(kind) + "' is declared (harness/src/ops/)");
}

}  // namespace phasebench
