// covariance_step (pkscan/estimation.hpp) at NONMEM 7.4.1's own final FOCEI estimates of the
// THEO model, against the standard errors NONMEM printed there (THEO-FOCEI.ext, row
// -1000000001; tests/data/estimation/README.md): the default sandwich R^-1 S R^-1 within 5%.
#include <gtest/gtest.h>

#include <cmath>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

namespace pkscan {
namespace {

const ModelInfo& two_compartment() { return model_info(ModelKind::TwoCompartment); }

PopulationFitSpec theo_final() {
  const ModelInfo& m = two_compartment();
  PopulationFitSpec spec;
  PopulationModel& pm = spec.initial;
  for (const ParameterInfo& p : m.parameters) pm.theta_row.push_back(p.default_value);
  const int ka = parameter_index(m, "ka"), v = parameter_index(m, "v_central"),
            ke = parameter_index(m, "ke");
  pm.theta_row[static_cast<std::size_t>(ka)] = 1.49072;
  pm.theta_row[static_cast<std::size_t>(v)] = 32.4470;
  pm.theta_row[static_cast<std::size_t>(ke)] = 0.0872901;
  pm.eta_columns = {ka, v, ke};
  const double lower[6] = {0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334};
  pm.omega.resize(3, 3);
  int k = 0;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c <= r; ++c) pm.omega(r, c) = pm.omega(c, r) = lower[k++];
  pm.sigma_proportional = 0.0170386;
  pm.sigma_additive = 0.0828440;
  spec.theta_columns = {ka, v, ke};
  spec.theta_lower = {0, 0, 0};
  spec.theta_upper = {1e6, 1e6, 1e6};
  spec.omega_block = true;
  return spec;
}

TEST(CovarianceStep, TheophFoceiSandwichAtNonmemsEstimates) {
  const Predictor p(read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/theo.csv",
                                 two_compartment()),
                    ModelKind::TwoCompartment);
  EstimationOptions o;
  o.method = EstimationMethod::Focei;
  const CovarianceStep c = covariance_step(p, theo_final(), o, CovarianceKind::Sandwich);
  ASSERT_TRUE(c.ok) << c.message;
  // THETA (KA, V, K), OMEGA (lower triangle by rows), SIGMA (proportional, additive).
  const std::vector<double> nonmem = {0.300784,  1.66399,    0.00432513, 0.221981,
                                      0.0359561, 0.00854021, 0.0219563,  0.00763049,
                                      0.0201151, 0.0118470,  0.114348};
  ASSERT_EQ(c.se.size(), static_cast<Eigen::Index>(nonmem.size()));
  for (std::size_t i = 0; i < nonmem.size(); ++i) {
    EXPECT_NEAR(c.se(static_cast<Eigen::Index>(i)), nonmem[i], 0.05 * nonmem[i])
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace pkscan
