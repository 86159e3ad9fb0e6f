// `pkscan run` on NONMEM datasets (subjects: {dataset: ...}): the examples, the output layout,
// agreement with the published table, and bad input specific to dataset runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <pkscan/backend.hpp>
#include <string>
#include <vector>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

const std::string kExamples = std::string(PKSCAN_SOURCE_DIR) + "/config/examples/datasets/";

TEST(DatasetRun, Torsten2ExampleReproducesThePublishedTable) {
  TempDir dir;
  const CliResult r =
      run_pkscan({"run", kExamples + "torsten_2_ss.yaml", "--output", dir.file("o.csv")});
  ASSERT_EQ(r.status, 0) << describe(r);
  const auto lines = split_lines(read_text(dir.file("o.csv")));
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[0],
            "id,time,amount_depot,amount_central,amount_peripheral,conc_depot,conc_central,"
            "conc_peripheral,dv,pred");
  std::ifstream ref(std::string(PKSCAN_SOURCE_DIR) +
                    "/tests/data/reference/torsten_2_ss_bolus.csv");
  std::string line;
  std::getline(ref, line);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    ASSERT_TRUE(std::getline(ref, line));
    const auto want = split_csv(line);
    const auto got = split_csv(lines[i]);
    ASSERT_EQ(got.size(), 10u);
    EXPECT_EQ(got[0], "1");
    EXPECT_DOUBLE_EQ(std::stod(got[1]), std::stod(want[0]));
    for (int c = 0; c < 3; ++c) {
      const double w = std::stod(want[static_cast<std::size_t>(c) + 1]);
      EXPECT_NEAR(std::stod(got[static_cast<std::size_t>(c) + 2]), w, 1e-6 * std::fabs(w))
          << lines[i];
    }
    EXPECT_EQ(got[8], "");      // DV missing
    EXPECT_EQ(got[9], got[6]);  // pred = central concentration (observations in CMT 2)
  }
}

TEST(DatasetRun, PopulationExampleKeepsIdsCovariatesAndDv) {
  TempDir dir;
  const CliResult r = run_pkscan({"run", kExamples + "population.yaml", "-o", dir.file("p.csv")});
  ASSERT_EQ(r.status, 0) << describe(r);
  const auto lines = split_lines(read_text(dir.file("p.csv")));
  ASSERT_EQ(lines.size(), 10u);  // 9 observation records
  EXPECT_EQ(lines[0].substr(lines[0].size() - 11), ",dv,pred,WT");
  const auto first = split_csv(lines[1]);
  EXPECT_EQ(first[0], "101");
  EXPECT_EQ(first[8], "2.31");
  EXPECT_EQ(first[10], "70");
  EXPECT_EQ(split_csv(lines[5])[0], "102");
  EXPECT_EQ(split_csv(lines[9])[0], "103");
  const CliResult v = run_pkscan({"validate", kExamples + "population.yaml"});
  EXPECT_EQ(v.status, 0) << describe(v);
  EXPECT_NE(v.out.find("3 subjects, 13 records, 9 observations"), std::string::npos) << v.out;
}

struct Bad {
  const char* name;
  std::string yaml;
  std::string csv;
  int status;
  std::vector<std::string> words;
  bool without_gpu = false;  // bad input only on a machine without a CUDA device
};

class DatasetRunBadInput : public ::testing::TestWithParam<Bad> {};

TEST_P(DatasetRunBadInput, OneLineErrorAndNoFile) {
  const Bad& b = GetParam();
  if (b.without_gpu && cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present; device: cuda runs datasets";
  TempDir dir;
  write_text(dir.file("d.csv"), b.csv);
  write_text(dir.file("run.yaml"), b.yaml);
  const CliResult r = run_pkscan({"run", dir.file("run.yaml"), "--output", dir.file("o.csv")});
  EXPECT_EQ(r.status, b.status) << describe(r);
  EXPECT_EQ(r.err.rfind("pkscan: error: ", 0), 0u) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
  for (const std::string& w : b.words)
    EXPECT_NE(r.err.find(w), std::string::npos) << "lacks " << w << "\n" << describe(r);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path()))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"d.csv", "run.yaml"}));
  // `validate` makes the run's checks without running (config::check_run): the same line.
  const CliResult v = run_pkscan({"validate", dir.file("run.yaml")});
  EXPECT_EQ(v.status, b.status) << describe(v);
  EXPECT_EQ(v.err, r.err) << describe(v);
}

const char* kCsv = "ID,TIME,AMT,CMT,EVID\n1,0,100,1,1\n1,2,.,2,0\n2,0,50,2,1\n2,3,.,2,0\n";
const char* kParams =
    "  parameters: {ka: 1, ke: 0.2, k12: 0.3, k21: 0.1, v_central: 10, v_peripheral: 20}\n";

INSTANTIATE_TEST_SUITE_P(
    Cli, DatasetRunBadInput,
    ::testing::Values(
        Bad{"DatasetFileMissing",
            "subjects:\n  dataset: nothere.csv\n" + std::string(kParams),
            kCsv,
            2,
            {"nothere.csv"}},
        Bad{"BadDatasetRowNamesFileLineColumn",
            "subjects:\n  dataset: d.csv\n" + std::string(kParams),
            "ID,TIME,AMT,CMT,EVID\n1,0,100,1,1\n1,oops,.,2,0\n",
            2,
            {"d.csv:3:2:", "TIME"}},
        Bad{"TimeWithDataset",
            "time: {dt: 1, steps: 2}\nsubjects:\n  dataset: d.csv\n" + std::string(kParams),
            kCsv,
            2,
            {"run.yaml:1:1:", "time is not used with subjects.dataset"}},
        Bad{"DosesWithDataset",
            "subjects:\n  dataset: d.csv\n" + std::string(kParams) + "doses: []\n",
            kCsv,
            2,
            {"doses is not used"}},
        Bad{"OutputTimesWithDataset",
            "subjects:\n  dataset: d.csv\n" + std::string(kParams) + "output: {times: all}\n",
            kCsv,
            2,
            {"output.times is not used"}},
        Bad{"CountWithDataset",
            "subjects:\n  count: 2\n  dataset: d.csv\n" + std::string(kParams),
            kCsv,
            2,
            {"subjects.count is not used"}},
        Bad{"EulerWithDataset",
            "discretization: euler\nsubjects:\n  dataset: d.csv\n" + std::string(kParams),
            kCsv,
            2,
            {"run.yaml:1:17:", "exact"}},
        Bad{"ListLengthNotSubjects",
            "subjects:\n  dataset: d.csv\n  parameters: {ka: [1, 2, 3], ke: 0.2, k12: 0.3, k21: "
            "0.1, v_central: 10, "
            "v_peripheral: 20}\n",
            kCsv,
            2,
            {"3 values", "2 subjects"}},
        Bad{"ParameterMissing",
            "subjects:\n  dataset: d.csv\n  parameters: {ka: 1, k12: 0.3, k21: 0.1, v_central: 10, "
            "v_peripheral: 20}\n",
            kCsv,
            2,
            {"d.csv:2", "ke (or cl) is missing"}},
        // A value from the run file is reported at its node in the run file (the library's
        // rule, Error::field() mapped by the loader), one from the dataset at its line.
        Bad{"NegativeParameterInRunFile",
            "subjects:\n  dataset: d.csv\n  parameters: {ka: 1, ke: [0.2, -0.2], k12: 0.3, k21: "
            "0.1, "
            "v_central: 10, v_peripheral: 20}\n",
            kCsv,
            2,
            {"run.yaml:3:33: subjects.parameters.ke[2] is -0.2, but must be finite and >= 0"}},
        // A run-file value is held to its role's rule even where a dataset column replaces it
        // in every record.
        Bad{"NegativeRunFileValueOverriddenByAColumn",
            "subjects:\n  dataset: d.csv\n  parameters: {ka: 1, ke: -5, k12: 0.3, k21: 0.1, "
            "v_central: 10, v_peripheral: 20}\n",
            "ID,TIME,AMT,CMT,EVID,KE\n1,0,100,1,1,0.2\n1,2,.,2,0,0.2\n",
            2,
            {"run.yaml:3:27: subjects.parameters.ke is -5, but must be finite and >= 0"}},
        // An empty cell of a dataset column, no value in the run file: the dataset's line.
        Bad{"EmptyDatasetCellWithoutRunFileValue",
            "subjects:\n  dataset: d.csv\n  parameters: {ka: 1, k12: 0.3, k21: 0.1, v_central: "
            "10, v_peripheral: 20}\n",
            "ID,TIME,AMT,CMT,EVID,KE\n1,0,100,1,1,.\n1,2,.,2,0,0.2\n",
            2,
            {"d.csv:2", "ID \"1\""}},
        Bad{"NegativeParameterInDatasetColumn",
            "subjects:\n  dataset: d.csv\n" + std::string(kParams),
            "ID,TIME,AMT,CMT,EVID,KE\n1,0,100,1,1,0.2\n1,2,.,2,0,-1\n",
            2,
            {"d.csv:3", "ID \"1\"", "ke is -1"}},
        Bad{"CmtBeyondModel",
            "subjects:\n  dataset: d.csv\n" + std::string(kParams),
            "ID,TIME,AMT,CMT,EVID\n1,0,100,4,1\n",
            2,
            {"d.csv:2:4:", "CMT"}},
        Bad{"AliasTwiceInDatasetRun",
            "subjects:\n  dataset: d.csv\n  parameters: {ka: 1, k01: 5, ke: 0.2, k12: 0.3, k21: "
            "0.1, "
            "v_central: 10, v_peripheral: 20}\n",
            kCsv,
            2,
            {"run.yaml:3:", "given twice"}},
        Bad{"EmptyModelMapping",
            "model: {}\nsubjects:\n  dataset: d.csv\n" + std::string(kParams),
            kCsv,
            2,
            {"run.yaml:1:8:", "model must be a model name"}},
        Bad{"CudaForDataset",
            "subjects:\n  dataset: d.csv\n" + std::string(kParams) + "engine: {device: cuda}\n",
            kCsv,
            3,
            {"cuda", "not available"},
            true}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pkscan::cli::test
