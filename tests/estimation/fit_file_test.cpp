// `pkscan fit FILE.yaml` (population fit files, max_evaluations: 0) run in-process, against
// NONMEM's published objectives and EBEs (tests/data/estimation/README.md): the Theoph THEO
// model's FO and FOCEI objectives at NONMEM's initial estimates and FOCEI EBEs at its final
// estimates, Wang (2007) FO/FOCE/FOCEI; and bad input (exit status 2, one line, nothing written).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "cli/plot_test_support.hpp"
#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

const std::string kData = std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/";
const std::string kExample = std::string(PKSCAN_SOURCE_DIR) + "/config/examples/estimation/";

// Replaces the first `from` in `text` by `to` (which must be there).
std::string replace(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The THEO model's fit file with its THETA, OMEGA, SIGMA, method; output in `dir`.
std::string theo_file(const TempDir& dir, const std::string& method, const std::string& theta,
                      const std::string& omega, const std::string& error) {
  return "model: two_compartment\n"
         "dataset: " +
         kData + "theo.csv\n" + "theta:\n" + theta + "iiv: {block: [ka, v_central, ke], omega: [" +
         omega + "]}\n" + "error: {" + error + ", as: variance}\n" +
         "estimation: {method: " + method + ", max_evaluations: 0}\n" +
         "output: {path: " + dir.file("fit.csv") + "}\n";
}

const std::string kTheoInitial =
    "  ka: {init: 2, lower: 0, upper: 1000000}\n"
    "  v_central: {init: 50, lower: 0, upper: 1000000}\n"
    "  ke: {init: 0.1, lower: 0, upper: 1000000}\n";

// `name` -> estimate of the estimates file.
std::map<std::string, double> estimates(const std::string& path) {
  std::map<std::string, double> out;
  const std::vector<std::string> lines = split_lines(read_text(path));
  EXPECT_EQ(lines.at(0), "name,estimate,se,rse,fixed,cv,shrinkage");
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = split_csv(lines[i]);
    out[f.at(0)] = std::stod(f.at(1));
  }
  return out;
}

// The subjects file's rows (header first).
std::vector<std::vector<std::string>> subjects(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : split_lines(read_text(path))) rows.push_back(split_csv(line));
  return rows;
}

double run_ofv(const std::string& file_text, const TempDir& dir) {
  const std::string fit = dir.file("fit.yaml");
  write_text(fit, file_text);
  const CliResult r = run_pkscan({"fit", fit});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
  EXPECT_NE(r.out.find("OFV "), std::string::npos) << describe(r);
  return estimates(dir.file("fit.csv")).at("ofv");
}

// NONMEM 7.4.1's iteration-0 objectives of THEO, within 1e-3.
TEST(FitFile, TheophObjectivesAtTheInitialEstimates) {
  const std::string omega = "0.2, 0.1, 0.2, 0.1, 0.1, 0.2";
  const std::string error = "proportional: 0.1, additive: 0.1";
  {
    TempDir dir;
    EXPECT_NEAR(run_ofv(theo_file(dir, "fo", kTheoInitial, omega, error), dir), 141.30755264437002,
                1e-3);
  }
  {
    // NONMEM's THEO-LAPLI.ext: the iteration-0 objective and the .ext title of the method.
    TempDir dir;
    EXPECT_NEAR(run_ofv(theo_file(dir, "laplace", kTheoInitial, omega, error), dir),
                194.10173581227173, 1e-3);
    EXPECT_EQ(split_lines(read_text(dir.file("fit.ext"))).at(0).substr(0, 67),
              "TABLE NO.     1: Laplacian Conditional Estimation with Interaction:");
  }
  TempDir dir;
  EXPECT_NEAR(run_ofv(theo_file(dir, "focei", kTheoInitial, omega, error), dir), 192.65025555940014,
              1e-3);
  const std::map<std::string, double> e = estimates(dir.file("fit.csv"));
  EXPECT_EQ(e.at("theta.ka"), 2.0);
  EXPECT_EQ(e.at("omega.ke.v_central"), 0.1);
  EXPECT_EQ(e.at("sigma.additive"), 0.1);
  const auto rows = subjects(dir.file("fit.subjects.csv"));
  ASSERT_EQ(rows.size(), 13u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"id", "eta_ka", "eta_v_central", "eta_ke", "obji",
                                               "observations", "status"}));
  double sum = 0.0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][0], std::to_string(i));
    EXPECT_EQ(rows[i][5], "11");
    EXPECT_EQ(rows[i][6], "converged");
    sum += std::stod(rows[i][4]);
  }
  EXPECT_NEAR(sum, 192.65025555940014, 1e-3);  // OBJI add up to the OFV
}

// At NONMEM's final FOCEI estimates: its final objective within 1e-3 and its EBEs to the 3
// significant figures it printed.
TEST(FitFile, TheophFoceiEbesAtNonmemsFinalEstimates) {
  TempDir dir;
  const double ofv =
      run_ofv(theo_file(dir, "focei", "  ka: 1.49072\n  v_central: 32.4470\n  ke: 0.0872901\n",
                        "0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334",
                        "proportional: 0.0170386, additive: 0.0828440"),
              dir);
  EXPECT_NEAR(ofv, 92.830869045516039, 1e-3);
  const double ebe[12][3] = {
      {-0.105, -0.193, -0.279},  {0.329, 0.0563, 0.0441},    {0.411, 0.0439, -0.0129},
      {-0.344, -0.0421, 0.0156}, {-0.0303, -0.109, -0.0957}, {-0.471, 0.138, 0.233},
      {-0.858, 0.00292, 0.146},  {-0.0682, 0.0708, 0.0792},  {1.33, 0.177, -0.0126},
      {-0.713, -0.215, -0.149},  {0.866, 0.176, 0.0778},     {-0.496, -0.135, -0.0292}};
  const auto rows = subjects(dir.file("fit.subjects.csv"));
  ASSERT_EQ(rows.size(), 13u);
  for (std::size_t i = 0; i < 12; ++i)
    for (std::size_t k = 0; k < 3; ++k) {
      const double v = ebe[i][k];
      const double half_unit = 0.5 * std::pow(10.0, std::floor(std::log10(std::abs(v))) - 2);
      EXPECT_NEAR(std::stod(rows[i + 1][k + 1]), v, half_unit * (1 + 1e-9))
          << "ID " << i + 1 << " ETA" << k + 1;
    }
}

// Wang (2007): y = 10 exp(-k t), observed in the depot of two_compartment (CMT 1, volume 1), so
// k is ka; ke and v_central are fixed and play no part.
std::string wang_file(const TempDir& dir, const std::string& method, const std::string& error) {
  return "model: two_compartment\n"
         "dataset: " +
         kData + "wang2007.csv\n" +
         "theta:\n  ka: 0.5\n  ke: {init: 1, fixed: true}\n  v_central: {init: 1, fixed: true}\n"
         "iiv: {diagonal: [ka], omega: [0.04]}\n"
         "error: {" +
         error + ": 0.1, as: variance}\n" + "estimation: {method: " + method +
         ", max_evaluations: 0}\n" + "output: {path: " + dir.file("fit.csv") + "}\n";
}

// Table 2 of Wang (2007), printed to 3 decimals: within half a unit of the last digit; FOCEI's
// EBEs and OBJI (RxODE's record of NONMEM's) within 1e-4.
TEST(FitFile, WangObjectivesEbesAndObji) {
  const std::map<std::string, std::map<std::string, double>> table = {
      {"proportional", {{"fo", 39.213}, {"foce", 39.207}, {"focei", 39.458}}},
      {"additive", {{"fo", 0.026}, {"foce", -2.059}, {"focei", -2.059}}}};
  for (const auto& [error, methods] : table)
    for (const auto& [method, nonmem] : methods) {
      SCOPED_TRACE(error + " " + method);
      TempDir dir;
      EXPECT_NEAR(run_ofv(wang_file(dir, method, error), dir), nonmem, 5e-4);
    }
  const std::vector<double> eta = {0.071545,  0.0057045, 0.024947,  0.03195,    -0.0047874,
                                   0.0039789, -0.011804, 0.0058801, -0.0031367, -0.00066641};
  const std::vector<double> obji = {5.20178, 3.77605, 3.72058, 3.79581, 3.84804,
                                    3.77257, 3.92866, 3.76425, 3.83096, 3.81884};
  TempDir dir;
  EXPECT_NEAR(run_ofv(wang_file(dir, "focei", "proportional"), dir), 39.4575500857102, 1e-4);
  const auto rows = subjects(dir.file("fit.subjects.csv"));
  ASSERT_EQ(rows.size(), 11u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"id", "eta_ka", "obji", "observations", "status"}));
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_NEAR(std::stod(rows[i + 1][1]), eta[i], 1e-4) << "subject " << i + 1;
    EXPECT_NEAR(std::stod(rows[i + 1][2]), obji[i], 1e-4) << "subject " << i + 1;
  }
}

// The documented example (config/examples/estimation/theo.yaml) runs and gives NONMEM's FOCEI
// objective at the initial estimates.
TEST(FitFile, TheExampleRuns) {
  TempDir dir;
  std::string text = read_text(kExample + "theo.yaml");
  text = replace(text, "dataset: theo.csv", "dataset: " + kExample + "theo.csv");
  text = replace(text, "path: theo_fit.csv", "path: " + dir.file("fit.csv"));
  EXPECT_NEAR(run_ofv(text, dir), 192.65025555940014, 1e-3);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"fit.csv", "fit.ext", "fit.subjects.csv",
                                                   "fit.table.csv", "fit.yaml"}));
}

// The .ext table in NONMEM's format: the title and header lines and the iteration-0 row of
// NONMEM 7.4.1's THEO-FOCEI.ext (asancpt/nmw-nonmem, tests/data/estimation/README.md) for the same
// fit at its initial estimates, character for character up to the objective (NONMEM's own
// objective differs from pkscan's after the 9th digit), then the final row and the fixed flags.
TEST(FitFile, TheExtTableIsNonmems) {
  TempDir dir;
  std::string text = read_text(kExample + "theo.yaml");
  text = replace(text, "dataset: theo.csv", "dataset: " + kExample + "theo.csv");
  text = replace(text, "path: theo_fit.csv", "path: " + dir.file("fit.csv"));
  run_ofv(text, dir);
  const std::vector<std::string> ext = split_lines(read_text(dir.file("fit.ext")));
  ASSERT_EQ(ext.size(), 6u);
  EXPECT_EQ(ext[0],
            "TABLE NO.     1: First Order Conditional Estimation with Interaction: Goal "
            "Function=MINIMUM VALUE OF OBJECTIVE FUNCTION: Problem=1 Subproblem=0 "
            "Superproblem1=0 Iteration1=0 Superproblem2=0 Iteration2=0");
  EXPECT_EQ(ext[1],
            " ITERATION    THETA1       THETA2       THETA3       SIGMA(1,1)   SIGMA(2,1)   "
            "SIGMA(2,2)   OMEGA(1,1)   OMEGA(2,1)   OMEGA(2,2)   OMEGA(3,1)   OMEGA(3,2)   "
            "OMEGA(3,3)   OBJ");
  const std::string nonmem_row0 =
      "            0  2.00000E+00  5.00000E+01  1.00000E-01  1.00000E-01  0.00000E+00  "
      "1.00000E-01  2.00000E-01  1.00000E-01  2.00000E-01  1.00000E-01  1.00000E-01  "
      "2.00000E-01    192.65025555940014";
  const std::size_t obj = nonmem_row0.size() - 22;  // the objective's field
  EXPECT_EQ(ext[2].substr(0, obj), nonmem_row0.substr(0, obj));
  EXPECT_NEAR(std::stod(ext[2].substr(obj)), 192.65025555940014, 1e-3);
  EXPECT_EQ(ext[3].substr(0, 13), "  -1000000000");
  EXPECT_EQ(ext[3].substr(13), ext[2].substr(13));
  // Fixed flags: SIGMA(2,1) is not a parameter (NONMEM: 1).
  EXPECT_EQ(ext[4].substr(0, 13), "  -1000000004");  // SDs and correlations
  EXPECT_EQ(ext[5],
            "  -1000000006  0.00000E+00  0.00000E+00  0.00000E+00  0.00000E+00  1.00000E+00  "
            "0.00000E+00  0.00000E+00  0.00000E+00  0.00000E+00  0.00000E+00  0.00000E+00  "
            "0.00000E+00    0.0000000000000000");
}

// `pkscan plot` of the fit's table: the goodness-of-fit plots; a table that is cut short is bad
// input (exit status 2).
TEST(FitFile, PlotDrawsTheTable) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  std::string text = read_text(kExample + "theo.yaml");
  text = replace(text, "dataset: theo.csv", "dataset: " + kExample + "theo.csv");
  text = replace(text, "path: theo_fit.csv", "path: " + dir.file("fit.csv"));
  run_ofv(text, dir);
  expect_png(dir, {dir.file("fit.table.csv"), "-o", dir.file("gof.png")}, dir.file("gof.png"), 800,
             500, "goodness of fit of 132 observations");
  const std::vector<std::string> lines = split_lines(read_text(dir.file("fit.table.csv")));
  fs::remove(dir.file("gof.png"));
  write_text(dir.file("cut.table.csv"), lines.at(0) + "\n" + lines.at(1).substr(0, 20) + "\n");
  expect_error(dir, {dir.file("cut.table.csv"), "-o", dir.file("cut.png")}, 2,
               "but a fit table has at least 12");
}

const std::string kEffect = "covariates: [{parameter: v_central, covariate: WT, ";

// A covariate effect (WT on V, power 1, fixed) in the fit file: its row in the estimates file,
// its THETA column in the .ext table, and the predictions of the table against the closed form
// with V_i = THETA_V (WT_i / 70).
TEST(FitFile, ACovariateEffect) {
  TempDir dir;
  const std::string omega = "0.2, 0.1, 0.2, 0.1, 0.1, 0.2";
  std::string text =
      theo_file(dir, "focei", kTheoInitial, omega, "proportional: 0.1, additive: 0.1");
  text = replace(text, "iiv:",
                 kEffect +
                     "type: power, coefficient: {init: 1, fixed: true}, "
                     "reference: 70}]\niiv:");
  run_ofv(text, dir);
  const std::vector<std::string> est = split_lines(read_text(dir.file("fit.csv")));
  EXPECT_EQ(est.at(4), "effect.v_central.WT,1,,,true,,");
  const std::vector<std::string> ext = split_lines(read_text(dir.file("fit.ext")));
  EXPECT_EQ(ext.at(1).substr(0, 66),
            " ITERATION    THETA1       THETA2       THETA3       THETA4       ");
  const std::vector<std::string> table = split_lines(read_text(dir.file("fit.table.csv")));
  const std::vector<std::string> data = split_lines(read_text(kData + "theo.csv"));
  // ID 1 (WT 79.6), its observation at TIME 0.25 (the table's second row; data line 4).
  const std::vector<std::string> row = split_csv(table.at(2));
  ASSERT_EQ(row.at(1), "4");
  EXPECT_EQ(split_csv(data.at(3)).at(7), "79.6");
  const double v = 50 * 79.6 / 70, t = 0.25, ka = 2, k = 0.1;
  const double pred = 320 / v * ka / (ka - k) * (std::exp(-k * t) - std::exp(-ka * t));
  EXPECT_NEAR(std::stod(row.at(4)), pred, 1e-12 * pred);
}

// Bad input: exit status 2, one line on stderr naming the problem, nothing written.
TEST(FitFile, BadInputWritesNothing) {
  const std::string omega = "0.2, 0.1, 0.2, 0.1, 0.1, 0.2";
  const std::string error = "proportional: 0.1, additive: 0.1";
  struct Case {
    std::string what, from, to, message;
  };
  const std::vector<Case> cases = {
      {"omega not positive definite", "omega: [0.2, 0.1, 0.2,", "omega: [0.2, 0.3, 0.2,",
       "not positive definite"},
      {"unknown method", "method: focei", "method: saem", "must be fo, foce, focei or laplace"},
      {"estimation", "max_evaluations: 0", "max_evaluations: -1", "max_evaluations"},
      {"covariance", "max_evaluations: 0", "max_evaluations: 0, covariance: hessian",
       "must be sandwich, r, s or none"},
      // Proportional error only: the predictions at TIME 0 are 0, so R = 0 there.
      {"objective not finite", "proportional: 0.1, additive: 0.1", "proportional: 0.1",
       "objective is not finite at the initial estimates"},
      {"unknown parameter", "  ke: {init", "  kx: {init", "not a parameter of model"},
      {"eta without theta", "iiv: {block: [ka, v_central, ke]", "iiv: {block: [ka, v_central, cl]",
       "not in theta"},
      {"omega size", "omega: [0.2, 0.1, 0.2, 0.1, 0.1, 0.2]", "omega: [0.2, 0.1, 0.2]",
       "must be a list of 6"},
      {"init out of bounds", "ka: {init: 2, lower: 0,", "ka: {init: -2, lower: 0,",
       "strictly between"},
      {"effect type", "iiv:", kEffect + "type: cubic, coefficient: 1, reference: 70}]\niiv:",
       "must be power, exponential, linear or categorical"},
      {"effect covariate", "iiv:",
       "covariates: [{parameter: v_central, covariate: AGE, type: power, coefficient: 1, "
       "reference: 70}]\niiv:",
       "\"AGE\" is not a column of the dataset"},
      {"effect parameter", "iiv:",
       "covariates: [{parameter: cl, covariate: WT, type: power, coefficient: 1, reference: "
       "70}]\niiv:",
       "is not in theta"},
      {"categorical without level",
       "iiv:", kEffect + "type: categorical, coefficient: 1, reference: 70}]\niiv:", "level"},
      {"effect factor not > 0", "iiv:",
       kEffect + "type: linear, coefficient: -1, reference: 70}]\niiv:", "must be finite and > 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    const std::string fit = dir.file("fit.yaml");
    write_text(fit, replace(theo_file(dir, "focei", kTheoInitial, omega, error), c.from, c.to));
    const CliResult r = run_pkscan({"fit", fit});
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << describe(r);
    EXPECT_EQ(dir.names(), std::vector<std::string>{"fit.yaml"}) << "nothing may be written";
  }
  // The per-subject fit's options do not go with a fit file.
  TempDir dir;
  const std::string fit = dir.file("fit.yaml");
  write_text(fit, theo_file(dir, "focei", kTheoInitial, omega, error));
  const CliResult r = run_pkscan({"fit", fit, "--estimate", "ka"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("only --threads and --quiet"), std::string::npos) << describe(r);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"fit.yaml"});
}

// The THEO model fitted by FOCEI from NONMEM's initial estimates (max_evaluations left at its
// default): NONMEM 7.4.1's final objective 92.830869045516 within [-0.05, +0.001] (lower is
// allowed: NONMEM stops at 3 significant digits), THETA within 1%.
TEST(FitFile, TheophFoceiFit) {
  TempDir dir;
  std::string text = theo_file(dir, "focei", kTheoInitial, "0.2, 0.1, 0.2, 0.1, 0.1, 0.2",
                               "proportional: 0.1, additive: 0.1");
  text = replace(text, ", max_evaluations: 0}", "}");
  const double ofv = run_ofv(text, dir);
  EXPECT_GE(ofv, 92.830869045516039 - 0.05);
  EXPECT_LE(ofv, 92.830869045516039 + 0.001);
  const std::map<std::string, double> e = estimates(dir.file("fit.csv"));
  EXPECT_NEAR(e.at("theta.ka"), 1.49072, 0.01 * 1.49072);
  EXPECT_NEAR(e.at("theta.v_central"), 32.4470, 0.01 * 32.4470);
  EXPECT_NEAR(e.at("theta.ke"), 0.0872901, 0.01 * 0.0872901);
  EXPECT_NEAR(e.at("omega.ka.ka"), 0.434717, 0.01 * 0.434717);
  EXPECT_NEAR(e.at("sigma.additive"), 0.0828440, 0.05 * 0.0828440);
}

// A fit that runs out of evaluations: exit status 1, its last iterate written whole; fixed
// THETAs stay where they are.
TEST(FitFile, AFitThatDoesNotConvergeExitsWith1) {
  TempDir dir;
  std::string text = theo_file(dir, "focei", kTheoInitial, "0.2, 0.1, 0.2, 0.1, 0.1, 0.2",
                               "proportional: 0.1, additive: 0.1");
  text = replace(text, "max_evaluations: 0", "max_evaluations: 60");
  text = replace(text, "ke: {init: 0.1, lower: 0, upper: 1000000}", "ke: {init: 0.1, fixed: true}");
  const std::string fit = dir.file("fit.yaml");
  write_text(fit, text);
  const CliResult r = run_pkscan({"fit", fit, "-q"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_NE(r.err.find("did not converge"), std::string::npos) << describe(r);
  const std::map<std::string, double> e = estimates(dir.file("fit.csv"));
  EXPECT_EQ(e.at("theta.ke"), 0.1);
  EXPECT_LT(e.at("ofv"), 192.65025555940014);
  EXPECT_EQ(subjects(dir.file("fit.subjects.csv")).size(), 13u);
}

// The covariance step at NONMEM's final FOCEI estimates (max_evaluations: 0): the standard
// errors NONMEM printed there (THEO-FOCEI.ext) within 5%, and RSE = 100 SE / estimate.
TEST(FitFile, TheophCovarianceStepAtNonmemsFinalEstimates) {
  TempDir dir;
  std::string text = theo_file(dir, "focei",
                               "  ka: {init: 1.49072, lower: 0}\n  v_central: {init: 32.4470, "
                               "lower: 0}\n  ke: {init: 0.0872901, lower: 0}\n",
                               "0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334",
                               "proportional: 0.0170386, additive: 0.0828440");
  text = replace(text, "max_evaluations: 0", "max_evaluations: 0, covariance: sandwich");
  run_ofv(text, dir);
  const std::map<std::string, double> nonmem = {{"theta.ka", 0.300784},
                                                {"theta.v_central", 1.66399},
                                                {"theta.ke", 0.00432513},
                                                {"omega.ka.ka", 0.221981},
                                                {"omega.v_central.ka", 0.0359561},
                                                {"omega.v_central.v_central", 0.00854021},
                                                {"omega.ke.ka", 0.0219563},
                                                {"omega.ke.v_central", 0.00763049},
                                                {"omega.ke.ke", 0.0201151},
                                                {"sigma.proportional", 0.0118470},
                                                {"sigma.additive", 0.114348}};
  const std::vector<std::string> lines = split_lines(read_text(dir.file("fit.csv")));
  std::size_t checked = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = split_csv(lines[i]);
    const auto it = nonmem.find(f.at(0));
    if (it == nonmem.end()) continue;
    const double estimate = std::stod(f.at(1)), se = std::stod(f.at(2)), rse = std::stod(f.at(3));
    EXPECT_NEAR(se, it->second, 0.05 * it->second) << f[0];
    EXPECT_NEAR(rse, 100 * se / std::abs(estimate), 1e-9 * rse) << f[0];
    ++checked;
  }
  EXPECT_EQ(checked, nonmem.size());
}

// The covariance step where R is not positive definite (at NONMEM's initial estimates, far from
// the optimum, the Hessian of the objective is indefinite): exit status 1, one line that says
// so, and the four files written whole with the estimates and no standard errors.
TEST(FitFile, ACovarianceStepWhoseRIsNotPositiveDefiniteExitsWith1) {
  TempDir dir;
  std::string text = theo_file(dir, "focei", kTheoInitial, "0.2, 0.1, 0.2, 0.1, 0.1, 0.2",
                               "proportional: 0.1, additive: 0.1");
  text = replace(text, "max_evaluations: 0", "max_evaluations: 0, covariance: sandwich");
  const std::string fit = dir.file("fit.yaml");
  write_text(fit, text);
  const CliResult r = run_pkscan({"fit", fit, "-q"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_NE(r.err.find("the covariance step failed: R (the Hessian of the objective) is not "
                       "positive definite"),
            std::string::npos)
      << describe(r);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"fit.csv", "fit.ext", "fit.subjects.csv",
                                                   "fit.table.csv", "fit.yaml"}));
  const std::vector<std::string> lines = split_lines(read_text(dir.file("fit.csv")));
  ASSERT_EQ(lines.size(), 13u);  // the header, 11 estimates, the OFV
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    const std::vector<std::string> f = split_csv(lines[i]);
    EXPECT_EQ(f.at(2), "") << lines[i];  // no standard error
  }
}

// A THETA that is also a column of the dataset (whose values would override it record by
// record): exit status 2, one line, nothing written.
TEST(FitFile, AThetaThatIsADatasetColumnIsBadInput) {
  TempDir dir;
  std::string data;
  for (const std::string& line : split_lines(read_text(kData + "theo.csv")))
    data += line + (data.empty() ? ",KE\n" : ",0.1\n");
  const std::string csv = dir.file("theo_ke.csv");
  write_text(csv, data);
  std::string text = theo_file(dir, "focei", kTheoInitial, "0.2, 0.1, 0.2, 0.1, 0.1, 0.2",
                               "proportional: 0.1, additive: 0.1");
  text = replace(text, kData + "theo.csv", csv);
  const std::string fit = dir.file("fit.yaml");
  write_text(fit, text);
  const CliResult r = run_pkscan({"fit", fit});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_NE(r.err.find("is a column of the dataset"), std::string::npos) << describe(r);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"fit.yaml", "theo_ke.csv"}));
}

// A dataset still needs --estimate (the per-subject and pooled fits are unchanged).
TEST(FitFile, ADatasetStillNeedsEstimate) {
  const CliResult r =
      run_pkscan({"fit", std::string(PKSCAN_SOURCE_DIR) + "/config/examples/fit/dataset.csv"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("--estimate"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace pkscan::cli::test
