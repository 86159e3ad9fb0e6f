// core/rate_structure.hpp: the rate matrix as a sum of micro constants, and its derivatives.
#include "core/rate_structure.hpp"

#include <cmath>
#include <cstddef>
#include <pkscan/error.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::detail {

RateStructure analyse_rates(const ModelInfo& m) {
  RateStructure rs;
  const std::size_t np = m.parameters.size();
  const std::size_t n = m.compartments.size();
  rs.is_clearance.assign(np, 0);
  rs.is_source_volume.assign(np, 0);
  for (const Flow& f : m.flows)
    if (f.clearance >= 0) rs.is_clearance[static_cast<std::size_t>(f.clearance)] = 1;
  for (std::size_t c = 0; c < np; ++c) {
    if (m.parameters[c].role != ParameterRole::Rate || rs.is_clearance[c]) continue;
    // B_m: every flow of m moves amount out of its source (and into its destination) at rate 1.
    std::vector<double> b(n * n, 0.0);
    int clearance = -1, volume = -1;
    for (const Flow& f : m.flows) {
      if (f.parameter != static_cast<int>(c)) continue;
      const std::size_t from = static_cast<std::size_t>(f.from);
      b[from * n + from] -= 1.0;
      if (f.to >= 0) b[static_cast<std::size_t>(f.to) * n + from] += 1.0;
      if (f.clearance < 0) continue;
      const int v = m.volume_parameter[from];
      if (clearance >= 0 && (clearance != f.clearance || volume != v))
        throw Error("model " + m.name + ": rate constant " + m.parameters[c].name +
                    " has flows with different clearances or sources (cannot differentiate it)");
      clearance = f.clearance;
      volume = v;
      rs.is_source_volume[static_cast<std::size_t>(v)] = 1;
    }
    rs.micro.push_back(static_cast<int>(c));
    rs.b.push_back(std::move(b));
    rs.clearance.push_back(clearance);
    rs.volume.push_back(volume);
  }
  return rs;
}

void add_rate_derivatives(const RateStructure& rs, int n, const double* p, double* da) {
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  auto add = [&](int col, const std::vector<double>& b, double scale) {
    double* d = da + static_cast<std::size_t>(col) * nn;
    for (std::size_t i = 0; i < nn; ++i) d[i] += b[i] * scale;
  };
  for (std::size_t i = 0; i < rs.micro.size(); ++i) {
    const int mc = rs.micro[i];
    if (!std::isnan(p[mc])) {
      add(mc, rs.b[i], 1.0);
      continue;
    }
    const int c = rs.clearance[i], v = rs.volume[i];
    if (c < 0 || std::isnan(p[c])) continue;
    add(c, rs.b[i], 1.0 / p[v]);
    add(v, rs.b[i], -p[c] / (p[v] * p[v]));
  }
}

}  // namespace pkscan::detail
