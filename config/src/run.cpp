// The run of a run file (see run.hpp): the choice between a grid, a dataset and a streamed run,
// made once here for the program and for library callers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <pkscan/config/population_run.hpp>
#include <pkscan/config/run.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/pkscan.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <utility>

namespace pkscan::config {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A dataset run split over processes (options.exchange): blocks of kBlock subjects, block
// u simulated by rank u mod size, which formats its rows (output::format_dataset_rows); rank 0
// writes them in dataset order under the header and commits once every rank has finished
// (run_units). The file is write_dataset_csv's, byte for byte: every subject is simulated alone.
RunReport run_dataset_split(const RunSpec& spec, const std::string& path, RunExchange& exchange) {
  constexpr std::int64_t kBlock = 1024;  // subjects per unit, as a population run's blocks
  const Dataset& data = *spec.dataset;
  const ParameterBatch& parameters = spec.problem.parameters;
  const auto subjects = static_cast<std::int64_t>(data.subjects.size());
  const std::int64_t units = (subjects + kBlock - 1) / kBlock;
  RunReport rep;
  rep.kind = RunKind::Dataset;
  std::unique_ptr<output::OutputUnit> unit;
  output::AtomicFile* out = nullptr;
  if (exchange.rank() == 0) {
    const std::string header = output::dataset_csv_header(data, parameters.info());
    unit = std::make_unique<output::OutputUnit>(path);
    out = &unit->add(path);
    for (const std::string& s : output::csv_companions(path)) unit->remove_on_commit(s);
    out->write(header.data(), header.size());
  }
  Dataset part;
  part.file = data.file;
  part.columns = data.columns;
  part.parameter_columns = data.parameter_columns;
  part.covariate_columns = data.covariate_columns;
  // A block's bytes: its non-finite subjects and rows (two int64), then its formatted rows.
  constexpr std::size_t kLead = 2 * sizeof(std::int64_t);
  const auto make = [&](std::int64_t u, std::vector<char>& bytes) {
    const std::int64_t first = u * kBlock;
    const std::int64_t n = std::min(kBlock, subjects - first);
    part.subjects.assign(data.subjects.begin() + first, data.subjects.begin() + first + n);
    ParameterBatch rows(parameters.info_ptr(), n);
    const std::size_t width = static_cast<std::size_t>(parameters.parameters());
    std::copy_n(parameters.row(first), static_cast<std::size_t>(n) * width, rows.mutable_values());
    const DatasetResult result = simulate_dataset(part, rows, spec.options);
    bytes.resize(kLead);
    const std::int64_t lead[2] = {output::format_dataset_rows(result, part, bytes), result.rows()};
    std::memcpy(bytes.data(), lead, kLead);
    if (exchange.rank() == 0 && u == 0) {
      rep.summary = result.summary;
      rep.summary.non_finite_subjects = 0;  // counted as the blocks are taken, below
    }
    if (exchange.rank() != 0) rep.rows += result.rows();
  };
  const auto take = [&](std::int64_t, const std::vector<char>& bytes) {
    std::int64_t lead[2];
    if (bytes.size() < kLead) throw Error("a dataset run's block arrived without its rows");
    std::memcpy(lead, bytes.data(), kLead);
    rep.summary.non_finite_subjects += lead[0];
    rep.rows += lead[1];
    out->write(bytes.data() + kLead, bytes.size() - kLead);
  };
  run_units(exchange, units, make, take, [&] { unit->commit(); });
  return rep;
}

// Runs f through spec.located (where the loader set it: the run's per-record values reported at
// their place).
void located(const RunSpec& spec, const std::function<void()>& f) {
  if (spec.located)
    spec.located(f);
  else
    f();
}

}  // namespace

void check_run(const RunSpec& spec) {
  if (spec.design())
    located(spec, [&] { check_design_run(to_design_run(spec)); });
  else if (spec.dataset)
    located(spec, [&] { check_dataset(*spec.dataset, spec.problem.parameters, spec.options); });
}

RunKind run_kind(const RunSpec& spec, const std::string& path) noexcept {
  if (spec.design()) return RunKind::Design;
  if (spec.dataset) return RunKind::Dataset;
  if (spec.streaming() || !ends_with(path, ".csv")) return RunKind::Streamed;
  return RunKind::Grid;
}

void check_output_path(const RunSpec& spec, const std::string& path) {
  if (!output::is_result_path(path))
    throw OutputPathError("output path is \"" + path + "\", but must end in .csv, .h5 or .hdf5");
  if (spec.dataset && !spec.design() && !ends_with(path, ".csv"))
    throw OutputPathError("output path is \"" + path +
                          "\", but a dataset run writes CSV: it must end in .csv");
  try {
    output::check_output_not_input(path, output::csv_companions(path), spec.inputs);
  } catch (const InvalidArgument& e) {
    throw OutputPathError(e.what());
  }
}

RunReport run(const RunSpec& spec, const std::string& path, const PopulationRunOptions& options) {
  // Fail before simulating when the result would replace an input, or cannot be committed
  // there (a directory, a name too long, a missing directory, no permission).
  check_output_path(spec, path);
  try {
    output::check_output_unit(path, output::csv_companions(path));
  } catch (const Error& e) {
    throw OutputPathError(e.what());
  }
  RunReport rep;
  rep.kind = run_kind(spec, path);
  switch (rep.kind) {
    case RunKind::Dataset: {
      if (options.exchange && options.exchange->size() > 1) {
        // Every rank checks the whole dataset first: an error names its subject as in one
        // process, and every rank stops before simulating.
        check_run(spec);
        return run_dataset_split(spec, path, *options.exchange);
      }
      DatasetResult result;
      located(spec, [&] {
        simulate_dataset_into(*spec.dataset, spec.problem.parameters, spec.options, result);
      });
      rep.summary = result.summary;
      rep.summary.non_finite_subjects =
          output::write_dataset_csv(result, *spec.dataset, spec.problem.parameters.info(), path,
                                    output::csv_companions(path));
      rep.rows = result.rows();
      return rep;
    }
    case RunKind::Design: {
      const DesignRun run = to_design_run(spec);
      // The rows written, counted as they pass (a resampled design's replicates differ).
      class Counting final : public DesignSink {
       public:
        explicit Counting(std::unique_ptr<DesignSink> s) : sink_(std::move(s)) {}
        void write(const DesignChunk& c) override {
          sink_->write(c);
          rows += c.result->rows();
        }
        void commit() override { sink_->commit(); }
        void write_formatted(std::int64_t replicate, std::int64_t n,
                             const std::vector<char>& bytes) override {
          sink_->write_formatted(replicate, n, bytes);
          rows += n;
        }
        std::int64_t rows = 0;

       private:
        std::unique_ptr<DesignSink> sink_;
      } sink(output::make_design_sink(path, design_layout(run), {spec.file, spec.text}));
      const std::int64_t per_replicate = design_rows(run);
      DesignProgressFn progress;
      if (options.progress)
        progress = [&](std::int64_t done, std::int64_t total) {
          options.progress(done * per_replicate, total * per_replicate);
        };
      located(spec, [&] { rep.summary = run_design(run, sink, progress, options.exchange); });
      rep.rows = sink.rows;
      return rep;
    }
    case RunKind::Streamed: {
      const PopulationRunReport r = run_streaming(spec, path, options);
      rep.summary = r.summary;
      rep.rows = r.rows;
      rep.summaries = spec.stream.summaries;
      rep.trajectories = spec.stream.trajectories;
      return rep;
    }
    case RunKind::Grid:
      if (options.exchange && options.exchange->size() > 1) {
        // Split over processes: streamed through the CSV sink, whose rows are write_csv's.
        const PopulationRunReport r = run_streaming(spec, path, options);
        rep.summary = r.summary;
        rep.rows = spec.problem.parameters.subjects();
        const OutputTimes& out = spec.problem.output;
        rep.times =
            out.all ? spec.problem.grid.steps + 1 : static_cast<std::int64_t>(out.steps.size());
        return rep;
      }
      break;
  }
  SimulateOptions so = spec.options;
  so.concentrations = false;  // the CSV writer divides by volumes as it writes
  const SimulationResult result = simulate(spec.problem, so);
  rep.summary = result.summary();
  rep.summary.non_finite_subjects =
      output::write_csv(result, spec.problem.parameters.info(), path, output::csv_companions(path));
  rep.rows = result.subjects();
  rep.times = result.times();
  return rep;
}

}  // namespace pkscan::config
