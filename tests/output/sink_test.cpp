// The streaming result sinks (output/include/pkscan/output/sink.hpp): a small run simulated in
// chunks of consecutive subjects and streamed to the CSV sink. The CSV trajectories must equal
// write_csv's output for the same run; summary and metrics files hold the values given; no file
// is left behind without commit(). The HDF5 sink: sink_h5_test.cpp.
#include "support/sink_support.hpp"

namespace pkscan::output {
namespace {

// ---- CSV ----------------------------------------------------------------------------------------

class SinkCsv : public ::testing::TestWithParam<Precision> {};

TEST_P(SinkCsv, TrajectoriesEqualWriteCsvThenExtraColumns) {
  const Precision precision = GetParam();
  const ChunkedRun run(precision);
  TempDir dir;
  // The same run in one piece, written by write_csv (ids 1..N there, 101.. in the sink).
  const SimulationResult whole = simulate(run.full, options(precision));
  write_csv(whole, run.full.parameters.info(), dir.file("whole.csv"));
  {
    const std::unique_ptr<ResultSink> sink =
        make_sink(dir.file("pop.csv"), run.layout(precision, false));
    run.write_all(*sink, false);
    sink->commit();
  }
  const std::vector<std::string> expected = lines_of(dir.file("whole.csv"));
  const std::vector<std::string> got = lines_of(dir.file("pop.csv"));
  ASSERT_EQ(got.size(), expected.size());
  ASSERT_EQ(got.size(), 1u + kSubjects * (kSteps + 1));
  EXPECT_EQ(got[0], expected[0] + ",replicate,ka");
  for (std::size_t i = 1; i < got.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i + 1));
    const std::size_t subject = (i - 1) / (kSteps + 1);
    const std::vector<std::string> e = split(expected[i], ',');
    const std::vector<std::string> f = split(got[i], ',');
    ASSERT_EQ(f.size(), e.size() + 2);
    EXPECT_EQ(f[0], std::to_string(101 + subject));
    EXPECT_EQ(e[0], std::to_string(1 + subject));
    for (std::size_t k = 1; k < e.size(); ++k) EXPECT_EQ(f[k], e[k]) << "column " << k + 1;
    EXPECT_EQ(f[e.size()], subject < 3 ? "1" : "2");
    EXPECT_EQ(std::strtod(f[e.size() + 1].c_str(), nullptr), kKa[subject]);
  }
  // No summary was written and there are no metrics: only the trajectories (and write_csv's).
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"pop.csv", "whole.csv"}));
}

TEST_P(SinkCsv, SummaryAndMetricsFiles) {
  const Precision precision = GetParam();
  const ChunkedRun run(precision);
  TempDir dir;
  const RunLayout layout = run.layout(precision, true);
  {
    const std::unique_ptr<ResultSink> sink = make_csv_sink(dir.file("pop.csv"), layout);
    run.write_all(*sink, true);
    sink->write_summary(summary_table(layout));
    sink->commit();
  }
  EXPECT_EQ(dir.names(),
            (std::vector<std::string>{"pop.csv", "pop.metrics.csv", "pop.summary.csv"}));

  const std::vector<std::string> summary = lines_of(dir.file("pop.summary.csv"));
  ASSERT_EQ(summary.size(), 1u + kSteps + 1);
  EXPECT_EQ(summary[0],
            "time,mean_conc_depot,mean_conc_central,mean_conc_peripheral,"
            "p2.5_conc_depot,p2.5_conc_central,p2.5_conc_peripheral,"
            "p50_conc_depot,p50_conc_central,p50_conc_peripheral,"
            "p97.5_conc_depot,p97.5_conc_central,p97.5_conc_peripheral");
  for (int i = 0; i <= kSteps; ++i) {
    std::string want = g(i * kDt);
    for (int c = 0; c < 3; ++c) want += "," + g(i + 0.25 * c);
    for (int q = 0; q < 3; ++q)
      for (int c = 0; c < 3; ++c) want += "," + g(i + 0.25 * c + 0.125 * (q + 1));
    EXPECT_EQ(summary[static_cast<std::size_t>(i) + 1], want);
  }

  const std::vector<std::string> metrics = lines_of(dir.file("pop.metrics.csv"));
  ASSERT_EQ(metrics.size(), 1u + kSubjects);
  EXPECT_EQ(metrics[0], "id,replicate,ka,cmax,tmax,auc");
  for (int s = 0; s < kSubjects; ++s) {
    const std::vector<std::string> f = split(metrics[static_cast<std::size_t>(s) + 1], ',');
    ASSERT_EQ(f.size(), 6u);
    EXPECT_EQ(f[0], std::to_string(101 + s));
    EXPECT_EQ(f[1], s < 3 ? "1" : "2");
    EXPECT_EQ(std::strtod(f[2].c_str(), nullptr), kKa[s]);
    EXPECT_EQ(f[3], g(0.25 * (s + 1)));
    EXPECT_EQ(f[4], g(0.5 * s));
    EXPECT_EQ(f[5], g(10.0 + 0.125 * s));
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, SinkCsv,
                         ::testing::Values(Precision::Float64, Precision::Float32),
                         [](const auto& info) {
                           return info.param == Precision::Float64 ? "Float64" : "Float32";
                         });

TEST(SinkCsvLayout, WithoutTrajectoriesOnlySummaryAndMetrics) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  RunLayout layout = run.layout(Precision::Float64, true);
  layout.trajectories = false;
  {
    const std::unique_ptr<ResultSink> sink = make_sink(dir.file("pop.csv"), layout);
    run.write_all(*sink, true);
    sink->write_summary(summary_table(layout));
    sink->commit();
  }
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"pop.metrics.csv", "pop.summary.csv"}));
  EXPECT_EQ(lines_of(dir.file("pop.metrics.csv")).size(), 1u + kSubjects);
}

TEST(SinkCsvLayout, IdsDefaultToRowNumbers) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  RunLayout layout = run.layout(Precision::Float64, false);
  layout.extra_columns.clear();
  {
    const std::unique_ptr<ResultSink> sink = make_sink(dir.file("p.csv"), layout);
    for (std::size_t i = 0; i < run.parts.size(); ++i) {
      Chunk c;
      c.first = run.firsts[i];
      c.result = &run.parts[i];
      sink->write(c);  // no ids, no extra columns
    }
    sink->commit();
  }
  const std::vector<std::string> lines = lines_of(dir.file("p.csv"));
  ASSERT_EQ(lines.size(), 1u + kSubjects * (kSteps + 1));
  for (int s = 0; s < kSubjects; ++s)
    EXPECT_EQ(split(lines[1 + static_cast<std::size_t>(s) * (kSteps + 1)], ',')[0],
              std::to_string(s + 1));
}

// ---- Files only on commit, misuse --------------------------------------------------------------

class SinkFiles : public ::testing::TestWithParam<const char*> {};

TEST_P(SinkFiles, NothingLeftWithoutCommit) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  {
    const RunLayout layout = run.layout(Precision::Float64, true);
    const std::unique_ptr<ResultSink> sink =
        make_sink(dir.file(std::string("pop") + GetParam()), layout);
    EXPECT_FALSE(dir.names().empty());  // the temporary files exist while writing
    run.write_all(*sink, true);
    sink->write_summary(summary_table(layout));
  }  // destroyed without commit
  EXPECT_EQ(dir.names(), std::vector<std::string>{});
}

TEST_P(SinkFiles, CommitWithMissingRowsWritesNothing) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  {
    const std::unique_ptr<ResultSink> sink =
        make_sink(dir.file(std::string("pop") + GetParam()), run.layout(Precision::Float64, false));
    Chunk c;
    c.first = 0;
    c.result = &run.parts[0];
    c.extra = run.extra.data();
    c.parameters = run.full.parameters.values().data();
    sink->write(c);
    try {
      sink->commit();
      ADD_FAILURE() << "commit() accepted 2 of 5 rows";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("2 rows were written, but layout.rows is 5"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(dir.names(), std::vector<std::string>{});
}

TEST_P(SinkFiles, ChunksOutOfOrderAreRejected) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  const std::unique_ptr<ResultSink> sink =
      make_sink(dir.file(std::string("pop") + GetParam()), run.layout(Precision::Float64, false));
  Chunk c;
  c.first = 2;  // row 0 comes first
  c.result = &run.parts[1];
  c.extra = run.extra.data();
  c.parameters = run.full.parameters.values().data();
  try {
    sink->write(c);
    ADD_FAILURE() << "a chunk starting at row 2 was accepted first";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("chunk.first is 2, but must be 0"), std::string::npos)
        << e.what();
  }
}

TEST_P(SinkFiles, MissingDirectoryIsAnErrorWithoutOutput) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  const std::string path = dir.file(std::string("missing/pop") + GetParam());
  ::testing::internal::CaptureStderr();
  try {
    make_sink(path, run.layout(Precision::Float64, true));
    ADD_FAILURE() << "a sink was made in a missing directory";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot create output file " + path), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // the library printed nothing
  EXPECT_EQ(dir.names(), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Formats, SinkFiles, ::testing::Values(".csv", ".h5"),
                         [](const auto& info) {
                           return std::string(info.param) == ".csv" ? "Csv" : "Hdf5";
                         });

TEST(AtomicFileWrites, SmallAndLargeBlocksKeepTheirOrder) {
  // Small writes go through the 1 MiB buffer, blocks of 256 KiB or more straight to the file
  // (after the buffer): every byte must land in order, and only at commit().
  TempDir dir;
  const std::string path = dir.file("out.txt");
  std::string want;
  {
    AtomicFile f(path);
    auto put = [&](std::size_t n, char first) {
      std::string block(n, ' ');
      for (std::size_t i = 0; i < n; ++i) block[i] = static_cast<char>(first + i % 23);
      f.write(block.data(), block.size());
      want += block;
    };
    put(10, 'a');
    put(300000, 'b');  // large, after a buffered small write
    put(700000, 'c');  // small enough to buffer
    put(500000, 'd');  // buffered data is flushed first, then this block
    put(1 << 21, 'e');
    put(1, 'f');
    EXPECT_FALSE(fs::exists(path));
    f.commit();
  }
  EXPECT_EQ(read_text(path), want);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"out.txt"});
}

// A run split over processes: the chunks another rank formats (make_formatter) and rank 0's
// sink appends (write_formatted) give the files write() gives, byte for byte, with
// trajectories, metrics and a parameter table; bytes that no formatter of the layout made and
// formatted rows out of order are refused; an HDF5 result formats nothing.
TEST_P(SinkCsv, FormattedChunksGiveTheFilesOfWrite) {
  const Precision precision = GetParam();
  const ChunkedRun run(precision);
  TempDir dir;
  RunLayout layout = run.layout(precision, true);
  layout.parameter_table = {0, 1, 2};
  {
    const std::unique_ptr<ResultSink> sink = make_csv_sink(dir.file("a.csv"), layout);
    run.write_all(*sink, true);
    sink->commit();
  }
  // write_all's chunks, all but the first formatted apart.
  struct Split final : public ResultSink {
    ResultSink* to = nullptr;
    ResultSink* formatter = nullptr;
    std::vector<char> bytes;
    void write(const Chunk& c) override {
      if (c.first == 0) return to->write(c);
      ASSERT_TRUE(formatter->format(c, bytes));
      Chunk rows;  // its rows and result only
      rows.first = c.first;
      rows.result = c.result;
      to->write_formatted(rows, bytes);
    }
    void write_summary(const TimeSummaryTable&) override {}
    void commit() override {}
  } split;
  const std::unique_ptr<ResultSink> formatter = make_formatter(dir.file("b.csv"), layout);
  {
    const std::unique_ptr<ResultSink> sink = make_csv_sink(dir.file("b.csv"), layout);
    split.to = sink.get();
    split.formatter = formatter.get();
    run.write_all(split, true);
    sink->commit();
  }
  for (const char* f : {".csv", ".metrics.csv", ".parameters.csv"}) {
    SCOPED_TRACE(f);
    const std::string a = read_text(dir.file(std::string("a") + f));
    EXPECT_GT(a.size(), 100u);
    EXPECT_EQ(read_text(dir.file(std::string("b") + f)), a);
  }
  const std::unique_ptr<ResultSink> sink = make_csv_sink(dir.file("c.csv"), layout);
  Chunk rows;
  rows.result = &run.parts[0];
  std::vector<char> bad = split.bytes;
  bad.pop_back();
  EXPECT_THROW(sink->write_formatted(rows, bad), InvalidArgument);
  rows.first = 2;  // rows 0 and 1 not written yet
  EXPECT_THROW(sink->write_formatted(rows, split.bytes), InvalidArgument);
  EXPECT_THROW(formatter->write(rows), InvalidArgument);
  std::vector<char> none;
  Chunk c;
  c.result = &run.parts[0];
  EXPECT_FALSE(make_formatter(dir.file("d.h5"), layout)->format(c, none));
}

TEST(SinkChoice, ByExtension) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  const RunLayout layout = run.layout(Precision::Float64, false);
  for (const char* name : {"a.csv", "b.h5", "c.hdf5"}) {
    SCOPED_TRACE(name);
    const std::unique_ptr<ResultSink> sink = make_sink(dir.file(name), layout);
    EXPECT_NE(sink, nullptr);
  }
  for (const char* name : {"a.txt", "a.csv.gz", "a.H5", "a"}) {
    SCOPED_TRACE(name);
    try {
      make_sink(dir.file(name), layout);
      ADD_FAILURE() << "accepted " << name;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("but must end in .csv, .h5 or .hdf5"), std::string::npos) << what;
      EXPECT_EQ(e.file(), layout.run_file);
    }
  }
  EXPECT_EQ(dir.names(), std::vector<std::string>{});  // uncommitted sinks left nothing
}

// ---- Dataset rows formatted apart ---------------------------------------------------------------

// A dataset run's file from its header and its subjects' rows formatted in parts (sub-datasets
// of consecutive subjects simulated alone, as the ranks of a split run do) is write_dataset_csv's
// file of the whole run, byte for byte, and the parts' non-finite counts add up to its count.
TEST(DatasetRows, FormattedInPartsGiveTheFileOfWriteDatasetCsv) {
  const ModelInfo& model = model_info(ModelKind::ThreeCompartment);
  std::string text = "ID,TIME,AMT,CMT,EVID,DV,NOTE\n";
  for (int i = 1; i <= 5; ++i)
    text += std::to_string(i) + ",0,100,1,1,.,x\n" + std::to_string(i) + ",1,.,2,0," +
            (i == 2 ? "." : "1.5") + ",\"a,b\"\n" + std::to_string(i) + ",6,.,2,0,0.25,x\n";
  const Dataset data = parse_dataset(text, "rows.csv", model);
  ParameterBatch p(ModelKind::ThreeCompartment, 5);
  for (int s = 0; s < 5; ++s) {
    p.set("ka", s, 0.5 + 0.3 * s);
    p.set("ke", s, 0.2);
    p.set("k12", s, 0.4);
    p.set("k21", s, 0.11);
    p.set("v_central", s, s == 3 ? 1e-310 : 20);  // subject 4: concentrations overflow
    p.set("v_peripheral", s, 70);
  }
  TempDir dir;
  const std::int64_t whole =
      write_dataset_csv(simulate_dataset(data, p), data, model, dir.file("whole.csv"));
  EXPECT_EQ(whole, 1);
  std::vector<char> bytes;
  const std::string header = dataset_csv_header(data, model);
  bytes.assign(header.begin(), header.end());
  std::int64_t non_finite = 0;
  for (const auto& [first, n] : {std::pair{0, 2}, std::pair{2, 3}}) {
    Dataset part = data;
    part.subjects.assign(data.subjects.begin() + first, data.subjects.begin() + first + n);
    ParameterBatch rows(ModelKind::ThreeCompartment, n);
    std::copy_n(p.row(first), n * p.parameters(), rows.mutable_values());
    non_finite += format_dataset_rows(simulate_dataset(part, rows), part, bytes);
  }
  EXPECT_EQ(non_finite, whole);
  const std::string expected = read_text(dir.file("whole.csv"));
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), expected);
  EXPECT_NE(expected.find("\"a,b\""), std::string::npos);
}

}  // namespace
}  // namespace pkscan::output
