// Streamed run files: the run file mapped to the library's PopulationRun and run into the file
// sink of its output path (see population_run.hpp).
#include <memory>
#include <pkscan/config/population_run.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/population.hpp>
#include <string>

#include "load_sections.hpp"

namespace pkscan::config {

namespace {

PopulationSpec to_population_spec(const PopulationInput& in,
                                  const std::shared_ptr<const ModelInfo>& model) {
  PopulationSpec ps(model, in.count, in.seed);
  ps.typical = in.typical;
  ps.iiv = in.eta_columns;
  const auto m = static_cast<Eigen::Index>(in.eta_columns.size());
  ps.omega = Eigen::MatrixXd::Zero(m, m);
  for (Eigen::Index r = 0; r < m; ++r)
    for (Eigen::Index c = 0; c < m; ++c)
      ps.omega(r, c) = in.omega[static_cast<std::size_t>(r * m + c)];
  ps.covariate_names = in.covariate_names;
  ps.covariates = in.covariates;
  for (const PopulationInput::Effect& e : in.effects) {
    CovariateEffect ce;
    ce.parameter = e.column;
    ce.covariate = e.covariate;
    ce.model = e.power ? CovariateModel::Power : CovariateModel::Exponential;
    ce.theta = e.coefficient;
    ce.reference = e.reference;
    ps.effects.push_back(ce);
  }
  return ps;
}

}  // namespace

namespace detail {

PopulationRun population_parts(const RunSpec& spec) {
  PopulationRun run;
  run.problem.model = spec.problem.model;
  run.problem.parameters = ParameterBatch(spec.problem.parameters.info_ptr(), 1);
  run.options = spec.options;
  if (spec.population) {
    run.population = to_population_spec(*spec.population, spec.problem.parameters.info_ptr());
    run.replicates = spec.population->replicates;
  }
  run.sweep = spec.sweep;
  run.trajectories = spec.stream.trajectories;
  run.summaries = spec.stream.summaries;
  run.percentiles = spec.stream.percentiles;
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

StreamReport run_streaming(const RunSpec& spec, const std::string& path,
                           const StreamOptions& options) {
  const PopulationRun run = to_population_run(spec);
  std::unique_ptr<ResultSink> sink = output::make_sink(path, population_layout(run));
  return run_population(run, *sink, options);
}

}  // namespace pkscan::config
