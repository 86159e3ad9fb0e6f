// Population objectives (pkscan/estimation.hpp) against NONMEM's own published numbers at fixed
// parameters: Wang (2007) FO, FOCE and FOCEI objectives, FOCEI's per-subject OBJI and EBEs, and
// the Theoph "THEO" model's FO and FOCEI objectives at NONMEM's initial estimates and FOCEI EBEs
// at its final estimates. The data and the numbers, with their sources, are in
// tests/data/estimation/README.md; no expected value here was produced by pkscan.
#include <gtest/gtest.h>

#include <cmath>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace pkscan {
namespace {

std::string data_file(const std::string& name) {
  return std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/" + name;
}

const ModelInfo& two_compartment() { return model_info(ModelKind::TwoCompartment); }

int column(const std::string& name) {
  const int c = parameter_index(two_compartment(), name);
  EXPECT_GE(c, 0) << name;
  return c;
}

// The model's defaults with the given values.
std::vector<double> row(const std::vector<std::pair<std::string, double>>& values) {
  std::vector<double> r;
  for (const ParameterInfo& p : two_compartment().parameters) r.push_back(p.default_value);
  for (const auto& [name, v] : values) r[static_cast<std::size_t>(column(name))] = v;
  return r;
}

// Wang 2007: y = 10 exp(-k t), k = 0.5 exp(ETA), observed in the depot of two_compartment (the
// dose of 10 goes there, volume 1), so ka is k; ke and v_central play no part.
PopulationModel wang_model(bool proportional) {
  PopulationModel m;
  m.theta_row = row({{"ka", 0.5}, {"ke", 1.0}, {"v_central", 1.0}});
  m.eta_columns = {column("ka")};
  m.omega = Eigen::MatrixXd::Constant(1, 1, 0.04);
  (proportional ? m.sigma_proportional : m.sigma_additive) = 0.1;
  return m;
}

PopulationObjective wang(bool proportional, EstimationMethod method) {
  const Predictor p(read_dataset(data_file("wang2007.csv"), two_compartment()),
                    ModelKind::TwoCompartment);
  EstimationOptions o;
  o.method = method;
  return population_objective(p, wang_model(proportional), o);
}

void expect_converged(const PopulationObjective& r) {
  ASSERT_TRUE(r.finite());
  for (const SubjectObjective& s : r.subjects) {
    EXPECT_EQ(s.status, InnerStatus::Converged) << to_string(s.status);
    EXPECT_LE(s.gradient, 1e-10);
  }
}

// Wang (2007) Table 2, printed to 3 decimals: within half a unit of the last digit.
TEST(PopulationObjective, WangTable2) {
  struct Case {
    bool proportional;
    EstimationMethod method;
    double nonmem;
  };
  const Case cases[] = {
      {true, EstimationMethod::Fo, 39.213},    {true, EstimationMethod::Foce, 39.207},
      {true, EstimationMethod::Focei, 39.458}, {false, EstimationMethod::Fo, 0.026},
      {false, EstimationMethod::Foce, -2.059}, {false, EstimationMethod::Focei, -2.059},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.proportional ? "proportional " : "additive ") + to_string(c.method));
    const PopulationObjective r = wang(c.proportional, c.method);
    expect_converged(r);
    EXPECT_NEAR(r.ofv, c.nonmem, 5e-4);
  }
}

// FOCEI per subject: NONMEM's EBEs and OBJI (printed to 5-6 significant figures) within 1e-4,
// and the objective to NONMEM's precise value within 1e-4.
TEST(PopulationObjective, WangFoceiSubjects) {
  struct Case {
    bool proportional;
    double ofv;
    std::vector<double> eta, obji;
  };
  const Case cases[] = {
      {true,
       39.4575500857102,
       {0.071545, 0.0057045, 0.024947, 0.03195, -0.0047874, 0.0039789, -0.011804, 0.0058801,
        -0.0031367, -0.00066641},
       {5.20178, 3.77605, 3.72058, 3.79581, 3.84804, 3.77257, 3.92866, 3.76425, 3.83096, 3.81884}},
      {false,
       -2.05879522891223,
       {0.583231, -0.101647, 0.0538696, 0.113993, -0.18231, -0.11508, -0.235037, -0.100277,
        -0.169771, -0.150905},
       {11.96067, -1.19254, -2.78879, 1.77277, -2.04089, -2.61087, -1.27356, -2.26900, -2.24616,
        -1.37043}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.proportional ? "proportional" : "additive");
    const PopulationObjective r = wang(c.proportional, EstimationMethod::Focei);
    expect_converged(r);
    EXPECT_NEAR(r.ofv, c.ofv, 1e-4);
    ASSERT_EQ(r.subjects.size(), c.eta.size());
    for (std::size_t i = 0; i < c.eta.size(); ++i) {
      EXPECT_NEAR(r.subjects[i].eta[0], c.eta[i], 1e-4) << "subject " << i + 1;
      EXPECT_NEAR(r.subjects[i].obji, c.obji[i], 1e-4) << "subject " << i + 1;
      EXPECT_EQ(r.subjects[i].observations, 2);
    }
  }
}

// The THEO model: KA, V, K = THETA exp(ETA), OMEGA BLOCK(3), Y = F + F EPS1 + EPS2.
PopulationModel theo_model(double ka, double v, double k, const std::vector<double>& lower,
                           double sigma_prop, double sigma_add) {
  PopulationModel m;
  m.theta_row = row({{"ka", ka}, {"v_central", v}, {"ke", k}});
  m.eta_columns = {column("ka"), column("v_central"), column("ke")};
  m.omega.resize(3, 3);
  int i = 0;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c <= r; ++c)
      m.omega(r, c) = m.omega(c, r) = lower[static_cast<std::size_t>(i++)];
  m.sigma_proportional = sigma_prop;
  m.sigma_additive = sigma_add;
  return m;
}

Predictor theo_predictor() {
  return Predictor(read_dataset(data_file("theo.csv"), two_compartment()),
                   ModelKind::TwoCompartment);
}

// NONMEM 7.4.1's iteration-0 objectives (printed to 14 digits), within 1e-3.
TEST(PopulationObjective, TheophAtInitialEstimates) {
  const Predictor p = theo_predictor();
  const PopulationModel m = theo_model(2, 50, 0.1, {0.2, 0.1, 0.2, 0.1, 0.1, 0.2}, 0.1, 0.1);
  EstimationOptions o;
  o.method = EstimationMethod::Fo;
  const PopulationObjective fo = population_objective(p, m, o);
  expect_converged(fo);
  EXPECT_NEAR(fo.ofv, 141.30755264437002, 1e-3);
  o.method = EstimationMethod::Focei;
  const PopulationObjective focei = population_objective(p, m, o);
  expect_converged(focei);
  EXPECT_NEAR(focei.ofv, 192.65025555940014, 1e-3);
  o.method = EstimationMethod::Laplace;  // THEO-LAPLI.ext, iteration 0
  const PopulationObjective laplace = population_objective(p, m, o);
  expect_converged(laplace);
  EXPECT_NEAR(laplace.ofv, 194.10173581227173, 1e-3);
  EXPECT_EQ(focei.subjects.size(), 12u);
}

// At NONMEM's final FOCEI estimates (printed to 6 significant figures): the objective within
// 1e-3 of NONMEM's final one and the EBEs to the 3 significant figures NONMEM printed (half a
// unit of the last digit).
TEST(PopulationObjective, TheophFoceiAtFinalEstimates) {
  const Predictor p = theo_predictor();
  const PopulationModel m = theo_model(
      1.49072, 32.4470, 0.0872901,
      {0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334}, 0.0170386, 0.0828440);
  EstimationOptions o;
  o.method = EstimationMethod::Focei;
  const PopulationObjective r = population_objective(p, m, o);
  expect_converged(r);
  EXPECT_NEAR(r.ofv, 92.830869045516039, 1e-3);
  const double ebe[12][3] = {
      {-0.105, -0.193, -0.279},  {0.329, 0.0563, 0.0441},    {0.411, 0.0439, -0.0129},
      {-0.344, -0.0421, 0.0156}, {-0.0303, -0.109, -0.0957}, {-0.471, 0.138, 0.233},
      {-0.858, 0.00292, 0.146},  {-0.0682, 0.0708, 0.0792},  {1.33, 0.177, -0.0126},
      {-0.713, -0.215, -0.149},  {0.866, 0.176, 0.0778},     {-0.496, -0.135, -0.0292}};
  ASSERT_EQ(r.subjects.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i)
    for (std::size_t k = 0; k < 3; ++k) {
      const double v = ebe[i][k];
      const double half_unit = 0.5 * std::pow(10.0, std::floor(std::log10(std::abs(v))) - 2);
      EXPECT_NEAR(r.subjects[i].eta[k], v, half_unit * (1 + 1e-9))
          << "ID " << i + 1 << " ETA" << k + 1;
    }
}

TEST(PopulationObjective, RejectsAnOmegaThatIsNotPositiveDefinite) {
  const Predictor p = theo_predictor();
  PopulationModel m = theo_model(2, 50, 0.1, {0.2, 0.3, 0.2, 0.1, 0.1, 0.2}, 0.1, 0.1);
  EXPECT_THROW(population_objective(p, m, EstimationOptions{}), InvalidArgument);
  m.omega(0, 1) = 0.05;  // not symmetric
  EXPECT_THROW(population_objective(p, m, EstimationOptions{}), InvalidArgument);
}

// 48 subjects (THEO's 12 four times over, so that more than one thread runs): the same bits for
// any thread count, and a warm start from the EBEs finds the same EBEs.
TEST(PopulationObjective, SameBitsForAnyThreadCountAndWarmStarts) {
  ::pkscan::test::ScratchDir dir;
  const std::string text = ::pkscan::test::read_text(data_file("theo.csv"));
  const std::size_t header = text.find('\n') + 1;
  std::string csv = text.substr(0, header);
  for (int copy = 0; copy < 4; ++copy) {
    std::size_t b = header;
    while (b < text.size()) {
      const std::size_t e = text.find('\n', b);
      const std::string line = text.substr(b, e - b);
      const std::size_t comma = line.find(',');
      csv +=
          std::to_string(copy * 100 + std::stoi(line.substr(0, comma))) + line.substr(comma) + "\n";
      b = e + 1;
    }
  }
  ::pkscan::test::write_text(dir.file("theo48.csv"), csv);
  const Predictor p(read_dataset(dir.file("theo48.csv"), two_compartment()),
                    ModelKind::TwoCompartment);
  ASSERT_EQ(p.subjects(), 48);
  const PopulationModel m = theo_model(2, 50, 0.1, {0.2, 0.1, 0.2, 0.1, 0.1, 0.2}, 0.1, 0.1);
  EstimationOptions o;
  o.threads = 1;
  const PopulationObjective one = population_objective(p, m, o);
  EXPECT_NEAR(one.ofv, 4 * 192.65025555940014, 4e-3);
  o.threads = 3;
  EXPECT_EQ(population_objective(p, m, o).ofv, one.ofv);
  const PopulationObjective warm = population_objective(p, m, o, &one);
  EXPECT_NEAR(warm.ofv, one.ofv, 1e-9);
  for (std::size_t s = 0; s < 48; ++s) {
    EXPECT_EQ(warm.subjects[s].iterations, 0);  // already converged there
    for (std::size_t k = 0; k < 3; ++k)
      EXPECT_NEAR(warm.subjects[s].eta[k], one.subjects[s].eta[k], 1e-9);
  }
}

}  // namespace
}  // namespace pkscan
