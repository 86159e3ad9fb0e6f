// Population diagnostics (pkscan/estimation.hpp, population_diagnostics) against an independent
// computation: the Theoph THEO model's predictions and dF/dETA in closed form (the
// one-compartment oral solution and its derivatives, written here), NONMEM's definitions of
// PRED, IPRED, RES, IRES, WRES, CWRES, CWRESI and IWRES formed from them with Eigen's own
// inverse square root, and the shrinkage from the EBEs by the textbook formula. The EBEs come
// from population_objective (tested against NONMEM's in objective_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

namespace pkscan {
namespace {

const ModelInfo& two_compartment() { return model_info(ModelKind::TwoCompartment); }

int column(const std::string& name) { return parameter_index(two_compartment(), name); }

// NONMEM's final FOCEI estimates of THEO (THEO-FOCEI.ext, tests/data/estimation/README.md).
PopulationModel theo_final() {
  PopulationModel m;
  for (const ParameterInfo& p : two_compartment().parameters)
    m.theta_row.push_back(p.default_value);
  m.theta_row[static_cast<std::size_t>(column("ka"))] = 1.49072;
  m.theta_row[static_cast<std::size_t>(column("v_central"))] = 32.4470;
  m.theta_row[static_cast<std::size_t>(column("ke"))] = 0.0872901;
  m.eta_columns = {column("ka"), column("v_central"), column("ke")};
  const double lower[6] = {0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334};
  m.omega.resize(3, 3);
  int i = 0;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c <= r; ++c) m.omega(r, c) = m.omega(c, r) = lower[i++];
  m.sigma_proportional = 0.0170386;
  m.sigma_additive = 0.0828440;
  return m;
}

// The dose of 320 in the depot, observed in the central compartment: F = D ka / (V (ka - k))
// (exp(-k t) - exp(-ka t)), and dF/dETA = P dF/dP for P = ka, V, k.
struct Closed {
  double f;
  Eigen::RowVector3d g;
};
Closed closed_form(double t, double ka, double v, double k) {
  const double d = 320.0, e = std::exp(-k * t) - std::exp(-ka * t), den = ka - k;
  const double f = d * ka / (v * den) * e;
  const double df_dka = d / v * (-k / (den * den) * e + ka * t * std::exp(-ka * t) / den);
  const double df_dv = -f / v;
  const double df_dk = d * ka / v * (e / (den * den) - t * std::exp(-k * t) / den);
  return {f, Eigen::RowVector3d(df_dka * ka, df_dv * v, df_dk * k)};
}

double sample_sd(const std::vector<double>& x) {
  double mean = 0.0;
  for (double v : x) mean += v / static_cast<double>(x.size());
  double ss = 0.0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

TEST(PopulationDiagnostics, TheophFoceiAgainstClosedForms) {
  const Predictor p(read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/theo.csv",
                                 two_compartment()),
                    ModelKind::TwoCompartment);
  const PopulationModel m = theo_final();
  EstimationOptions o;
  o.method = EstimationMethod::Focei;
  const PopulationObjective obj = population_objective(p, m, o);
  ASSERT_TRUE(obj.finite());
  const PopulationDiagnostics d = population_diagnostics(p, m, obj, o);
  ASSERT_EQ(d.subject.size(), 132u);
  ASSERT_EQ(d.eta_shrinkage.size(), 3u);

  const double ka = 1.49072, v = 32.4470, k = 0.0872901;
  std::size_t row = 0;
  std::vector<double> iwres;
  for (std::int64_t s = 0; s < p.subjects(); ++s) {
    const std::vector<double>& eta = obj.subjects[static_cast<std::size_t>(s)].eta;
    const Eigen::Vector3d e(eta[0], eta[1], eta[2]);
    std::vector<const DatasetRecord*> recs;
    for (const DatasetRecord& r : p.dataset().subjects[static_cast<std::size_t>(s)].records)
      if (r.evid == 0 && !r.mdv && !std::isnan(r.dv)) recs.push_back(&r);
    const Eigen::Index n = static_cast<Eigen::Index>(recs.size());
    Eigen::VectorXd dv(n), f0(n), f(n), r0(n), ri(n);
    Eigen::MatrixXd g0(n, 3), g(n, 3);
    for (Eigen::Index j = 0; j < n; ++j) {
      const double t = recs[static_cast<std::size_t>(j)]->time;
      dv(j) = recs[static_cast<std::size_t>(j)]->dv;
      const Closed pop = closed_form(t, ka, v, k);
      const Closed ind =
          closed_form(t, ka * std::exp(e(0)), v * std::exp(e(1)), k * std::exp(e(2)));
      f0(j) = pop.f;
      g0.row(j) = pop.g;
      f(j) = ind.f;
      g.row(j) = ind.g;
      r0(j) = m.sigma_additive + m.sigma_proportional * pop.f * pop.f;
      ri(j) = m.sigma_additive + m.sigma_proportional * ind.f * ind.f;
    }
    const auto inv_sqrt = [](const Eigen::MatrixXd& c) {
      return Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(c).operatorInverseSqrt();
    };
    const Eigen::VectorXd wres =
        inv_sqrt(g0 * m.omega * g0.transpose() + Eigen::MatrixXd(r0.asDiagonal())) * (dv - f0);
    const Eigen::VectorXd c = dv - f + g * e;
    const Eigen::VectorXd cwres =
        inv_sqrt(g * m.omega * g.transpose() + Eigen::MatrixXd(r0.asDiagonal())) * c;
    const Eigen::VectorXd cwresi =
        inv_sqrt(g * m.omega * g.transpose() + Eigen::MatrixXd(ri.asDiagonal())) * c;
    for (Eigen::Index j = 0; j < n; ++j, ++row) {
      SCOPED_TRACE("ID " + p.dataset().subjects[static_cast<std::size_t>(s)].id + " row " +
                   std::to_string(j));
      EXPECT_EQ(d.subject[row], s);
      EXPECT_EQ(d.line[row], recs[static_cast<std::size_t>(j)]->line);
      EXPECT_EQ(d.time[row], recs[static_cast<std::size_t>(j)]->time);
      EXPECT_EQ(d.dv[row], dv(j));
      // The predictions within 1e-12 relative (both exact; the closed form rounds
      // differently), the residuals and weighted residuals to 1e-9 absolute (weighted
      // residuals are of order 1).
      EXPECT_NEAR(d.pred[row], f0(j), 1e-12 * std::abs(f0(j)) + 1e-15);
      EXPECT_NEAR(d.ipred[row], f(j), 1e-12 * std::abs(f(j)) + 1e-15);
      EXPECT_NEAR(d.res[row], dv(j) - f0(j), 1e-9);
      EXPECT_NEAR(d.ires[row], dv(j) - f(j), 1e-9);
      EXPECT_NEAR(d.iwres[row], (dv(j) - f(j)) / std::sqrt(ri(j)), 1e-9);
      EXPECT_NEAR(d.wres[row], wres(j), 1e-9);
      EXPECT_NEAR(d.cwres[row], cwres(j), 1e-9);
      EXPECT_NEAR(d.cwresi[row], cwresi(j), 1e-9);
      iwres.push_back((dv(j) - f(j)) / std::sqrt(ri(j)));
    }
  }
  for (int kk = 0; kk < 3; ++kk) {
    std::vector<double> eta;
    for (const SubjectObjective& so : obj.subjects)
      eta.push_back(so.eta[static_cast<std::size_t>(kk)]);
    EXPECT_NEAR(d.eta_shrinkage[static_cast<std::size_t>(kk)],
                100.0 * (1.0 - sample_sd(eta) / std::sqrt(m.omega(kk, kk))), 1e-9);
  }
  EXPECT_NEAR(d.eps_shrinkage, 100.0 * (1.0 - sample_sd(iwres)), 1e-9);
}

// FO: the EBEs are 0, so IPRED is PRED, CWRES is WRES and every ETA has shrinkage 100%.
TEST(PopulationDiagnostics, FoHasNoConditionalEstimates) {
  const Predictor p(read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/theo.csv",
                                 two_compartment()),
                    ModelKind::TwoCompartment);
  const PopulationModel m = theo_final();
  EstimationOptions o;
  o.method = EstimationMethod::Fo;
  const PopulationObjective obj = population_objective(p, m, o);
  const PopulationDiagnostics d = population_diagnostics(p, m, obj, o);
  for (std::size_t i = 0; i < d.subject.size(); ++i) {
    EXPECT_EQ(d.ipred[i], d.pred[i]);
    EXPECT_EQ(d.cwres[i], d.wres[i]);
  }
  for (double s : d.eta_shrinkage) EXPECT_EQ(s, 100.0);
}

TEST(PopulationDiagnostics, RejectsAnObjectiveOfAnotherModel) {
  const Predictor p(read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/theo.csv",
                                 two_compartment()),
                    ModelKind::TwoCompartment);
  const PopulationModel m = theo_final();
  PopulationObjective obj = population_objective(p, m, EstimationOptions{});
  obj.subjects.pop_back();
  EXPECT_THROW(population_diagnostics(p, m, obj, EstimationOptions{}), InvalidArgument);
}

}  // namespace
}  // namespace pkscan
