// Streamed run files: the run file mapped to the library's PopulationRun and run into the file
// sink of its output path (see population_run.hpp).
#include <memory>
#include <pkscan/config/population_run.hpp>
#include <pkscan/output/sink.hpp>
#include <string>

#include "load_sections.hpp"

namespace pkscan::config {

namespace detail {

PopulationRun population_parts(const RunSpec& spec) {
  PopulationRun run;
  run.problem.parameters = ParameterBatch(spec.problem.parameters.info_ptr(), 1);
  run.problem.grid = spec.problem.grid;  // the summaries' size (output times)
  run.problem.output = spec.problem.output;
  run.problem.doses = spec.problem.doses;
  run.options = spec.options;
  run.population = spec.population;
  run.replicates = spec.replicates;
  run.residual = spec.residual;
  run.lloq = spec.lloq;
  run.sweep = spec.sweep;
  run.dose_scaling = spec.dose_scaling;
  run.arms = spec.arms;
  run.trajectories = spec.stream.trajectories;
  run.summaries = spec.stream.summaries;
  run.percentiles = spec.stream.percentiles;
  run.summary_by = spec.stream.by;
  run.replicate_percentiles = spec.stream.replicate_percentiles;
  run.exact_percentiles = spec.stream.exact_percentiles;
  run.parameter_table = spec.stream.parameters.value_or(spec.population.has_value());
  run.run_text = spec.text;
  run.run_file = spec.file;
  return run;
}

}  // namespace detail

PopulationRun to_population_run(const RunSpec& spec) {
  PopulationRun run = detail::population_parts(spec);
  run.problem = spec.problem;
  return run;
}

DesignRun to_design_run(const RunSpec& spec) {
  DesignRun run;
  run.data = spec.dataset;
  if (spec.population) run.population = *spec.population;
  run.count = spec.design_count;
  run.occasion = spec.occasion;
  run.replicates = spec.replicates;
  run.residual = spec.residual;
  run.lloq = spec.lloq;
  run.lloq_column = spec.lloq_column;
  run.parameter_table = spec.stream.parameters.value_or(true);
  run.options = spec.options;
  return run;
}

PopulationRunReport run_streaming(const RunSpec& spec, const std::string& path,
                                  const PopulationRunOptions& options) {
  const PopulationRun run = to_population_run(spec);
  std::unique_ptr<ResultSink> sink = output::make_sink(path, population_layout(run));
  return run_population(run, *sink, options);
}

}  // namespace pkscan::config
