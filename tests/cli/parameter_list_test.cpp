// Per-subject parameter lists through the run file and `pkscan run`: every parameter of every
// model given as a list (several lists at once), as a number and through its alias must give,
// subject by subject, the rows of a one-subject run of that subject's values written as numbers.
//
// Regression: with two or more lists the loader rebound one list's YAML node to the next one
// (yaml-cpp's Node::operator= on a node that already refers to one), so every subject silently
// got another parameter's values (ka took k12's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <pkscan/models/model.hpp>
#include <string>
#include <vector>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

constexpr int kSubjects = 3;

struct ModelCase {
  std::string name;        // test name
  std::string model_yaml;  // the `model:` value (a name or a linear block)
  const ModelInfo* info;
  bool clearances;  // parameterisation: clearances (cl, q, q2) instead of micro constants
  std::string dose_compartment;
};

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The parameters a case gives: every rate of the chosen parameterisation, every volume, every
// f_ and lag_ (grid runs accept only their defaults, so those lists hold 1 and 0).
std::vector<int> given_columns(const ModelCase& c) {
  const ModelInfo& m = *c.info;
  std::vector<char> skip(m.parameters.size(), 0);
  for (const ParameterAlternative& alt : m.alternatives)
    for (int col : c.clearances ? alt.micro : alt.clearance)
      skip[static_cast<std::size_t>(col)] = 1;
  std::vector<int> cols;
  for (std::size_t i = 0; i < m.parameters.size(); ++i)
    if (!skip[i]) cols.push_back(static_cast<int>(i));
  return cols;
}

// Subject s's value of column col: distinct across subjects and parameters.
double value(const ModelInfo& m, int col, int s) {
  const ParameterInfo& p = m.parameters[static_cast<std::size_t>(col)];
  switch (p.role) {
    case ParameterRole::Bioavailability:
      return 1.0;
    case ParameterRole::Lag:
      return 0.0;
    case ParameterRole::Volume:
      return 5.0 + 7.0 * col + 3.0 * s;
    case ParameterRole::Rate:
      break;
  }
  return 0.05 + 0.11 * col + 0.07 * s;
}

// The run file: `form` per column (cycled): 'l' list, 'n' number (subject 0's value), 'a' list
// under the alias (under the name when there is no alias).
std::string run_file(const ModelCase& c, const std::string& form, const std::string& out) {
  const ModelInfo& m = *c.info;
  const std::vector<int> cols = given_columns(c);
  std::string y = "model: " + c.model_yaml + "\ntime: {dt: 0.5, steps: 24}\nsubjects:\n";
  y += "  parameters:\n";
  for (std::size_t i = 0; i < cols.size(); ++i) {
    const ParameterInfo& p = m.parameters[static_cast<std::size_t>(cols[i])];
    const char f = form[i % form.size()];
    const std::string key = (f == 'a' && !p.alias.empty()) ? p.alias : p.name;
    y += "    " + key + ": ";
    if (f == 'n') {
      y += number(value(m, cols[i], 0));
    } else {
      y += "[";
      for (int s = 0; s < kSubjects; ++s) y += (s ? ", " : "") + number(value(m, cols[i], s));
      y += "]";
    }
    y += "\n";
  }
  y += "doses:\n  - {compartment: " + c.dose_compartment + ", time: 0, amount: 100}\n";
  y += "  - {compartment: " + c.dose_compartment + ", time: 1, amount: 40, duration: 2.5}\n";
  y += "output:\n  path: " + out + "\n  times: all\n";
  return y;
}

// Values of a number-form column must not differ between subjects: a run where column i is a
// number gives every subject subject 0's value, so the one-subject reference uses that too.
double reference_value(const ModelCase& c, const std::string& form, std::size_t i, int s) {
  const std::vector<int> cols = given_columns(c);
  return form[i % form.size()] == 'n' ? value(*c.info, cols[i], 0) : value(*c.info, cols[i], s);
}

std::string one_subject_file(const ModelCase& c, const std::string& form, int s,
                             const std::string& out) {
  const ModelInfo& m = *c.info;
  const std::vector<int> cols = given_columns(c);
  std::string y = "model: " + c.model_yaml + "\ntime: {dt: 0.5, steps: 24}\nsubjects:\n";
  y += "  parameters:\n";
  for (std::size_t i = 0; i < cols.size(); ++i)
    y += "    " + m.parameters[static_cast<std::size_t>(cols[i])].name + ": " +
         number(reference_value(c, form, i, s)) + "\n";
  y += "doses:\n  - {compartment: " + c.dose_compartment + ", time: 0, amount: 100}\n";
  y += "  - {compartment: " + c.dose_compartment + ", time: 1, amount: 40, duration: 2.5}\n";
  y += "output:\n  path: " + out + "\n  times: all\n";
  return y;
}

std::vector<ModelCase> cases() {
  static const std::shared_ptr<const ModelInfo> linear =
      make_linear_model({"gut", "central", "periph"}, {{"gut", "central", "kabs"},
                                                       {"central", "periph", "kcp"},
                                                       {"periph", "central", "kpc"},
                                                       {"central", "", "kel"},
                                                       {"gut", "", "kgut"}});
  const std::string linear_yaml =
      "\n  linear:\n    compartments: [gut, central, periph]\n    flows:\n"
      "      - {from: gut, to: central, rate: kabs}\n"
      "      - {from: central, to: periph, rate: kcp}\n"
      "      - {from: periph, to: central, rate: kpc}\n"
      "    eliminations:\n      - {from: central, rate: kel}\n      - {from: gut, rate: kgut}";
  std::vector<ModelCase> out;
  for (ModelKind k :
       {ModelKind::TwoCompartment, ModelKind::ThreeCompartment, ModelKind::FourCompartment})
    for (bool cl : {false, true})
      out.push_back({to_string(k) + (cl ? "_clearances" : "_micro"), to_string(k), &model_info(k),
                     cl, "depot"});
  out.push_back({"linear", linear_yaml, linear.get(), false, "gut"});
  return out;
}

class ParameterLists : public ::testing::TestWithParam<ModelCase> {};

// Forms: every parameter a list; every parameter a list under its alias; lists and numbers
// alternating (both phases), so each parameter is a number in one run and a list in another.
TEST_P(ParameterLists, EachSubjectEqualsItsOneSubjectRun) {
  const ModelCase& c = GetParam();
  TempDir dir;
  const std::vector<int> cols = given_columns(c);
  ASSERT_GE(cols.size(), 4u);
  for (const std::string form : {"l", "a", "ln", "nl", "lna"}) {
    SCOPED_TRACE("form " + form);
    const std::string path = dir.file("all.yaml");
    const std::string out = dir.file("all.csv");
    write_text(path, run_file(c, form, out));
    const CliResult r = run_pkscan({"run", path, "--quiet"});
    ASSERT_EQ(r.status, 0) << describe(r) << "\n" << read_text(path);
    const std::vector<std::string> all = split_lines(read_text(out));
    const std::size_t rows_per_subject = 25;
    ASSERT_EQ(all.size(), 1 + kSubjects * rows_per_subject);
    for (int s = 0; s < kSubjects; ++s) {
      const std::string one_path = dir.file("one.yaml");
      const std::string one_out = dir.file("one.csv");
      write_text(one_path, one_subject_file(c, form, s, one_out));
      const CliResult r1 = run_pkscan({"run", one_path, "--quiet"});
      ASSERT_EQ(r1.status, 0) << describe(r1);
      const std::vector<std::string> one = split_lines(read_text(one_out));
      ASSERT_EQ(one.size(), 1 + rows_per_subject);
      EXPECT_EQ(all[0], one[0]);
      for (std::size_t i = 0; i < rows_per_subject; ++i) {
        // Same row apart from the id column.
        const std::string& a = all[1 + static_cast<std::size_t>(s) * rows_per_subject + i];
        const std::string& b = one[1 + i];
        ASSERT_EQ(a.substr(0, a.find(',')), std::to_string(s + 1));
        ASSERT_EQ(a.substr(a.find(',')), b.substr(b.find(',')))
            << "subject " << s + 1 << " row " << i;
      }
    }
  }
}

// Per-subject lists beside a shared value, against the closed form: depot amount 100 exp(-ka t)
// of each subject.
TEST(ParameterLists, IssueExampleDepotAmountsAreEachSubjectsOwn) {
  TempDir dir;
  const std::string path = dir.file("lists.yaml");
  write_text(path,
             "model: three_compartment\n"
             "time: {dt: 1, steps: 1}\n"
             "subjects:\n"
             "  parameters:\n"
             "    ka: [1.0, 2.0]\n"
             "    k12: [0.3, 0.4]\n"
             "    k21: [0.05, 0.06]\n"
             "    ke: [0.1, 0.2]\n"
             "    v_central: [20, 30]\n"
             "    v_peripheral: 50\n"
             "doses:\n"
             "- {compartment: depot, time: 0, amount: 100}\n");
  const std::string out = dir.file("lists.csv");
  const CliResult r = run_pkscan({"run", path, "--output", out, "--quiet"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const std::vector<std::string> lines = split_lines(read_text(out));
  ASSERT_EQ(lines.size(), 5u);
  const double ka[2] = {1.0, 2.0};
  const double vc[2] = {20.0, 30.0};
  for (int s = 0; s < 2; ++s) {
    const std::vector<std::string> f = split_csv(lines[2 + 2 * static_cast<std::size_t>(s)]);
    ASSERT_EQ(f.size(), 8u);
    EXPECT_EQ(f[1], "1");
    EXPECT_NEAR(std::stod(f[2]), 100.0 * std::exp(-ka[s]), 1e-12 * 100.0) << "subject " << s + 1;
    // conc_central = amount_central / v_central of that subject.
    EXPECT_NEAR(std::stod(f[6]), std::stod(f[3]) / vc[s], 1e-15 * std::stod(f[3]));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ParameterLists, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace pkscan::cli::test
