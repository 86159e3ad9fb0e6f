// The bad inputs checked by bad_input_test.cpp (see its comment for the base run file each case
// changes; the base run file's lines: support/bad_input_cases.hpp): the run file itself, its
// keys, their types and ranges; and every table in turn.
#include "support/bad_input_cases.hpp"

namespace pkscan::cli::test {

std::vector<BadInput> run_file_cases() {
  return {
      // ---- The file itself --------------------------------------------------------------------
      {"MissingRunFile", "", {}, 2, kFileOnly, {"cannot read", "No such file"}, Setup::kNoFile},
      {"UnreadableRunFile", BASE, {}, 2, kFileOnly, {"cannot read"}, Setup::kUnreadable},
      {"DirectoryAsRunFile", "", {}, 2, kFileOnly, {"directory"}, Setup::kDirectory},
      {"EmptyFile", "", {}, 2, kFileOnly, {"empty"}},
      {"FileWithOnlyComments", "# nothing here\n", {}, 2, kFileOnly, {"empty"}},
      {"YamlSyntaxUnclosedBracket",
       "time: {dt: 0.25, steps: 8}\n"
       "subjects:\n"
       "  parameters: {ka: [1.2, 0.8, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20}\n"
       "output: {path: @DIR@/out.csv}\n",
       {},
       2,
       kAnyNode,
       {"YAML syntax"}},
      {"TopLevelIsAList",
       "- time: {dt: 0.25, steps: 8}\n"
       "- subjects: 1\n",
       {},
       2,
       "1:1",
       {"mapping", "time", "subjects"}},

      // ---- Keys: unknown, duplicate, missing --------------------------------------------------
      {"UnknownTopLevelKeySuggestsTime",
       "tme: {dt: 0.25, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:1",
       {"'tme'", "did you mean 'time'"}},
      {"UnknownKeyInTime",
       "time:\n"
       "  dt: 0.25\n"
       "  step: 8\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:3",
       {"'step'", "time", "'steps'"}},
      {"DuplicateTopLevelKey",
       L1_TIME L2_SUBJECTS L3_PARAMS "time: {dt: 0.5, steps: 4}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "4:1",
       {"duplicate", "'time'", "line 1"}},
      {"DuplicateKeyInTime",
       "time:\n"
       "  dt: 0.25\n"
       "  steps: 8\n"
       "  dt: 0.5\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "4:3",
       {"duplicate", "'dt'", "time"}},
      {"DuplicateKeyInDose",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, time: 1, amount: 100}\n" L6_OUTPUT,
       {},
       2,
       "5:35",
       {"duplicate", "'time'", "doses[1]"}},
      {"MissingTime",
       L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:1",
       {"missing", "'time'"}},
      {"MissingTimeDt",
       "time: {steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:7",
       {"missing", "'dt'", "time"}},
      {"MissingSubjectsParameters",
       L1_TIME L2_SUBJECTS "  count: 3\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:3",
       {"missing", "'parameters'", "subjects"}},
      {"MissingRequiredParameterVCentral",
       L1_TIME L2_SUBJECTS
       "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_peripheral: 70}\n" L4_DOSES L5_DOSE
           L6_OUTPUT,
       {},
       2,
       "3:15",
       {"subjects.parameters.v_central is not given, but must be given (it has no default)"}},
      // .nan is the library's mark of a parameter not given: as a value it is rejected (here
      // next to ke, it would otherwise read as "cl not given").
      {"ParameterNaN",
       L1_TIME L2_SUBJECTS "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, cl: .nan, "
                           "v_central: 20, v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:60",
       {"subjects.parameters.cl is .nan, but must be a number"}},
      {"UnknownParameterName",
       L1_TIME L2_SUBJECTS "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, kel: 0.25, v_central: 20, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:46",
       {"'kel'", "subjects.parameters", "'ke'", "v_central"}},
      {"ParameterGivenTwiceViaAlias",
       L1_TIME L2_SUBJECTS "  parameters:\n"
                           "    ka: 1.2\n"
                           "    k12: 0.4\n"
                           "    k21: 0.11\n"
                           "    ke: 0.25\n"
                           "    v_central: 20\n"
                           "    v_peripheral: 70\n"
                           "    k01: 1.0\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       kAnyNode,
       {"ka", "k01", "twice"}},
      {"UnknownKeyInDose",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, amout: 100}\n" L6_OUTPUT,
       {},
       2,
       "5:35",
       {"'amout'", "doses[1]", "'amount'"}},
      {"DoseMissingAmount",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES "  - {compartment: depot, time: 0}\n" L6_OUTPUT,
       {},
       2,
       "5:5",
       {"missing", "'amount'", "doses[1]"}},

      // ---- Wrong types ------------------------------------------------------------------------
      {"DtNotANumber",
       "time: {dt: abc, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "number", "abc"}},
      {"DtQuotedNumber",
       "time: {dt: \"0.25\", steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "number", "string"}},
      {"StepsIsAList",
       "time: {dt: 0.25, steps: [1, 2]}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "number", "list"}},
      {"ParametersNotAMapping",
       L1_TIME L2_SUBJECTS "  parameters: [1, 2]\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:15",
       {"subjects.parameters", "mapping", "v_central"}},
      {"ParameterListElementNotANumber",
       L1_TIME L2_SUBJECTS
       "  parameters: {ka: [1.2, x], k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, v_peripheral: "
       "70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:26",
       {"subjects.parameters.ka[2]", "number"}},
      {"DosesNotAList",
       L1_TIME L2_SUBJECTS L3_PARAMS
       "doses: {compartment: depot, time: 0, amount: 100}\n" L6_OUTPUT,
       {},
       2,
       "4:8",
       {"doses", "list"}},
      {"OutputTimesNotAllOrList",
       BASE_WITHOUT_OUTPUT BLOCK_OUTPUT "  times: sometimes\n",
       {},
       2,
       "8:10",
       {"output.times", "all", "list"}},

      // ---- Out-of-range values ----------------------------------------------------------------
      {"DtZero",
       "time: {dt: 0, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "> 0"}},
      {"DtNegative",
       "time: {dt: -0.25, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "> 0"}},
      {"DtNan",
       "time: {dt: .nan, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "finite"}},
      {"DtInfinite",
       "time: {dt: .inf, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "finite"}},
      {"StepsZero",
       "time: {dt: 0.25, steps: 0}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "[1, "}},
      {"StepsNotWhole",
       "time: {dt: 0.25, steps: 2.5}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "whole number"}},
      {"StepsTooLarge",
       "time: {dt: 0.25, steps: 1e15}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "1e15"}},
      {"NegativeRateConstant",
       L1_TIME L2_SUBJECTS "  parameters: {ka: 1.2, k12: -0.4, k21: 0.11, ke: 0.25, v_central: 20, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:30",
       {"subjects.parameters.k12", ">= 0"}},
      {"ZeroVolume",
       L1_TIME L2_SUBJECTS "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 0, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:67",
       {"subjects.parameters.v_central", "> 0"}},
      {"ParameterListLengthMismatch",
       L1_TIME L2_SUBJECTS
       "  parameters: {ka: [1.2, 1.0, 0.8], k12: [0.4, 0.3], k21: 0.11, ke: 0.25, v_central: 20, "
       "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       kAnyNode,
       {"subjects.parameters.k", "3 values", "one value per subject"}},
      {"CountDisagreesWithListLength",
       L1_TIME L2_SUBJECTS "  count: 4\n" L3_PARAMS_KA_LIST L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:10",
       {"subjects.count", "4", "3 values"}},
      {"CountZero",
       L1_TIME L2_SUBJECTS "  count: 0\n" L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:10",
       {"subjects.count", "[1, "}},
      {"EmptyParameterList",
       L1_TIME L2_SUBJECTS "  parameters: {ka: [], k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:20",
       {"subjects.parameters.ka", "empty list"}},
  };
}

const std::vector<BadInput>& cases() {
  static const std::vector<BadInput> all = [] {
    std::vector<BadInput> v;
    for (std::vector<BadInput> (*table)() : {run_file_cases, output_cases, run_cases}) {
      std::vector<BadInput> t = table();
      v.insert(v.end(), t.begin(), t.end());
    }
    return v;
  }();
  return all;
}

}  // namespace pkscan::cli::test
