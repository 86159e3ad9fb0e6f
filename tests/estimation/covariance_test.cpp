// covariance_step (pkscan/estimation.hpp) at NONMEM 7.4.1's own final FOCEI and FO estimates of
// the THEO model, against the standard errors NONMEM printed there (THEO-FOCEI.ext and
// THEO-FO.ext, row -1000000001; tests/data/estimation/README.md): the default sandwich
// R^-1 S R^-1 within 5%.
#include <gtest/gtest.h>

#include <cmath>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

namespace pkscan {
namespace {

const ModelInfo& two_compartment() { return model_info(ModelKind::TwoCompartment); }

PopulationFitSpec theo_at(const double theta[3], const double lower[6], double sigma_prop,
                          double sigma_add) {
  const ModelInfo& m = two_compartment();
  PopulationFitSpec spec;
  PopulationModel& pm = spec.initial;
  for (const ParameterInfo& p : m.parameters) pm.theta_row.push_back(p.default_value);
  const int ka = parameter_index(m, "ka"), v = parameter_index(m, "v_central"),
            ke = parameter_index(m, "ke");
  pm.theta_row[static_cast<std::size_t>(ka)] = theta[0];
  pm.theta_row[static_cast<std::size_t>(v)] = theta[1];
  pm.theta_row[static_cast<std::size_t>(ke)] = theta[2];
  pm.eta_columns = {ka, v, ke};
  pm.omega.resize(3, 3);
  int k = 0;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c <= r; ++c) pm.omega(r, c) = pm.omega(c, r) = lower[k++];
  pm.sigma_proportional = sigma_prop;
  pm.sigma_additive = sigma_add;
  spec.theta_columns = {ka, v, ke};
  spec.theta_lower = {0, 0, 0};
  spec.theta_upper = {1e6, 1e6, 1e6};
  spec.omega_block = true;
  return spec;
}

Predictor theo_predictor() {
  return Predictor(read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/theo.csv",
                                two_compartment()),
                   ModelKind::TwoCompartment);
}

void expect_within_5_percent(const CovarianceStep& c, const std::vector<double>& nonmem) {
  ASSERT_TRUE(c.ok) << c.message;
  ASSERT_EQ(c.se.size(), static_cast<Eigen::Index>(nonmem.size()));
  for (std::size_t i = 0; i < nonmem.size(); ++i)
    EXPECT_NEAR(c.se(static_cast<Eigen::Index>(i)), nonmem[i], 0.05 * nonmem[i])
        << "parameter " << i;
}

// THETA (KA, V, K), OMEGA (lower triangle by rows), SIGMA (proportional, additive).
TEST(CovarianceStep, TheophFoceiSandwichAtNonmemsEstimates) {
  const Predictor p = theo_predictor();
  EstimationOptions o;
  o.method = EstimationMethod::Focei;
  const double theta[3] = {1.49072, 32.4470, 0.0872901};
  const double omega[6] = {0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334};
  expect_within_5_percent(
      covariance_step(p, theo_at(theta, omega, 0.0170386, 0.0828440), o, CovarianceKind::Sandwich),
      {0.300784, 1.66399, 0.00432513, 0.221981, 0.0359561, 0.00854021, 0.0219563, 0.00763049,
       0.0201151, 0.0118470, 0.114348});
}

// NONMEM 7.4.1 THEO-FO.ext: the FO sandwich at its final FO estimates.
TEST(CovarianceStep, TheophFoSandwichAtNonmemsEstimates) {
  const Predictor p = theo_predictor();
  EstimationOptions o;
  o.method = EstimationMethod::Fo;
  const double theta[3] = {3.16934, 38.2517, 0.105012};
  const double omega[6] = {1.19814, 0.137481, 0.0313482, 0.370014, 0.0433918, 0.250550};
  expect_within_5_percent(
      covariance_step(p, theo_at(theta, omega, 0.0120776, 0.0542660), o, CovarianceKind::Sandwich),
      {0.641070, 1.68494, 0.0230741, 0.420537, 0.0821697, 0.0198073, 0.340213, 0.0230411, 0.289404,
       0.00357702, 0.0320735});
}

}  // namespace
}  // namespace pkscan
