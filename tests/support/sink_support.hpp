#pragma once
// Shared by the sink tests (tests/output: sink_test.cpp: CSV, files; sink_h5_test.cpp: HDF5):
// scratch directories, a small run simulated in chunks and streamed to a sink, a summary table.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <pkscan/build_config.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/pkscan.hpp>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace pkscan::output {
namespace {

namespace fs = std::filesystem;

// ---- Scratch files ------------------------------------------------------------------------------

using TempDir = pkscan::test::ScratchDir;

using ::pkscan::test::read_text;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string::npos ? at : at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return parts;
}

// Lines of a file that ends with '\n' (no empty last line).
inline std::vector<std::string> lines_of(const std::string& path) {
  std::string text = read_text(path);
  EXPECT_FALSE(text.empty()) << path;
  if (text.empty()) return {};
  EXPECT_EQ(text.back(), '\n') << path << " does not end with a newline";
  text.pop_back();
  return split(text, '\n');
}

// "%g": an independent formatter for the test's values, all exact binary fractions with few
// significant digits, whose shortest round-trip text is the same.
inline std::string g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// ---- A small run, simulated in chunks ----------------------------------------------------------

constexpr int kSubjects = 5;
constexpr double kDt = 0.5;
constexpr std::int64_t kSteps = 8;
const double kKa[kSubjects] = {1.3, 0.7, 2.1, 0.45, 1.05};
constexpr double kVCentral = 4.3;
constexpr double kVPeripheral = 11.7;

Problem problem(std::int64_t steps = kSteps) {
  Problem p;
  p.grid = {kDt, steps};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, kSubjects);
  for (int s = 0; s < kSubjects; ++s) p.parameters.set("ka", s, kKa[s]);
  p.parameters.set_all("k12", 0.31);
  p.parameters.set_all("k21", 0.093);
  p.parameters.set_all("ke", 0.27);
  p.parameters.set_all("v_central", kVCentral);
  p.parameters.set_all("v_peripheral", kVPeripheral);
  DoseEvent oral;
  oral.amount = 100.0;
  DoseEvent infusion;
  infusion.compartment = 1;
  infusion.time = 1.0;
  infusion.amount = 30.0;
  infusion.rate = 20.0;
  p.doses = {oral, infusion};
  return p;
}

SimulateOptions options(Precision precision) {
  SimulateOptions o;
  o.method = Method::Scan;  // the reference scan: each subject computed alone, bit-reproducible
  o.device = Device::Cpu;
  o.threads = 1;
  o.precision = precision;
  o.concentrations = false;
  return o;
}

// Subjects [first, first + count) of `p`.
Problem part_of(const Problem& p, std::int64_t first, std::int64_t count) {
  Problem q = p;
  q.parameters = ParameterBatch(p.parameters.info_ptr(), count);
  const int cols = p.parameters.parameters();
  for (std::int64_t s = 0; s < count; ++s)
    for (int c = 0; c < cols; ++c)
      q.parameters.mutable_values()[s * cols + c] = p.parameters.get(first + s, c);
  return q;
}

// The run cut into chunks of 2, 2 and 1 subjects, with the per-row arrays a driver passes.
struct ChunkedRun {
  Problem full;
  std::vector<std::int64_t> firsts = {0, 2, 4};
  std::vector<std::int64_t> counts = {2, 2, 1};
  std::vector<SimulationResult> parts;
  std::vector<std::int64_t> ids;  // 101, 102, ...
  std::vector<double> extra;      // replicate, ka
  std::vector<double> metrics;    // cmax, tmax, auc: exact binary fractions
  std::vector<std::string> extra_names = {"replicate", "ka"};
  std::vector<std::string> metric_names = {"cmax", "tmax", "auc"};

  explicit ChunkedRun(Precision precision, std::int64_t steps = kSteps) : full(problem(steps)) {
    for (std::size_t i = 0; i < firsts.size(); ++i)
      parts.push_back(simulate(part_of(full, firsts[i], counts[i]), options(precision)));
    for (int s = 0; s < kSubjects; ++s) {
      ids.push_back(101 + s);
      extra.push_back(s < 3 ? 1.0 : 2.0);
      extra.push_back(kKa[s]);
      metrics.push_back(0.25 * (s + 1));
      metrics.push_back(0.5 * s);
      metrics.push_back(10.0 + 0.125 * s);
    }
  }

  RunLayout layout(Precision precision, bool with_metrics) const {
    RunLayout l;
    l.model = full.parameters.info_ptr();
    for (std::int64_t i = 0; i <= full.grid.steps; ++i) l.times.push_back(full.grid.time(i));
    l.precision = precision;
    l.rows = kSubjects;
    l.extra_columns = extra_names;
    if (with_metrics) l.metric_names = metric_names;
    l.metric_compartment = 1;
    l.run_file = "runs/pop µ.yaml";
    l.run_text = "model: three_compartment\n# µg/L, \"quoted\"\n";
    return l;
  }

  void write_all(ResultSink& sink, bool with_metrics) const {
    const int cols = full.parameters.parameters();
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Chunk c;
      c.first = firsts[i];
      c.result = &parts[i];
      c.ids = ids.data() + firsts[i];
      c.extra = extra.data() + firsts[i] * 2;
      c.parameters = full.parameters.values().data() + firsts[i] * cols;
      c.metrics = with_metrics ? metrics.data() + firsts[i] * 3 : nullptr;
      sink.write(c);
    }
  }
};

// A summary table with exact binary-fraction values: mean = t + c/4, quantile = t + c/4 + q/8.
TimeSummaryTable summary_table(const RunLayout& l) {
  TimeSummaryTable t;
  t.times = l.times;
  t.percentiles = {2.5, 50, 97.5};
  t.compartments = 3;
  t.count = kSubjects - 1;
  t.excluded = 1;
  t.exact = false;
  for (std::size_t i = 0; i < t.times.size(); ++i)
    for (int c = 0; c < 3; ++c) {
      t.mean.push_back(static_cast<double>(i) + 0.25 * c);
      for (int q = 0; q < 3; ++q)
        t.quantiles.push_back(static_cast<double>(i) + 0.25 * c + 0.125 * (q + 1));
    }
  return t;
}

}  // namespace
}  // namespace pkscan::output
