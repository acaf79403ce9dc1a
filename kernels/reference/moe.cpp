// The MoE experts' reference (moe.hpp): tokens covering every used expert, and
// the SiLU-gated expert MLPs in double (threads over an expert's rows).
#include "reference/moe.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "reference/common.hpp"

namespace phasebench::reference {

std::vector<std::uint64_t> moe_tokens_to_check(const std::uint32_t* expert, std::size_t T, std::size_t k) {
  std::vector<std::uint64_t> out;
  if (T == 0) return out;
  std::vector<bool> covered;
  for (std::size_t t = 0; t < T; ++t) {
    bool wanted = t == 0 || t + 1 == T;
    for (std::size_t j = 0; j < k; ++j) {
      const auto e = expert[t * k + j];
      if (e >= covered.size()) covered.resize(e + 1, false);
      if (!covered[e]) wanted = true;
    }
    if (!wanted) continue;
    for (std::size_t j = 0; j < k; ++j) covered[expert[t * k + j]] = true;
    out.push_back(t);
  }
  return out;
}

void check_moe(const MoeInputs& in, const std::vector<std::uint64_t>& tokens, DType out_type,
               const std::function<float(std::uint64_t t, std::uint64_t c)>& got, const std::string& what) {
  const std::size_t h = in.h, I = in.I, k = in.k;
  std::vector<std::vector<double>> want(tokens.size(), std::vector<double>(h, 0.0)), scale = want;
  // Few tokens of wide experts: the threads split each expert's rows, not the tokens.
  std::vector<float> x(h);
  std::vector<double> act(I);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto t = tokens[i];
    in.x(t, x.data());
    for (std::size_t j = 0; j < k; ++j) {
      const auto e = in.expert[t * k + j];
      const double w = in.weight[t * k + j];
#pragma omp parallel if (h * I >= (1u << 16))  // threads only for wide experts
      {
        std::vector<float> row(std::max(h, I));
#pragma omp for schedule(static)
        for (std::int64_t r = 0; r < static_cast<std::int64_t>(I); ++r) {
          const auto ri = static_cast<std::size_t>(r);
          in.gate_up(e, ri, row.data());
          double g = 0;
          for (std::size_t c = 0; c < h; ++c) g += static_cast<double>(x[c]) * row[c];
          in.gate_up(e, I + ri, row.data());
          double u = 0;
          for (std::size_t c = 0; c < h; ++c) u += static_cast<double>(x[c]) * row[c];
          act[ri] = g / (1.0 + std::exp(-g)) * u;
        }
#pragma omp for schedule(static)
        for (std::int64_t c = 0; c < static_cast<std::int64_t>(h); ++c) {
          const auto ci = static_cast<std::size_t>(c);
          in.down(e, ci, row.data());
          double y = 0, a = 0;
          for (std::size_t r = 0; r < I; ++r) {
            const double p = act[r] * row[r];
            y += p;
            a += std::fabs(p);
          }
          want[i][ci] += w * y;
          scale[i][ci] += w * a;
        }
      }
    }
  }
  std::vector<float> g;
  std::vector<double> wv, sv;
  g.reserve(tokens.size() * h);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t c = 0; c < h; ++c) {
      g.push_back(got(tokens[i], c));
      wv.push_back(want[i][c]);
      sv.push_back(scale[i][c]);
    }
  std::ostringstream os;
  os << what << ", token/column = index / " << h << " of tokens";
  for (std::size_t i = 0; i < tokens.size() && i < 8; ++i) os << (i ? "," : " ") << tokens[i];
  if (tokens.size() > 8) os << ",...";
  check_close(g, wv, tolerance_for(out_type), os.str(), &sv);
}

}  // namespace phasebench::reference
