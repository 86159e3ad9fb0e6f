// core/rate_structure.hpp: the rate matrix as a sum of micro constants, and its derivatives.
#include "core/rate_structure.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <pkscan/error.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::detail {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

RateStructure analyse_rates(const ModelInfo& m) {
  RateStructure rs;
  const std::size_t np = m.parameters.size();
  const int n = static_cast<int>(m.compartments.size());
  rs.is_clearance.assign(np, 0);
  rs.is_source_volume.assign(np, 0);
  for (const ParameterAlternative& alt : m.alternatives)
    for (int c : alt.clearance) rs.is_clearance[static_cast<std::size_t>(c)] = 1;
  for (std::size_t c = 0; c < np; ++c)
    if (m.parameters[c].role == ParameterRole::Rate && !rs.is_clearance[c])
      rs.micro.push_back(static_cast<int>(c));
  std::vector<double> p(np, 1.0);
  for (int c : rs.micro) p[static_cast<std::size_t>(c)] = 0.0;
  for (std::size_t c = 0; c < np; ++c)
    if (rs.is_clearance[c]) p[c] = kNaN;
  for (int mc : rs.micro) {
    std::vector<double> b(static_cast<std::size_t>(n * n));
    p[static_cast<std::size_t>(mc)] = 1.0;
    rate_matrix(m, p.data(), b.data());
    p[static_cast<std::size_t>(mc)] = 0.0;
    int clearance = -1, volume = -1;
    for (const ParameterAlternative& alt : m.alternatives)
      for (std::size_t i = 0; i < alt.micro.size(); ++i) {
        if (alt.micro[i] != mc) continue;
        if (alt.clearance.size() == 1)
          clearance = alt.clearance[0];
        else if (alt.clearance.size() == alt.micro.size())
          clearance = alt.clearance[i];
        else
          throw Error("model " + m.name +
                      " pairs micro constants and clearances in a way pkscan cannot differentiate");
        int source = -1;
        for (int r = 0; r < n; ++r)
          if (b[static_cast<std::size_t>(r) * static_cast<std::size_t>(n + 1)] < 0.0)
            source = source < 0 ? r : -2;
        if (source < 0)
          throw Error("model " + m.name + ": micro constant " +
                      m.parameters[static_cast<std::size_t>(mc)].name +
                      " has no single source compartment");
        volume = m.volume_parameter[static_cast<std::size_t>(source)];
        rs.is_source_volume[static_cast<std::size_t>(volume)] = 1;
      }
    rs.b.push_back(std::move(b));
    rs.clearance.push_back(clearance);
    rs.volume.push_back(volume);
  }
  // Self-check of the representation with clearances given: the derivatives rest on it.
  if (!m.alternatives.empty()) {
    std::vector<double> q(np, 1.0);
    for (std::size_t c = 0; c < np; ++c) q[c] = 0.7 + 0.13 * static_cast<double>(c);
    for (const ParameterAlternative& alt : m.alternatives)
      for (int c : alt.micro) q[static_cast<std::size_t>(c)] = kNaN;
    std::vector<double> a(static_cast<std::size_t>(n * n)), s(static_cast<std::size_t>(n * n), 0.0);
    rate_matrix(m, q.data(), a.data());
    for (std::size_t i = 0; i < rs.micro.size(); ++i) {
      const double v = q[static_cast<std::size_t>(rs.micro[i])];
      const double kappa = std::isnan(v) ? q[static_cast<std::size_t>(rs.clearance[i])] /
                                               q[static_cast<std::size_t>(rs.volume[i])]
                                         : v;
      for (std::size_t j = 0; j < a.size(); ++j) s[j] += kappa * rs.b[i][j];
    }
    for (std::size_t j = 0; j < a.size(); ++j)
      if (!(std::fabs(a[j] - s[j]) <= 1e-12 * (1.0 + std::fabs(a[j]))))
        throw Error("the rate matrix of model " + m.name +
                    " is not the sum of its micro constants (cannot differentiate it)");
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
