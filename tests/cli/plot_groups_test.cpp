// `pkscan plot` of summaries by group: results of `pkscan run` with a sweep (CSV and HDF5) are
// drawn as one band and one centre line per group, in its own colour, labelled by the group's
// values; at most --max-groups groups (default 10), the title saying so; bad grouped files are
// exit status 2 with one line. The generated gnuplot script is kept by a wrapper named in
// PKSCAN_GNUPLOT, and its data blocks are compared with the summary's own rows.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/plot_test_support.hpp"
#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

// A small population (5 subjects, 2 replicates) over a ka sweep, with 5/50/95th percentiles
// summarised `by` the given keys (the default, every swept parameter, when `by` is empty).
std::string run_file(const std::string& ka, const std::string& by) {
  return "model: three_compartment\n"
         "time: {dt: 0.5, steps: 8}\n"
         "subjects:\n"
         "  population:\n"
         "    count: 5\n"
         "    seed: 11\n"
         "    replicates: 2\n"
         "    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}\n"
         "    iiv: {cl: 0.09, v_central: 0.04}\n"
         "sweep:\n"
         "  ka: [" +
         ka +
         "]\n"
         "doses:\n"
         "  - {compartment: depot, time: 0, amount: 100}\n"
         "output:\n"
         "  summaries: {percentiles: [5, 50, 95]" +
         (by.empty() ? "" : ", by: " + by) + "}\n";
}

// Runs `pkscan run` on `yaml` (written to DIR/name.yaml) into each of `outputs`.
void run(const TempDir& dir, const std::string& name, const std::string& yaml,
         const std::vector<std::string>& outputs) {
  write_text(dir.file(name + ".yaml"), yaml);
  for (const std::string& out : outputs) {
    const CliResult r = run_pkscan({"run", dir.file(name + ".yaml"), "--output", out, "--quiet"});
    ASSERT_EQ(r.status, 0) << describe(r);
  }
}

// A gnuplot program that keeps a copy of the script it is given (DIR/kept.gp) and then runs the
// real gnuplot, named in PKSCAN_GNUPLOT for the lifetime of the object.
class KeptScript {
 public:
  explicit KeptScript(const TempDir& dir)
      : path_(dir.file("kept.gp")), wrapper_(dir.file("keep-gnuplot")) {
    write_text(wrapper_,
               "#!/bin/sh\ncp plot.gp '" + path_ + "' && exec '" + gnuplot_path() + "' \"$@\"\n");
    EXPECT_EQ(::chmod(wrapper_.c_str(), 0755), 0);
    env_ = std::make_unique<ScopedEnv>("PKSCAN_GNUPLOT", wrapper_.c_str());
  }
  std::string text() const { return read_text(path_); }

 private:
  std::string path_, wrapper_;
  std::unique_ptr<ScopedEnv> env_;
};

// The script's data blocks (`$name << EOD` ... `EOD`): name -> rows of numbers.
std::map<std::string, std::vector<std::vector<double>>> data_blocks(const std::string& script) {
  std::map<std::string, std::vector<std::vector<double>>> blocks;
  std::vector<std::vector<double>>* block = nullptr;
  for (const std::string& line : split_lines(script)) {
    if (block == nullptr && line.size() > 7 && line[0] == '$' &&
        line.compare(line.size() - 7, 7, " << EOD") == 0) {
      block = &blocks[line.substr(0, line.size() - 7)];
    } else if (block != nullptr && line == "EOD") {
      block = nullptr;
    } else if (block != nullptr) {
      std::vector<double> row;
      std::istringstream in(line);
      for (double v; in >> v;) row.push_back(v);
      block->push_back(row);
    }
  }
  return blocks;
}

// The elements of the script's `plot` command (continued over lines ending in `\`).
std::vector<std::string> plot_elements(const std::string& script) {
  const std::size_t at = script.find("\nplot ");
  if (at == std::string::npos) return {};
  const std::string command = replace_all(script.substr(at + 6), ", \\\n     ", "\x1f");
  std::vector<std::string> elements;
  std::size_t start = 0;
  for (;;) {
    const std::size_t sep = command.find('\x1f', start);
    elements.push_back(command.substr(start, sep == std::string::npos ? sep : sep - start));
    if (sep == std::string::npos) break;
    start = sep + 1;
  }
  if (!elements.empty() && !elements.back().empty() && elements.back().back() == '\n')
    elements.back().pop_back();
  return elements;
}

// The value of `rgb '...'` in a plot element.
std::string colour_of(const std::string& element) {
  const std::size_t at = element.find("rgb '");
  return at == std::string::npos ? "" : element.substr(at + 5, 7);
}

// One group of a summary CSV: its key (the grouping columns' fields) and its rows
// (time, p5, p50, p95 of conc_central).
struct GroupRows {
  std::vector<std::string> key;
  std::vector<std::vector<double>> rows;
};

// The groups of a summary CSV with `k` grouping columns, in file order.
std::vector<GroupRows> summary_groups(const std::string& path, std::size_t k) {
  const std::vector<std::string> lines = split_lines(read_text(path));
  const std::vector<std::string> header = split_csv(lines.at(0));
  auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t time = column("time"), p5 = column("p5_conc_central"),
                    p50 = column("p50_conc_central"), p95 = column("p95_conc_central");
  EXPECT_EQ(time, k);
  std::vector<GroupRows> groups;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = split_csv(lines[i]);
    const std::vector<std::string> key(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(k));
    if (groups.empty() || groups.back().key != key) groups.push_back({key, {}});
    groups.back().rows.push_back(
        {std::strtod(f[time].c_str(), nullptr), std::strtod(f[p5].c_str(), nullptr),
         std::strtod(f[p50].c_str(), nullptr), std::strtod(f[p95].c_str(), nullptr)});
  }
  return groups;
}

// Checks that `script` draws exactly the groups of `groups` (labelled `labels`): for group g
// a band $band<g> (time, p5, p95) and a line $center<g> (time, p50) with the group's values, in
// a colour of its own, the line titled with the group's label and the band untitled; every band
// drawn before every line.
void expect_groups_drawn(const std::string& script, const std::vector<GroupRows>& groups,
                         const std::vector<std::string>& labels) {
  ASSERT_EQ(groups.size(), labels.size());
  const auto blocks = data_blocks(script);
  const std::vector<std::string> elements = plot_elements(script);
  ASSERT_EQ(elements.size(), 2 * groups.size()) << script;
  std::set<std::string> colours;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    SCOPED_TRACE("group " + labels[g]);
    const std::string n = std::to_string(g + 1);
    const std::string& band = elements[g];
    const std::string& line = elements[groups.size() + g];
    EXPECT_EQ(band.rfind("$band" + n + " using 1:2:3 with filledcurves", 0), 0u) << band;
    EXPECT_NE(band.find("fillstyle transparent solid"), std::string::npos) << band;
    EXPECT_NE(band.find("notitle"), std::string::npos) << band;
    EXPECT_EQ(line.rfind("$center" + n + " using 1:2 with lines", 0), 0u) << line;
    EXPECT_EQ(line.substr(line.find(" title ")), " title '" + labels[g] + "'") << line;
    EXPECT_EQ(colour_of(band), colour_of(line));
    colours.insert(colour_of(line));
    std::vector<std::vector<double>> want_band, want_center;
    for (const std::vector<double>& r : groups[g].rows) {
      want_band.push_back({r[0], r[1], r[3]});
      want_center.push_back({r[0], r[2]});
    }
    ASSERT_EQ(blocks.count("$band" + n), 1u);
    ASSERT_EQ(blocks.count("$center" + n), 1u);
    EXPECT_EQ(blocks.at("$band" + n), want_band);
    EXPECT_EQ(blocks.at("$center" + n), want_center);
  }
  EXPECT_EQ(colours.size(), groups.size()) << "the groups do not each have a colour of their own";
  EXPECT_EQ(blocks.count("$band" + std::to_string(groups.size() + 1)), 0u);
  EXPECT_NE(script.find("set key title 'median and percentiles 5-95'\n"), std::string::npos);
}

TEST(PlotGroups, GroupedCsvSummaryDrawsOneBandPerGroup) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  run(dir, "pop", run_file("0.5, 1.0, 2.0", ""), {dir.file("pop.csv")});
  ASSERT_EQ(read_text(dir.file("pop.summary.csv")).rfind("ka,time,mean_conc_depot,", 0), 0u);
  const KeptScript kept(dir);
  // The trajectories' file is given: its summary is drawn.
  expect_png(dir, {dir.file("pop.csv"), "-o", dir.file("pop.png")}, dir.file("pop.png"), 800, 500,
             "median and percentiles 5-95 of 3 groups, conc_central)");
  EXPECT_GT(fs::file_size(dir.file("pop.png")), 1000u);
  const std::string script = kept.text();
  EXPECT_NE(script.find("set title 'pop.csv (3 groups)'\n"), std::string::npos) << script;
  const std::vector<GroupRows> groups = summary_groups(dir.file("pop.summary.csv"), 1);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].rows.size(), 9u);
  expect_groups_drawn(script, groups, {"ka = 0.5", "ka = 1", "ka = 2"});
}

TEST(PlotGroups, GroupedHdf5ResultDrawsOneBandPerGroup) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  // The same run into CSV and HDF5: the HDF5 plot must carry the CSV summary's values.
  run(dir, "pop", run_file("0.5, 1.0, 2.0", "[replicate, ka]"),
      {dir.file("pop.h5"), dir.file("pop.csv")});
  const KeptScript kept(dir);
  expect_png(dir, {dir.file("pop.h5"), "-o", dir.file("pop.png"), "--width", "640"},
             dir.file("pop.png"), 640, 500,
             "median and percentiles 5-95 of 6 groups, conc_central)");
  const std::string script = kept.text();
  // 5 subjects in each of 2 replicates x 3 sweep points.
  EXPECT_NE(script.find("set title 'pop.h5 (6 groups, 30 subjects)'\n"), std::string::npos)
      << script;
  const std::vector<GroupRows> groups = summary_groups(dir.file("pop.summary.csv"), 2);
  expect_groups_drawn(script, groups,
                      {"replicate 1, ka = 0.5", "replicate 1, ka = 1", "replicate 1, ka = 2",
                       "replicate 2, ka = 0.5", "replicate 2, ka = 1", "replicate 2, ka = 2"});
}

TEST(PlotGroups, AtMostMaxGroupsAreDrawn) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  run(dir, "many", run_file("0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75, 3", ""),
      {dir.file("many.csv"), dir.file("many.h5")});
  const std::vector<GroupRows> groups = summary_groups(dir.file("many.summary.csv"), 1);
  ASSERT_EQ(groups.size(), 12u);
  const KeptScript kept(dir);
  // Default: the first 10 of the 12, in ten colours.
  expect_png(dir, {dir.file("many.csv"), "-o", dir.file("a.png")}, dir.file("a.png"), 800, 500,
             "median and percentiles 5-95 of the first 10 of 12 groups, conc_central)");
  std::string script = kept.text();
  EXPECT_NE(script.find("set title 'many.csv (first 10 of 12 groups)'\n"), std::string::npos);
  expect_groups_drawn(script, std::vector<GroupRows>(groups.begin(), groups.begin() + 10),
                      {"ka = 0.25", "ka = 0.5", "ka = 0.75", "ka = 1", "ka = 1.25", "ka = 1.5",
                       "ka = 1.75", "ka = 2", "ka = 2.25", "ka = 2.5"});
  // --max-groups, from an HDF5 result, on a log axis (the zeros at time 0 are left out).
  expect_png(dir, {dir.file("many.h5"), "-o", dir.file("b.png"), "--max-groups", "2", "--log"},
             dir.file("b.png"), 800, 500,
             "median and percentiles 5-95 of the first 2 of 12 groups, conc_central, log scale)");
  script = kept.text();
  EXPECT_NE(script.find("set title 'many.h5 (first 2 of 12 groups)'\n"), std::string::npos);
  std::vector<GroupRows> first(groups.begin(), groups.begin() + 2);
  for (GroupRows& g : first) g.rows.erase(g.rows.begin());  // time 0: all zeros
  expect_groups_drawn(script, first, {"ka = 0.25", "ka = 0.5"});
  // All of them when asked (the colours repeat after ten).
  expect_png(dir, {dir.file("many.csv"), "-o", dir.file("c.png"), "--max-groups", "12"},
             dir.file("c.png"), 800, 500,
             "median and percentiles 5-95 of 12 groups, conc_central)");
  EXPECT_EQ(plot_elements(kept.text()).size(), 24u);
}

// ---- Bad grouped files --------------------------------------------------------------------------

const char* const kHeader =
    "ka,time,mean_conc_central,p5_conc_central,p50_conc_central,p95_conc_central\n";

TEST(PlotGroupsErrors, BadGroupedCsvIsExitStatus2) {
  TempDir dir;
  const std::string png = dir.file("x.png");
  auto bad = [&](const std::string& name, const std::string& rows, const std::string& text) {
    write_text(dir.file(name), kHeader + rows);
    expect_error(dir, {dir.file(name), "-o", png}, 2, text);
  };
  bad("text.summary.csv", "0.5,0,0,0,0,0\nlow,0,0,0,0,0\n",
      "line 3: column ka is \"low\", but must be a number");
  bad("nan.summary.csv", "0.5,0,0,0,0,0\nnan,0,0,0,0,0\n",
      "line 3: column ka is \"nan\", but a group's value must be a finite number");
  bad("split.summary.csv",
      "0.5,0,0,0,0,0\n0.5,1,2,1,2,3\n1,0,0,0,0,0\n1,1,3,2,3,4\n0.5,2,1,1,1,1\n",
      "line 6: group ka = 0.5 started on line 2 and other groups came between, but the rows of a "
      "group must be contiguous");
  bad("fewer.summary.csv",
      "0.5,0,0,0,0,0\n0.5,1,2,1,2,3\n0.5,2,1,1,1,1\n1,0,0,0,0,0\n1,1,3,2,3,4\n",
      "group ka = 1 (from line 5) has 2 times, but group ka = 0.5 has 3; every group must have "
      "the same times");
  bad("more.summary.csv", "0.5,0,0,0,0,0\n0.5,1,2,1,2,3\n1,0,0,0,0,0\n1,1,3,2,3,4\n1,2,1,1,1,1\n",
      "line 6: group ka = 1 has more than the 2 times of group ka = 0.5; every group must have "
      "the same times");
  bad("times.summary.csv", "0.5,0,0,0,0,0\n0.5,1,2,1,2,3\n1,0,0,0,0,0\n1,1.5,3,2,3,4\n",
      "line 5: group ka = 1 has time 1.5 where group ka = 0.5 has 1; every group must have the "
      "same times");
  // Next to trajectories the summary is read, and named in the message.
  write_text(dir.file("pop.csv"), "id,time,amount_central,conc_central\n1,0,1,1\n");
  write_text(dir.file("pop.summary.csv"), std::string(kHeader) + "0.5,0,0,0,0,0\nx,0,0,0,0,0\n");
  expect_error(dir, {dir.file("pop.csv"), "-o", png}, 2,
               dir.file("pop.summary.csv") + ": line 3: column ka is \"x\", but must be a number");
}

// Replaces /summary/groups of the HDF5 file `path` by a `rows` x `cols` dataset whose attribute
// `columns` names `columns`.
void replace_groups(const std::string& path, hsize_t rows, hsize_t cols,
                    const std::vector<const char*>& columns) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Ldelete(file, "summary/groups", H5P_DEFAULT), 0);
  const hsize_t dims[2] = {rows, cols};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t dset = H5Dcreate2(file, "summary/groups", H5T_IEEE_F64LE, space, H5P_DEFAULT,
                                H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  const std::vector<double> values(static_cast<std::size_t>(rows * cols), 0.5);
  if (!values.empty()) {
    EXPECT_GE(H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  const hsize_t n = columns.size();
  const hid_t aspace = H5Screate_simple(1, &n, nullptr);
  const hid_t attr = H5Acreate2(dset, "columns", type, aspace, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Awrite(attr, type, columns.data()), 0);
  H5Aclose(attr);
  H5Sclose(aspace);
  H5Tclose(type);
  H5Dclose(dset);
  H5Sclose(space);
  H5Fclose(file);
}

TEST(PlotGroupsErrors, Hdf5GroupsThatDoNotMatchAreExitStatus2) {
  TempDir dir;
  run(dir, "pop", run_file("0.5, 1.0, 2.0", ""), {dir.file("a.h5"), dir.file("b.h5")});
  const std::string png = dir.file("x.png");
  replace_groups(dir.file("a.h5"), 2, 1, {"ka"});  // 2 groups, but 3 in the other datasets
  expect_error(dir, {dir.file("a.h5"), "-o", png}, 2,
               "HDF5 dataset /summary/mean has shape 3 x 9 x 3, but must have 2 x 9 x 3 (the 2 "
               "groups of /summary/groups x times x compartments)");
  replace_groups(dir.file("b.h5"), 3, 2, {"ka"});  // 2 values per group, 1 column named
  expect_error(dir, {dir.file("b.h5"), "-o", png}, 2,
               "HDF5 dataset /summary/groups has shape 3 x 2, but must have G x 1");
}

}  // namespace
}  // namespace pkscan::cli::test
