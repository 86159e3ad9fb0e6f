// analyse_rates: the rate matrix as a sum of micro constants, read from the model's flows, agrees
// with rate_matrix() for every built-in model and for linear models.
#include "core/rate_structure.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/models/model.hpp>
#include <string>
#include <vector>

namespace pkscan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<std::shared_ptr<const ModelInfo>> models() {
  std::vector<std::shared_ptr<const ModelInfo>> v;
  for (ModelKind k :
       {ModelKind::TwoCompartment, ModelKind::ThreeCompartment, ModelKind::FourCompartment})
    v.push_back(std::make_shared<const ModelInfo>(model_info(k)));
  // One rate constant serving three flows (two from one compartment), two eliminations, a
  // compartment without outflow.
  const std::vector<FlowSpec> flows = {{"gut", "central", "k"},     {"central", "tissue", "k"},
                                       {"tissue", "central", "kb"}, {"central", "", "k"},
                                       {"tissue", "", "ke"},        {"central", "sink", "ks"}};
  v.push_back(make_linear_model({"gut", "central", "tissue", "sink"}, flows));
  v.push_back(make_linear_model({"a"}, {{"a", "", "ke"}}));
  return v;
}

bool is_clearance(const ModelInfo& m, int column) {
  for (const ParameterAlternative& alt : m.alternatives)
    for (int c : alt.clearance)
      if (c == column) return true;
  return false;
}

TEST(RateStructure, EachMicroConstantIsItsRateMatrixDirection) {
  for (const auto& mp : models()) {
    const ModelInfo& m = *mp;
    const std::size_t n = m.compartments.size(), np = m.parameters.size();
    const detail::RateStructure rs = detail::analyse_rates(m);
    std::vector<int> micro;
    for (std::size_t c = 0; c < np; ++c)
      if (m.parameters[c].role == ParameterRole::Rate && !is_clearance(m, static_cast<int>(c)))
        micro.push_back(static_cast<int>(c));
    ASSERT_EQ(rs.micro, micro) << m.name;
    ASSERT_EQ(rs.b.size(), micro.size());
    // B_m = A(p) with p[m] = 1, the other micro constants 0, the clearances not given.
    std::vector<double> p(np, 1.0), a(n * n);
    for (int c : micro) p[static_cast<std::size_t>(c)] = 0.0;
    for (std::size_t c = 0; c < np; ++c)
      if (is_clearance(m, static_cast<int>(c))) p[c] = kNaN;
    for (std::size_t i = 0; i < micro.size(); ++i) {
      p[static_cast<std::size_t>(micro[i])] = 1.0;
      rate_matrix(m, p.data(), a.data());
      p[static_cast<std::size_t>(micro[i])] = 0.0;
      for (std::size_t e = 0; e < n * n; ++e)
        EXPECT_EQ(rs.b[i][e], a[e]) << m.name << " " << m.parameters[micro[i]].name << " " << e;
    }
  }
}

TEST(RateStructure, ClearancesGiveTheRateMatrix) {
  for (const auto& mp : models()) {
    const ModelInfo& m = *mp;
    if (m.alternatives.empty()) continue;
    const std::size_t n = m.compartments.size(), np = m.parameters.size();
    const detail::RateStructure rs = detail::analyse_rates(m);
    std::vector<double> q(np);
    for (std::size_t c = 0; c < np; ++c) q[c] = 0.7 + 0.13 * static_cast<double>(c);
    for (const ParameterAlternative& alt : m.alternatives)
      for (int c : alt.micro) q[static_cast<std::size_t>(c)] = kNaN;
    std::vector<double> a(n * n), s(n * n, 0.0);
    rate_matrix(m, q.data(), a.data());
    for (std::size_t i = 0; i < rs.micro.size(); ++i) {
      const double v = q[static_cast<std::size_t>(rs.micro[i])];
      const double kappa = std::isnan(v) ? q[static_cast<std::size_t>(rs.clearance[i])] /
                                               q[static_cast<std::size_t>(rs.volume[i])]
                                         : v;
      for (std::size_t e = 0; e < n * n; ++e) s[e] += kappa * rs.b[i][e];
    }
    for (std::size_t e = 0; e < n * n; ++e) EXPECT_NEAR(s[e], a[e], 1e-12) << m.name << " " << e;
  }
}

TEST(RateStructure, ClearanceAndSourceVolumeOfEachMicroConstant) {
  const ModelInfo& m = model_info(ModelKind::ThreeCompartment);
  const detail::RateStructure rs = detail::analyse_rates(m);
  auto col = [&](const char* name) { return parameter_index(m, name); };
  struct Want {
    const char* micro;
    const char* clearance;  // "" for none
    const char* volume;
  };
  for (const Want& w : {Want{"ka", "", ""}, Want{"k12", "q", "v_central"},
                        Want{"k21", "q", "v_peripheral"}, Want{"ke", "cl", "v_central"}}) {
    std::size_t i = 0;
    while (i < rs.micro.size() && rs.micro[i] != col(w.micro)) ++i;
    ASSERT_LT(i, rs.micro.size()) << w.micro;
    EXPECT_EQ(rs.clearance[i], *w.clearance ? col(w.clearance) : -1) << w.micro;
    EXPECT_EQ(rs.volume[i], *w.volume ? col(w.volume) : -1) << w.micro;
  }
  for (const char* name : {"cl", "q"}) EXPECT_TRUE(rs.is_clearance[col(name)]) << name;
  for (const char* name : {"v_central", "v_peripheral"})
    EXPECT_TRUE(rs.is_source_volume[col(name)]) << name;
  EXPECT_FALSE(rs.is_source_volume[col("v_depot")]);
}

TEST(RateStructure, FlowsOfOneMicroConstantWithDifferentSourcesAreRejected) {
  // A hand-written description: k serves two flows with a clearance, from different compartments.
  ModelInfo m = model_info(ModelKind::ThreeCompartment);
  const int k12 = parameter_index(m, "k12");
  for (Flow& f : m.flows)
    if (f.parameter == parameter_index(m, "k21")) f.parameter = k12;
  EXPECT_THROW(detail::analyse_rates(m), Error);
}

}  // namespace
}  // namespace pkscan
