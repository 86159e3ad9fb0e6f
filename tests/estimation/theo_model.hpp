#pragma once
// The Theoph "THEO" model of NONMEM's published runs (tests/data/estimation/README.md) for the
// estimation tests: `two_compartment` with KA, V, K = THETA exp(ETA), OMEGA BLOCK(3), Y = F + F
// EPS1 + EPS2, on theo.csv.
#include <pkscan/pkscan.hpp>
#include <string>

namespace pkscan::test {

inline const ModelInfo& two_compartment() { return model_info(ModelKind::TwoCompartment); }

inline Predictor theo_predictor() {
  return Predictor(read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/theo.csv",
                                two_compartment()),
                   ModelKind::TwoCompartment);
}

// The model at THETA (KA, V, K), OMEGA's lower triangle by rows and SIGMA (proportional,
// additive variances), every THETA estimated within (0, 1e6), OMEGA a block.
inline PopulationFitSpec theo_at(const double theta[3], const double lower[6], double sigma_prop,
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

// NONMEM's initial estimates: THETA (2, 50, 0.1), OMEGA [[.2,.1,.1],[.1,.2,.1],[.1,.1,.2]],
// SIGMA (0.1, 0.1).
inline PopulationFitSpec theo_initial() {
  const double theta[3] = {2, 50, 0.1};
  const double omega[6] = {0.2, 0.1, 0.2, 0.1, 0.1, 0.2};
  return theo_at(theta, omega, 0.1, 0.1);
}

}  // namespace pkscan::test
