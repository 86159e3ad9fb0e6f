// Population and sweep runs through the command line: rows, ids, extra columns, determinism,
// summaries, and one-line errors for bad population / sweep / covariate input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

// A small population run; `extra` is appended to the population mapping.
[[maybe_unused]] std::string population_yaml(const std::string& extra = "",
                                             const std::string& tail = "") {
  return "model: three_compartment\n"
         "time: {dt: 1, steps: 24}\n"
         "subjects:\n"
         "  population:\n"
         "    count: 50\n"
         "    seed: 7\n"
         "    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}\n"
         "    iiv: {cl: 0.09, v_central: 0.04}\n" +
         extra +
         "doses:\n"
         "  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 1}\n" +
         tail;
}

struct Bad {
  const char* name;
  std::string yaml;
  std::string where;
  std::vector<std::string> words;
};

// Test names in ctest show the case name, not the bytes of the struct.
void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }

class PopulationBadInput : public ::testing::TestWithParam<Bad> {};

TEST_P(PopulationBadInput, OneLineErrorAtTheNode) {
  const Bad& b = GetParam();
  TempDir dir;
  write_text(dir.file("cov.csv"), "wt,age,zero\n70,30,0\n80,40,1\n");
  write_text(dir.file("run.yaml"), b.yaml);
  const CliResult r = run_pkscan({"run", dir.file("run.yaml"), "--output", dir.file("o.csv")});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
  EXPECT_NE(r.err.find(b.where + ":"), std::string::npos) << describe(r);
  for (const std::string& w : b.words)
    EXPECT_NE(r.err.find(w), std::string::npos) << w << "\n" << describe(r);
  EXPECT_FALSE(fs::exists(dir.file("o.csv")));
  EXPECT_TRUE(temp_files(dir.path()).empty());
}

const std::string kTime = "time: {dt: 1, steps: 4}\n";
const std::string kTypical = "    typical: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: 70}\n";
std::string pop(const std::string& body) { return kTime + "subjects:\n  population:\n" + body; }

INSTANTIATE_TEST_SUITE_P(
    Cli, PopulationBadInput,
    ::testing::Values(
        Bad{"MissingSeed",
            pop("    count: 2\n" + kTypical),
            "run.yaml:4:5",
            {"missing key 'seed'"}},
        Bad{"CountZero",
            pop("    count: 0\n    seed: 1\n" + kTypical),
            "run.yaml:4:12",
            {"subjects.population.count", "[1, "}},
        Bad{"UnknownKey",
            pop("    count: 2\n    seed: 1\n    omega: {}\n" + kTypical),
            "run.yaml:6:5",
            {"unknown key 'omega'", "iiv"}},
        Bad{"TypicalMissingRequired",
            pop("    count: 2\n    seed: 1\n    typical: {ka: 1, cl: 5, v_central: 20}\n"),
            "run.yaml:6:14",
            {"subjects.population.typical.v_peripheral is not given, but must be given"}},
        Bad{"TypicalNegative",
            pop("    count: 2\n    seed: 1\n    typical: {ka: -1, cl: 5, v_central: 20, q: 8, "
                "v_peripheral: 70}\n"),
            "run.yaml:6:19",
            {"typical.ka", ">= 0"}},
        Bad{"IivUnknownParameter",
            pop("    count: 2\n    seed: 1\n" + kTypical + "    iiv: {clx: 0.1}\n"),
            "run.yaml:7:11",
            {"clx", "has the parameters"}},
        Bad{"IivNegativeVariance",
            pop("    count: 2\n    seed: 1\n" + kTypical + "    iiv: {cl: -0.1}\n"),
            "run.yaml:7:15",
            {"iiv.cl", ">= 0"}},
        Bad{"IivNoTypical",
            pop("    count: 2\n    seed: 1\n" + kTypical + "    iiv: {ke: 0.1}\n"),
            "run.yaml:6:14",
            {"subjects.population.typical.ke is not given, but must be finite (it has iiv)"}},
        Bad{"OmegaWrongLength",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    iiv: {block: [cl, v_central], omega: [0.1, 0.2]}\n"),
            "run.yaml:7:42",
            {"3 numbers", "lower triangle"}},
        Bad{"OmegaNotPositiveDefinite",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    iiv: {block: [cl, v_central], omega: [0.1, 0.5, 0.1]}\n"),
            "run.yaml:7:42",
            {"not positive definite"}},
        // Singular within the library's tolerance (the pivot 2e-13 <= 1e-12 of its variance):
        // rejected here, at the node, by the rule PopulationSampler applies (omega_cholesky).
        Bad{"OmegaNearlySingular",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    iiv: {block: [cl, v_central], omega: [1.0, 0.9999999999999, 1.0]}\n"),
            "run.yaml:7:42",
            {"not positive definite", "v_central"}},
        // The rules below are the library's (PopulationSampler, check_population_run); the
        // loader only says where the value is (Error::field() mapped to the node).
        Bad{"OmegaNotFinite",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    iiv: {block: [cl, v_central], omega: [0.1, .nan, 0.1]}\n"),
            "run.yaml:7:48",
            {"subjects.population.iiv.omega[2] is .nan, but must be finite"}},
        Bad{"OmegaCovarianceWithZeroVariance",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    iiv: {block: [cl, v_central], omega: [0, 0.01, 0.1]}\n"),
            "run.yaml:7:46",
            {"subjects.population.iiv.omega[2] is 0.01, but must be 0 because the variance of cl "
             "is 0"}},
        Bad{"IivOnBioavailability",
            pop("    count: 2\n    seed: 1\n" + kTypical + "    iiv: {f_depot: 0.1}\n"),
            "run.yaml:7:11",
            {"iiv on f_depot", "subjects.dataset"}},
        Bad{"TypicalLag",
            pop("    count: 2\n    seed: 1\n    typical: {ka: 1, cl: 5, v_central: 20, q: 8, "
                "lag_depot: 0.5, v_peripheral: 70}\n"),
            "run.yaml:6:61",
            {"subjects.population.typical.lag_depot is 0.5, but must be 0 on a time grid"}},
        Bad{"CovariatePowerZeroValue",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    covariates:\n      file: cov.csv\n      effects:\n        - {parameter: cl, "
                "covariate: zero, type: power, coefficient: 0.75, reference: 1}\n"),
            "run.yaml:8:13",
            {"covariate zero of subject 1 is 0, but must be > 0 (it has a power effect)"}},
        Bad{"EffectCoefficientInfinite",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    covariates:\n      file: cov.csv\n      effects:\n        - {parameter: cl, "
                "covariate: wt, type: exponential, coefficient: .inf, reference: 70}\n"),
            "run.yaml:10:74",
            {"subjects.population.covariates.effects[1].coefficient is .inf, but must be finite"}},
        Bad{"EffectOnBioavailability",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    covariates:\n      file: cov.csv\n      effects:\n        - {parameter: "
                "f_depot, covariate: wt, type: exponential, coefficient: 1, reference: 70}\n"),
            "run.yaml:10:23",
            {"covariate effect 1 on f_depot", "subjects.dataset"}},
        Bad{"BlockWithoutOmega",
            pop("    count: 2\n    seed: 1\n" + kTypical + "    iiv: {block: [cl]}\n"),
            "run.yaml:7:10",
            {"needs both block"}},
        Bad{"ParametersWithPopulation",
            kTime + "subjects:\n  parameters: {ka: 1}\n  population:\n    count: 2\n    seed: 1\n" +
                kTypical,
            "run.yaml:3:3",
            {"cannot be given with subjects.population"}},
        Bad{"CovariateFileMissing",
            pop("    count: 2\n    seed: 1\n" + kTypical + "    covariates: {file: nothere.csv}\n"),
            "run.yaml:7:24",
            {"nothere.csv", "cannot read"}},
        Bad{"CovariateRowsDisagree",
            pop("    count: 3\n    seed: 1\n" + kTypical + "    covariates: {file: cov.csv}\n"),
            "run.yaml:7:24",
            {"has 2 rows", "count is 3"}},
        Bad{"CovariateUnknownColumn",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    covariates:\n      file: cov.csv\n      effects:\n        - {parameter: cl, "
                "covariate: weight, type: power, coefficient: 0.75, reference: 70}\n"),
            "run.yaml:10:38",
            {"weight", "wt, age, zero"}},
        Bad{"CovariateBadType",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    covariates:\n      file: cov.csv\n      effects:\n        - {parameter: cl, "
                "covariate: wt, type: linear, coefficient: 0.75, reference: 70}\n"),
            "run.yaml:10:48",
            {"power or exponential"}},
        Bad{"CovariatePowerZeroReference",
            pop("    count: 2\n    seed: 1\n" + kTypical +
                "    covariates:\n      file: cov.csv\n      effects:\n        - {parameter: cl, "
                "covariate: wt, type: power, coefficient: 0.75, reference: 0}\n"),
            "run.yaml:10:85",
            {"reference", "> 0"}},
        Bad{"SweepNotAList",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\nsweep: {cl: 4}\n",
            "run.yaml:4:13",
            {"sweep.cl", "non-empty list"}},
        Bad{"SweepUnknownParameter",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\nsweep: {clearance: [4]}\n",
            "run.yaml:4:9",
            {"clearance"}},
        Bad{"SweepNegative",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\nsweep: {cl: [4, -1]}\n",
            "run.yaml:4:17",
            {"sweep.cl[2]", ">= 0"}},
        Bad{"SweepBioavailability",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\nsweep: {f_depot: [0.5, 1]}\n",
            "run.yaml:4:9",
            {"f_depot", "subjects.dataset"}},
        Bad{"PercentileOutOfRange",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\noutput: {summaries: {percentiles: [5, 150]}}\n",
            "run.yaml:4:39",
            {"[0, 100]"}},
        Bad{"PercentilesNotIncreasing",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\noutput: {summaries: {percentiles: [50, 5]}}\n",
            "run.yaml:4:40",
            {"percentiles[2] is 5, but must be greater than the one before"}},
        Bad{"NothingToWrite",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\noutput: {trajectories: false, summaries: false}\n",
            "run.yaml:4:42",
            {"nothing to write"}},
        Bad{"TrajectoriesNotBoolean",
            kTime + "subjects:\n  parameters: {ka: 1, cl: 5, v_central: 20, q: 8, v_peripheral: "
                    "70}\noutput: {trajectories: maybe}\n",
            "run.yaml:4:24",
            {"true or false"}}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

// `pkscan validate` names what a population run simulates: its subjects (per arm: their dose
// lines and output times), replicates and sweep points, as the run file gives them.
TEST(PopulationCli, ValidateSummarisesArmsReplicatesAndSweeps) {
  TempDir dir;
  write_text(dir.file("run.yaml"),
             "model: three_compartment\n"
             "time: {dt: 1, steps: 24}\n"
             "subjects:\n"
             "  population:\n"
             "    seed: 7\n"
             "    replicates: 3\n"
             "    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}\n"
             "    iiv: {cl: 0.09}\n"
             "arms:\n"
             "  - {name: low, count: 20, doses: [{compartment: depot, time: 0, amount: 50}]}\n"
             "  - name: high\n"
             "    count: 30\n"
             "    doses: [{compartment: depot, time: 0, amount: 100}, "
             "{compartment: depot, time: 12, amount: 100}]\n"
             "    times: [0, 12, 24]\n"
             "sweep: {ka: [0.5, 1.0]}\n"
             "output: {path: o.csv, summaries: true}\n");
  const CliResult r = run_pkscan({"validate", dir.file("run.yaml")});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, dir.file("run.yaml") +
                       ": ok: 50 subjects in 2 arms (low: 20 subjects, 1 dose line; high: 30 "
                       "subjects, 2 dose lines, 3 output times) x 3 replicates x 2 sweep points, "
                       "24 steps of 1, 25 output times, output o.csv\n")
      << describe(r);
  EXPECT_EQ(list_tree(dir.path()), std::vector<std::string>{"run.yaml"});

  write_text(dir.file("pop.yaml"), population_yaml());
  const CliResult p = run_pkscan({"validate", dir.file("pop.yaml")});
  ASSERT_EQ(p.status, 0) << describe(p);
  EXPECT_NE(p.out.find(": ok: 50 subjects, 24 steps of 1, 1 dose line, 25 output times"),
            std::string::npos)
      << describe(p);
}

// A drawn parameter out of its domain (an exponential weight effect overflows cl for the third
// subject, weight 1e6) is found when its chunk runs and named by replicate and subject, in one
// line with exit status 2 and no file, with and without summaries (the fused path).
TEST(PopulationCli, ADrawnParameterOutOfItsDomainNamesTheReplicateAndSubject) {
  for (const std::string summaries : {"true", "false"}) {
    TempDir dir;
    write_text(dir.file("cov.csv"), "wt\n70\n80\n1e6\n75\n");
    write_text(dir.file("run.yaml"),
               "model: three_compartment\n"
               "time: {dt: 1, steps: 24}\n"
               "subjects:\n"
               "  population:\n"
               "    count: 4\n"
               "    seed: 1\n"
               "    replicates: 2\n"
               "    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}\n"
               "    iiv: {cl: 0.09}\n"
               "    covariates:\n"
               "      file: cov.csv\n"
               "      effects: [{parameter: cl, covariate: wt, type: exponential, coefficient: 1,"
               " reference: 70}]\n"
               "doses:\n"
               "  - {compartment: depot, time: 0, amount: 100}\n"
               "output: {summaries: " +
                   summaries + "}\n");
    const CliResult r = run_pkscan({"run", dir.file("run.yaml"), "--output", dir.file("o.csv")});
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_EQ(r.err, "pkscan: error: " + dir.file("run.yaml") +
                         ": replicate 1, subject 3: parameter cl is inf, but must be finite and "
                         ">= 0\n")
        << describe(r);
    EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"cov.csv", "run.yaml"}));
  }
}

}  // namespace
}  // namespace pkscan::cli::test
