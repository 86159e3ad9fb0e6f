// Run files with the other models: `linear` declared flow by flow and four_compartment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

const std::string kModels = std::string(PKSCAN_SOURCE_DIR) + "/config/examples/models/";

TEST(ModelRun, LinearExampleHasItsCompartmentColumnsAndPkpdsimValue) {
  TempDir dir;
  const CliResult r =
      run_pkscan({"run", kModels + "linear_three_disposition.yaml", "-o", dir.file("o.csv")});
  ASSERT_EQ(r.status, 0) << describe(r);
  const auto lines = split_lines(read_text(dir.file("o.csv")));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0],
            "id,time,amount_gut,amount_central,amount_periph1,amount_periph2,conc_gut,conc_central,"
            "conc_periph1,conc_periph2");
  const auto t23 = split_csv(lines[3]);
  EXPECT_EQ(t23[1], "23");
  EXPECT_NEAR(std::stod(t23[7]), 0.23627, 0.5e-5);
}

TEST(ModelRun, FourCompartmentExampleRuns) {
  TempDir dir;
  const CliResult r =
      run_pkscan({"run", kModels + "four_compartment.yaml", "-o", dir.file("o.csv")});
  ASSERT_EQ(r.status, 0) << describe(r);
  const auto lines = split_lines(read_text(dir.file("o.csv")));
  EXPECT_EQ(lines.size(), 1u + 2u * 97u);
  EXPECT_EQ(lines[0].rfind(
                "id,time,amount_depot,amount_central,amount_peripheral1,amount_peripheral2,", 0),
            0u)
      << lines[0];
}

struct Bad {
  const char* name;
  std::string yaml;
  std::string where;
  std::vector<std::string> words;
};

class ModelBadInput : public ::testing::TestWithParam<Bad> {};

const std::string kRest =
    "time: {dt: 1, steps: 4}\nsubjects:\n  parameters: {k: 0.3}\noutput: {path: o.csv}\n";

TEST_P(ModelBadInput, OneLineErrorAtTheNode) {
  const Bad& b = GetParam();
  TempDir dir;
  write_text(dir.file("run.yaml"), b.yaml);
  const CliResult r = run_pkscan({"run", dir.file("run.yaml"), "--output", dir.file("o.csv")});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
  EXPECT_NE(r.err.find("run.yaml:" + b.where + ":"), std::string::npos) << describe(r);
  for (const std::string& w : b.words)
    EXPECT_NE(r.err.find(w), std::string::npos) << w << "\n" << describe(r);
  EXPECT_FALSE(fs::exists(dir.file("o.csv")));
}

INSTANTIATE_TEST_SUITE_P(
    Cli, ModelBadInput,
    ::testing::Values(
        Bad{"LinearAsAString", "model: linear\n" + kRest, "1:8", {"compartments and flows"}},
        Bad{"UnknownCompartmentInFlow",
            "model:\n  linear:\n    compartments: [a, b]\n    flows:\n      - {from: a, to: c, "
            "rate: k}\n" +
                kRest,
            "3:5",
            {"\"c\" is not a declared compartment"}},
        Bad{"TooManyCompartments",
            "model:\n  linear:\n    compartments: [a, b, c, d, e, f, g]\n" + kRest,
            "3:5",
            {"1 to 6"}},
        Bad{"FlowMissingRate",
            "model:\n  linear:\n    compartments: [a, b]\n    flows:\n      - {from: a, to: b}\n" +
                kRest,
            "5:9",
            {"missing key 'rate'"}},
        Bad{"UnknownKeyInLinear",
            "model:\n  linear:\n    compartments: [a]\n    flow: []\n" + kRest,
            "4:5",
            {"unknown key 'flow'", "did you mean 'flows'"}},
        Bad{"BioavailabilityOnAGrid",
            "time: {dt: 1, steps: 4}\nsubjects:\n  parameters: {ka: 1, ke: 0.2, k12: 0.3, k21: "
            "0.1, v_central: 10, "
            "v_peripheral: 20, f_depot: 0.7}\noutput: {path: o.csv}\n",
            "3:94",
            {"subjects.parameters.f_depot is 0.7, but must be 1 on a time grid",
             "subjects.dataset"}},
        Bad{"DoseIntoUndeclaredCompartment",
            "model:\n  linear:\n    compartments: [a, b]\n    flows:\n      - {from: a, to: b, "
            "rate: k}\n" +
                kRest + "doses:\n  - {compartment: central, time: 0, amount: 1}\n",
            "11:19",
            {"central", "must be one of a, b"}}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pkscan::cli::test
