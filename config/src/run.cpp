// The run of a run file (see run.hpp): the choice between a grid, a dataset and a streamed run,
// made once here for the program and for library callers.
#include <memory>
#include <pkscan/config/population_run.hpp>
#include <pkscan/config/run.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>

namespace pkscan::config {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

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
      const DatasetResult result =
          simulate_dataset(*spec.dataset, spec.problem.parameters, spec.options);
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
      rep.summary = run_design(run, sink, progress, options.exchange);
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
