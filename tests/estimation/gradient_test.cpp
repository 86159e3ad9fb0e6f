// population_gradient (pkscan/estimation.hpp): the FOCEI and FOCE objectives' analytic gradients
// against central differences of the objective itself (the EBEs found again at every point,
// inner tolerance 1e-10), on the THEO model at NONMEM's initial and final estimates
// (tests/data/estimation/README.md) and on a model with a THETA that has no ETA, a diagonal
// OMEGA and one SIGMA; the subjects' rows add up to the gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "estimation/theo_model.hpp"

namespace pkscan {
namespace {

using test::theo_at;
using test::theo_predictor;

// Moves parameter p of `m` by `by` (an OMEGA element moves with its mirror).
void move(PopulationModel& m, const EstimatedParameter& p, double by) {
  switch (p.kind) {
    case EstimatedParameter::Kind::Theta:
      m.theta_row[static_cast<std::size_t>(p.index)] += by;
      break;
    case EstimatedParameter::Kind::Effect:
      m.effects[static_cast<std::size_t>(p.index)].coefficient += by;
      break;
    case EstimatedParameter::Kind::Omega:
      m.omega(p.index, p.index2) += by;
      if (p.index != p.index2) m.omega(p.index2, p.index) += by;
      break;
    case EstimatedParameter::Kind::Sigma:
      (p.index == 0 ? m.sigma_proportional : m.sigma_additive) += by;
      break;
  }
}

// The gradient against central differences of the objective (relative step 1e-4; an OMEGA
// off-diagonal element 1e-4 sqrt(OMEGA_ii OMEGA_jj)). At THETA0 the two agree to 1e-7 relative
// (1.7e-7 at worst; the test prints it); at the optimum, where the components are about 1e-3, to
// the floor below.
void expect_gradient(const Predictor& p, const PopulationFitSpec& spec, double relative,
                     EstimationMethod method = EstimationMethod::Focei) {
  EstimationOptions o;
  o.method = method;
  const PopulationGradient g = population_gradient(p, spec, o);
  ASSERT_TRUE(g.ok);
  ASSERT_EQ(g.gradient.size(), static_cast<Eigen::Index>(g.parameters.size()));
  // The subjects' rows add up to the gradient (summed in subject order).
  Eigen::VectorXd sum = Eigen::VectorXd::Zero(g.gradient.size());
  for (Eigen::Index s = 0; s < g.subjects.rows(); ++s) sum += g.subjects.row(s).transpose();
  EXPECT_EQ(sum, g.gradient);
  double worst = 0.0, worst_abs = 0.0;  // the largest differences, printed
  for (std::size_t i = 0; i < g.parameters.size(); ++i) {
    const EstimatedParameter& par = g.parameters[i];
    double h = 1e-4 * std::max(std::abs(par.value), 1e-2);
    if (par.kind == EstimatedParameter::Kind::Omega && par.index != par.index2)
      h = 1e-4 * std::sqrt(spec.initial.omega(par.index, par.index) *
                           spec.initial.omega(par.index2, par.index2));
    PopulationModel up = spec.initial, down = spec.initial;
    move(up, par, h);
    move(down, par, -h);
    const double fd =
        (population_objective(p, up, o).ofv - population_objective(p, down, o).ofv) / (2 * h);
    const double got = g.gradient(static_cast<Eigen::Index>(i));
    // Relative to the component, with a floor of 1e-9 in the OFV over the step (the
    // differences' own rounding: the OFV is found to about 1e-11).
    EXPECT_NEAR(got, fd, relative * std::abs(fd) + 1e-9 / h)
        << "parameter " << i << " analytic " << got << " differences " << fd;
    if (fd != 0.0) worst = std::max(worst, std::abs(got - fd) / std::abs(fd));
    worst_abs = std::max(worst_abs, std::abs(got - fd));
  }
  std::printf("%s: largest difference from central differences %.3g relative, %.3g absolute\n",
              to_string(method).c_str(), worst, worst_abs);
}

TEST(PopulationGradient, TheophFoceiAtNonmemsInitialEstimates) {
  const double theta[3] = {2, 50, 0.1};
  const double omega[6] = {0.2, 0.1, 0.2, 0.1, 0.1, 0.2};
  expect_gradient(theo_predictor(), theo_at(theta, omega, 0.1, 0.1), 1e-5);
}

TEST(PopulationGradient, TheophFoceiAtNonmemsFinalEstimates) {
  const double theta[3] = {1.49072, 32.4470, 0.0872901};
  const double omega[6] = {0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334};
  expect_gradient(theo_predictor(), theo_at(theta, omega, 0.0170386, 0.0828440), 1e-5);
}

// ke estimated without an ETA, a diagonal OMEGA on ka and v_central; SIGMA as given.
PopulationFitSpec theta_without_eta(double sigma_proportional, double sigma_additive) {
  const double theta[3] = {1.5, 32, 0.09};
  const double omega[6] = {0.4, 0, 0.02, 0, 0, 0.02};
  PopulationFitSpec spec = theo_at(theta, omega, sigma_proportional, sigma_additive);
  spec.initial.eta_columns.pop_back();
  spec.initial.omega = spec.initial.omega.topLeftCorner(2, 2).eval();
  spec.omega_block = false;
  return spec;
}

// Additive error only.
TEST(PopulationGradient, AThetaWithoutEtaAndADiagonalOmega) {
  expect_gradient(theo_predictor(), theta_without_eta(0.0, 0.5), 1e-5);
}

// The dataset's covariate `name`, one value per subject (its first record's).
std::vector<double> covariate(const Predictor& p, const std::string& name) {
  const auto& cols = p.dataset().covariate_columns;
  const std::size_t c =
      static_cast<std::size_t>(std::find(cols.begin(), cols.end(), name) - cols.begin());
  std::vector<double> v;
  for (const DatasetSubject& s : p.dataset().subjects)
    v.push_back(std::stod(s.records.front().covariates.at(c)));
  return v;
}

// Every form of covariate effect, each coefficient estimated: power (WT on V), exponential (WT
// on K), linear (WT on KA) and categorical (DOSE 4.4 mg/kg on K).
void expect_covariate_effects(EstimationMethod method) {
  const Predictor p = theo_predictor();
  const double theta[3] = {1.5, 32, 0.09};
  const double omega[6] = {0.4, 0.05, 0.02, 0.0, 0.01, 0.02};
  PopulationFitSpec spec = theo_at(theta, omega, 0.02, 0.08);
  const ModelInfo& m = test::two_compartment();
  const auto effect = [&](const char* parameter, const char* cov, EffectForm form, double b,
                          double reference_or_level) {
    ParameterEffect e;
    e.parameter = parameter_index(m, parameter);
    e.covariate = cov;
    e.form = form;
    e.coefficient = b;
    (form == EffectForm::Categorical ? e.level : e.reference) = reference_or_level;
    e.values = covariate(p, cov);
    spec.initial.effects.push_back(e);
    spec.effect_indices.push_back(static_cast<int>(spec.initial.effects.size()) - 1);
  };
  effect("v_central", "WT", EffectForm::Power, 0.8, 70);
  effect("ke", "WT", EffectForm::Exponential, 0.01, 70);
  effect("ka", "WT", EffectForm::Linear, 0.02, 70);
  effect("ke", "DOSE", EffectForm::Categorical, -0.2, 4.4);
  expect_gradient(p, spec, 1e-5, method);
}

TEST(PopulationGradient, CovariateEffects) { expect_covariate_effects(EstimationMethod::Focei); }

// FOCE: the effects also move the population prediction, and with it R0.
TEST(PopulationGradient, FoceCovariateEffects) { expect_covariate_effects(EstimationMethod::Foce); }

// FOCE: the residual variance held at the population prediction, which moves with THETA and
// SIGMA (both error terms estimated).
TEST(PopulationGradient, TheophFoceAtNonmemsInitialEstimates) {
  const double theta[3] = {2, 50, 0.1};
  const double omega[6] = {0.2, 0.1, 0.2, 0.1, 0.1, 0.2};
  expect_gradient(theo_predictor(), theo_at(theta, omega, 0.1, 0.1), 1e-5, EstimationMethod::Foce);
}

TEST(PopulationGradient, TheophFoceAtNonmemsFinalEstimates) {
  const double theta[3] = {1.49072, 32.4470, 0.0872901};
  const double omega[6] = {0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334};
  expect_gradient(theo_predictor(), theo_at(theta, omega, 0.0170386, 0.0828440), 1e-5,
                  EstimationMethod::Foce);
}

TEST(PopulationGradient, FoceWithAThetaWithoutEta) {
  expect_gradient(theo_predictor(), theta_without_eta(0.03, 0.5), 1e-5, EstimationMethod::Foce);
}

TEST(PopulationGradient, OnlyFoceAndFocei) {
  const double theta[3] = {2, 50, 0.1};
  const double omega[6] = {0.2, 0.1, 0.2, 0.1, 0.1, 0.2};
  for (EstimationMethod m : {EstimationMethod::Laplace, EstimationMethod::Fo}) {
    EstimationOptions o;
    o.method = m;
    EXPECT_THROW(population_gradient(theo_predictor(), theo_at(theta, omega, 0.1, 0.1), o),
                 InvalidArgument);
  }
}

}  // namespace
}  // namespace pkscan
