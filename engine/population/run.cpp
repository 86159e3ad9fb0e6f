// Population and sweep runs, chunk by chunk into a ResultSink (see pkscan/population_run.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <vector>

#include "api/plan.hpp"
#include "core/validate.hpp"
#include "population/residual.hpp"

namespace pkscan {

namespace {

const std::shared_ptr<const ModelInfo>& model_of(const PopulationRun& run) noexcept {
  return run.population ? run.population->model : run.problem.parameters.info_ptr();
}

std::int64_t base_subjects(const PopulationRun& run) noexcept {
  return run.population ? run.population->count : run.problem.parameters.subjects();
}

// The groups of a run's summaries: which rows form a group, and the group's values.
class Groups {
 public:
  explicit Groups(const PopulationRun& run) : sweep_(run.sweep) {
    SummaryBy by;
    if (run.summary_by)
      by = *run.summary_by;
    else
      by.columns = run.sweep.columns;
    replicate_ = by.replicate && run.replicates > 1;
    replicates_ = run.replicates;
    base_ = base_subjects(run);
    points_ = run.sweep.points();
    // Per swept parameter (sweep order): its stride in the sweep point index, and its stride in
    // the group index within a replicate (0 when the groups do not split by it).
    std::int64_t stride = 1;
    const std::size_t n = sweep_.columns.size();
    point_stride_.assign(n, 0);
    group_stride_.assign(n, 0);
    for (std::size_t k = n; k-- > 0;) {
      point_stride_[k] = stride;
      stride *= static_cast<std::int64_t>(sweep_.values[k].size());
    }
    for (std::size_t k = n; k-- > 0;)
      if (std::find(by.columns.begin(), by.columns.end(), sweep_.columns[k]) != by.columns.end()) {
        group_stride_[k] = per_replicate_;
        per_replicate_ *= static_cast<std::int64_t>(sweep_.values[k].size());
        split_.push_back(k);
      }
    std::reverse(split_.begin(), split_.end());
  }

  // Names of the grouping columns, in extra_columns order.
  std::vector<std::string> columns(const ModelInfo& model) const {
    std::vector<std::string> names;
    if (replicate_) names.emplace_back("replicate");
    for (std::size_t k : split_)
      names.push_back(model.parameters[static_cast<std::size_t>(sweep_.columns[k])].name);
    return names;
  }
  // Groups kept at once, and in all.
  std::int64_t live() const noexcept { return per_replicate_; }
  std::int64_t total() const noexcept {
    return replicate_ ? per_replicate_ * replicates_ : per_replicate_;
  }
  bool by_replicate() const noexcept { return replicate_; }
  // Index among the live groups of the rows of sweep point `point`.
  std::int64_t live_index(std::int64_t point) const noexcept {
    std::int64_t g = 0;
    for (std::size_t k : split_) g += value_index(point, k) * group_stride_[k];
    return g;
  }
  // Index among the live groups of row r.
  std::int64_t live_index_of_row(std::int64_t r) const noexcept {
    return live_index((r % (points_ * base_)) / base_);
  }
  // The last row + 1 of the rows from `r` on that stay in r's group, at most `limit`.
  std::int64_t run_end(std::int64_t r, std::int64_t limit) const noexcept {
    const std::int64_t g = live_index_of_row(r);
    const std::int64_t rep = r / (points_ * base_);
    std::int64_t end = (r / base_ + 1) * base_;
    while (end < limit && end / (points_ * base_) == rep && live_index_of_row(end) == g)
      end += base_;
    return std::min(end, limit);
  }
  // The values of live group g of replicate rep (0-based): the table's `group`.
  std::vector<double> values(std::int64_t rep, std::int64_t g) const {
    std::vector<double> v;
    if (replicate_) v.push_back(static_cast<double>(rep + 1));
    for (std::size_t k : split_) {
      const std::int64_t idx =
          (g / group_stride_[k]) % static_cast<std::int64_t>(sweep_.values[k].size());
      v.push_back(sweep_.values[k][static_cast<std::size_t>(idx)]);
    }
    return v;
  }

 private:
  std::int64_t value_index(std::int64_t point, std::size_t k) const noexcept {
    return (point / point_stride_[k]) % static_cast<std::int64_t>(sweep_.values[k].size());
  }

  const Sweep& sweep_;
  bool replicate_ = false;
  std::int64_t replicates_ = 1, base_ = 1, points_ = 1, per_replicate_ = 1;
  std::vector<std::int64_t> point_stride_, group_stride_;
  std::vector<std::size_t> split_;  // swept parameters (sweep order) that split the groups
};

// The rows of output times of the run's summaries (times x compartments).
std::int64_t output_times(const PopulationRun& run) noexcept {
  const Problem& p = run.problem;
  return p.output.all ? p.grid.steps + 1 : static_cast<std::int64_t>(p.output.steps.size());
}

void check_run(const PopulationRun& run) {
  if (!model_of(run))
    throw InvalidArgument("run_population: the run has no model (population.model is null)");
  if (run.replicates < 1)
    throw InvalidArgument("run_population: replicates is " + std::to_string(run.replicates) +
                          ", but must be >= 1");
  if (run.sweep.columns.size() != run.sweep.values.size())
    throw InvalidArgument("run_population: sweep.columns has " +
                          std::to_string(run.sweep.columns.size()) + " entries, but sweep.values " +
                          std::to_string(run.sweep.values.size()));
  const int n = static_cast<int>(model_of(run)->parameters.size());
  for (std::size_t k = 0; k < run.sweep.columns.size(); ++k) {
    if (run.sweep.columns[k] < 0 || run.sweep.columns[k] >= n)
      throw InvalidArgument("run_population: sweep.columns[" + std::to_string(k) + "] is " +
                            std::to_string(run.sweep.columns[k]) + ", but must be in [0, " +
                            std::to_string(n) + ")");
    if (run.sweep.values[k].empty())
      throw InvalidArgument("run_population: sweep.values[" + std::to_string(k) +
                            "] is empty, but must hold at least one value");
  }
  if (run.summaries) detail::check_percentiles("run_population", run.percentiles, true);
  if (!run.replicate_percentiles.empty()) {
    if (!run.summaries || run.replicates < 2 || !run.summary_by || !run.summary_by->replicate)
      throw InvalidArgument(
          "run_population: summaries across replicates need the summaries grouped by "
          "replicate and at least 2 replicates",
          "replicate_percentiles", "", "");
    detail::check_percentiles("run_population", run.replicate_percentiles, true,
                              "replicate_percentiles");
  }
  if (run.summary_by)
    for (std::size_t k = 0; k < run.summary_by->columns.size(); ++k) {
      const int c = run.summary_by->columns[k];
      const auto& sc = run.sweep.columns;
      const std::string field = "summary_by.columns[" + std::to_string(k) + "]";
      if (std::find(sc.begin(), sc.end(), c) == sc.end())
        throw InvalidArgument("run_population: " + field + " is " + std::to_string(c) +
                                  ", but must be a swept column (an entry of sweep.columns)",
                              field, std::to_string(c), "an entry of sweep.columns");
      const auto& bc = run.summary_by->columns;
      if (std::find(bc.begin(), bc.begin() + static_cast<std::ptrdiff_t>(k), c) !=
          bc.begin() + static_cast<std::ptrdiff_t>(k))
        throw InvalidArgument("run_population: " + field + " repeats column " + std::to_string(c),
                              field, std::to_string(c), "a column not listed before");
    }
  // Values: each under its parameter's rule. A population run is a run on a time grid, where
  // every subject gets the same doses: bioavailability and lag cannot vary between subjects.
  const ModelInfo& model = *model_of(run);
  auto grid_dose_parameter = [&](int column) {
    const ParameterRole r = model.parameters[static_cast<std::size_t>(column)].role;
    return r == ParameterRole::Bioavailability || r == ParameterRole::Lag;
  };
  const std::string fixed =
      ": bioavailability and lag cannot vary between subjects in a run on a time grid (every "
      "subject gets the same doses there); use a dataset run (subjects.dataset) for per-subject "
      "bioavailability and lag";
  for (std::size_t k = 0; k < run.sweep.columns.size(); ++k) {
    const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(run.sweep.columns[k])];
    const std::string field = "sweep.columns[" + std::to_string(k) + "]";
    if (grid_dose_parameter(run.sweep.columns[k]))
      throw DomainError("run_population: a sweep over " + pi.name + fixed, field, pi.name, "");
    for (std::size_t j = 0; j < run.sweep.values[k].size(); ++j) {
      const double v = run.sweep.values[k][j];
      if (!parameter_value_ok(pi.role, v))
        throw DomainError("run_population: sweep value " + std::to_string(j + 1) + " of " +
                              pi.name + " is " + format_value(v) + ", but must be " +
                              parameter_rule(pi.role),
                          "sweep.values[" + std::to_string(k) + "][" + std::to_string(j) + "]",
                          format_value(v), parameter_rule(pi.role));
    }
  }
  if (run.residual) {
    detail::check_residual("run_population", *run.residual);
    if (!run.population)
      throw InvalidArgument(
          "run_population: a residual error needs a population (its draws come from its seed)",
          "residual", "", "");
    if (!run.trajectories)
      throw InvalidArgument(
          "run_population: a residual error needs trajectories (each row's observations are "
          "written with them)",
          "residual", "", "");
  }
  if (!std::isnan(run.lloq)) {
    if (!run.residual)
      throw InvalidArgument(
          "run_population: lloq needs a residual error (BLQ flags the simulated "
          "observations)",
          "lloq", format_value(run.lloq), "");
    detail::check_lloq("run_population", run.lloq);
  }
  if (run.summaries) {
    const long double need = population_summary_bytes(run);
    const std::uint64_t limit = result_byte_limit(run.options);
    if (need > static_cast<long double>(limit)) {
      const std::int64_t live = Groups(run).live();
      const auto gib = [](long double b) {
        char text[32];
        std::snprintf(text, sizeof text, "%.3g", static_cast<double>(b / 1073741824.0L));
        return std::string(text);
      };
      throw DomainError("run_population: the summaries of " + std::to_string(live) +
                            " groups kept at once need " + gib(need) + " GiB, but only " +
                            gib(static_cast<long double>(limit)) +
                            " GiB are available; group the summaries by fewer swept parameters, "
                            "by replicate as well, or use fewer output times",
                        "summary_by", std::to_string(live) + " groups", "");
    }
  }
  if (run.population) {
    const PopulationSpec& pop = *run.population;
    if (pop.typical.size() == model.parameters.size() &&
        !default_bioavailability_and_lag(model, pop.typical.data()))
      for (std::size_t c = 0; c < pop.typical.size(); ++c)
        if (grid_dose_parameter(static_cast<int>(c)) &&
            pop.typical[c] != model.parameters[c].default_value) {
          const std::string rule = format_value(model.parameters[c].default_value) +
                                   " in a run on a time grid (every subject gets the same doses "
                                   "there); use a dataset run (subjects.dataset) for per-subject "
                                   "bioavailability and lag";
          throw DomainError("run_population: the typical value of " + model.parameters[c].name +
                                " is " + format_value(pop.typical[c]) + ", but must be " + rule,
                            "population.typical[" + std::to_string(c) + "]",
                            format_value(pop.typical[c]), rule);
        }
    for (std::size_t a = 0; a < pop.iiv.size(); ++a)
      if (pop.iiv[a] >= 0 && pop.iiv[a] < n && grid_dose_parameter(pop.iiv[a]))
        throw DomainError("run_population: iiv on " +
                              model.parameters[static_cast<std::size_t>(pop.iiv[a])].name + fixed,
                          "population.iiv[" + std::to_string(a) + "]",
                          model.parameters[static_cast<std::size_t>(pop.iiv[a])].name, "");
    for (std::size_t e = 0; e < pop.effects.size(); ++e) {
      const int c = pop.effects[e].parameter;
      if (c >= 0 && c < n && grid_dose_parameter(c))
        throw DomainError("run_population: covariate effect " + std::to_string(e + 1) + " on " +
                              model.parameters[static_cast<std::size_t>(c)].name + fixed,
                          "population.effects[" + std::to_string(e) + "].parameter",
                          model.parameters[static_cast<std::size_t>(c)].name, "");
    }
  }
}

}  // namespace

void check_population_run(const PopulationRun& run) {
  check_run(run);
  if (run.population) (void)PopulationSampler(*run.population);  // checks in its constructor
}

std::int64_t population_summary_groups(const PopulationRun& run) {
  return run.summaries ? Groups(run).total() : 0;
}

long double population_summary_bytes(const PopulationRun& run) {
  if (!run.summaries) return 0.0L;
  const TimeSummaryOptions options;
  const int compartments = static_cast<int>(model_of(run)->compartments.size());
  const auto live = static_cast<long double>(Groups(run).live());
  // Summaries across replicates keep every replicate's statistics of each group.
  const long double across = run.replicate_percentiles.empty()
                                 ? 0.0L
                                 : 8.0L * live * static_cast<long double>(run.replicates) *
                                       static_cast<long double>(output_times(run)) * compartments *
                                       static_cast<long double>(1 + run.percentiles.size());
  return live * static_cast<long double>(
                    TimeSummary::state_bytes_for(output_times(run), compartments, options)) +
         8.0L * static_cast<long double>(options.exact_values) + across;
}

std::int64_t population_rows(const PopulationRun& run) noexcept {
  return run.replicates * run.sweep.points() * base_subjects(run);
}

RunLayout population_layout(const PopulationRun& run) {
  check_run(run);
  const Problem& base = run.problem;
  const ModelInfo& model = *model_of(run);
  RunLayout layout;
  layout.model = model_of(run);
  if (base.output.all) {
    layout.times.reserve(static_cast<std::size_t>(base.grid.steps + 1));
    for (std::int64_t i = 0; i <= base.grid.steps; ++i) layout.times.push_back(base.grid.time(i));
  } else {
    for (std::int64_t s : base.output.steps) layout.times.push_back(base.grid.time(s));
  }
  layout.precision = run.options.precision;
  layout.threads = run.options.threads;
  layout.rows = population_rows(run);
  if (run.replicates > 1) layout.extra_columns.push_back("replicate");
  for (int c : run.sweep.columns)
    layout.extra_columns.push_back(model.parameters[static_cast<std::size_t>(c)].name);
  if (run.summaries) {
    layout.metric_names = metric_names();
    layout.metric_compartment = model.default_observation_compartment;
    const Groups groups(run);
    layout.summary_columns = groups.columns(model);
    layout.summary_groups = groups.total();
    if (!run.replicate_percentiles.empty()) {
      layout.replicate_summary_columns.assign(layout.summary_columns.begin() + 1,
                                              layout.summary_columns.end());
      layout.replicate_summary_groups = groups.live();
    }
  }
  if (run.population)
    for (int c : run.population->iiv)
      layout.eta_columns.push_back("eta_" + model.parameters[static_cast<std::size_t>(c)].name);
  if (run.parameter_table) {
    // The columns the run gives: a typical value or the subjects' values (a column the run does
    // not give is NaN for every row), and the swept ones.
    const double* given = run.population                   ? run.population->typical.data()
                          : base.parameters.subjects() > 0 ? base.parameters.row(0)
                                                           : nullptr;
    for (int c = 0; c < static_cast<int>(model.parameters.size()); ++c) {
      const auto& sc = run.sweep.columns;
      if ((given != nullptr && !std::isnan(given[c])) ||
          std::find(sc.begin(), sc.end(), c) != sc.end())
        layout.parameter_table.push_back(c);
    }
  }
  layout.observations = run.residual.has_value();
  layout.blq = run.residual.has_value() && !std::isnan(run.lloq);
  layout.trajectories = run.trajectories;
  layout.run_text = run.run_text;
  layout.run_file = run.run_file;
  return layout;
}

namespace {

// IPRED (the observed compartment's concentration, float64) and DV with the run's residual
// error for rows [first, first + n) of a chunk, and BLQ flags with an LLOQ.
template <class Real>
void observe_rows(const PopulationRun& run, const RunLayout& layout, const SimulationResult& r,
                  const Array<Real>& amounts, std::int64_t first, std::int64_t per_rep,
                  std::int64_t n_base, double* ipred, double* dv, std::int8_t* blq) {
  const ResidualError& e = *run.residual;
  const std::int64_t nt = r.times();
  const int nc = r.compartments();
  const int obs = layout.model->default_observation_compartment;
  const std::uint64_t seed = run.population->seed;
  const bool flag = layout.blq;
  const std::int64_t n = r.subjects();
#pragma omp parallel num_threads(resolve_threads(run.options.threads))
  {
    std::vector<double> z(static_cast<std::size_t>(2 * nt));
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < n; ++s) {
      const std::int64_t row = first + s;
      residual_normals(seed, row / per_rep, row % n_base, 2 * nt, z.data());
      const double v = r.volume(s, obs);
      for (std::int64_t t = 0; t < nt; ++t) {
        const std::size_t k = static_cast<std::size_t>(s * nt + t);
        const double c = static_cast<double>(amounts.data()[(s * nt + t) * nc + obs]) / v;
        const double e1 = z[static_cast<std::size_t>(2 * t)];
        const double e2 = z[static_cast<std::size_t>(2 * t + 1)];
        const double y = detail::observation(e, c, e1, e2);
        ipred[k] = c;
        dv[k] = y;
        if (flag) blq[k] = y < run.lloq ? 1 : 0;
      }
    }
  }
}

void observe(const PopulationRun& run, const RunLayout& layout, const SimulationResult& r,
             std::int64_t first, std::int64_t n, std::int64_t per_rep, std::int64_t n_base,
             std::vector<double>& ipred, std::vector<double>& dv, std::vector<std::int8_t>& blq) {
  const auto values = static_cast<std::size_t>(n * r.times());
  ipred.resize(values);
  dv.resize(values);
  blq.resize(layout.blq ? values : 0);
  if (r.precision() == Precision::Float64)
    observe_rows(run, layout, r, r.amounts_f64(), first, per_rep, n_base, ipred.data(), dv.data(),
                 blq.data());
  else
    observe_rows(run, layout, r, r.amounts_f32(), first, per_rep, n_base, ipred.data(), dv.data(),
                 blq.data());
}

}  // namespace

PopulationRunReport run_population(const PopulationRun& spec, ResultSink& sink,
                                   const PopulationRunOptions& options) {
  const RunLayout layout = population_layout(spec);  // checks the run first
  const Problem& base = spec.problem;
  const std::shared_ptr<const ModelInfo>& model_ptr = model_of(spec);
  const ModelInfo& model = *model_ptr;
  const int n_params = static_cast<int>(model.parameters.size());
  const std::int64_t n_base = base_subjects(spec);
  const std::int64_t points = spec.sweep.points();
  const std::int64_t per_rep = points * n_base;
  const std::int64_t total = population_rows(spec);
  const bool with_replicate = spec.replicates > 1;

  SimulateOptions sim = spec.options;
  sim.concentrations = false;  // sinks and summaries divide by volumes as they read
  const std::vector<double>& times = layout.times;

  // Rows per call: the engine's plan for this run.
  Problem planned = base;
  planned.parameters = ParameterBatch(model_ptr, 1);  // the run's model (a population's)
  const std::int64_t chunk = detail::plan_chunk_rows(planned, sim, total, options.chunk_rows,
                                                     spec.summaries && !spec.trajectories);

  const int n_extra = static_cast<int>(layout.extra_columns.size());
  const int n_metrics = static_cast<int>(layout.metric_names.size());

  std::unique_ptr<PopulationSampler> sampler;
  if (spec.population) sampler = std::make_unique<PopulationSampler>(*spec.population);

  // One summary per live group (see population_run.hpp); they share the exact-value budget.
  const Groups groups(spec);
  std::vector<TimeSummary> summaries;
  const auto start_summaries = [&] {
    summaries.clear();
    if (!spec.summaries) return;
    TimeSummaryOptions to;
    to.percentiles = spec.percentiles;
    to.threads = sim.threads;
    to.exact_values /= groups.live();
    for (std::int64_t g = 0; g < groups.live(); ++g)
      summaries.emplace_back(times, static_cast<int>(model.compartments.size()), to);
  };
  // Summaries across replicates: per live group, every replicate's statistics (times x
  // compartments x (mean, percentiles)), in replicate order.
  const bool across = !spec.replicate_percentiles.empty();
  const std::size_t n_stats = 1 + spec.percentiles.size();
  std::vector<std::vector<double>> kept(across ? static_cast<std::size_t>(groups.live()) : 0);
  const auto write_summaries = [&](std::int64_t rep) {
    for (std::int64_t g = 0; g < groups.live(); ++g) {
      TimeSummaryTable t = summaries[static_cast<std::size_t>(g)].finish();
      if (!layout.summary_columns.empty()) t.group = groups.values(rep, g);
      sink.write_summary(t);
      if (!across) continue;
      std::vector<double>& k = kept[static_cast<std::size_t>(g)];
      const std::size_t rows = t.mean.size();  // times x compartments
      for (std::size_t i = 0; i < rows; ++i) {
        k.push_back(t.mean[i]);
        for (std::size_t q = 0; q + 1 < n_stats; ++q)
          k.push_back(t.quantiles[i * (n_stats - 1) + q]);
      }
    }
  };
  const auto write_across = [&] {
    ReplicateSummaryTable a;
    a.times = times;
    a.compartments = static_cast<int>(model.compartments.size());
    a.statistics.emplace_back("mean");
    for (double q : spec.percentiles) a.statistics.push_back("p" + format_value(q));
    a.percentiles = spec.replicate_percentiles;
    a.replicates = spec.replicates;
    const std::size_t block = times.size() * model.compartments.size() * n_stats;
    std::vector<double> v(static_cast<std::size_t>(spec.replicates));
    for (std::int64_t g = 0; g < groups.live(); ++g) {
      const std::vector<double>& k = kept[static_cast<std::size_t>(g)];
      a.values.assign(block * a.percentiles.size(), 0.0);
      for (std::size_t i = 0; i < block; ++i) {
        bool finite = true;
        for (std::size_t r = 0; r < v.size(); ++r) {
          v[r] = k[r * block + i];
          finite = finite && !std::isnan(v[r]);
        }
        std::sort(v.begin(), v.end());
        for (std::size_t q = 0; q < a.percentiles.size(); ++q)
          a.values[i * a.percentiles.size() + q] = finite
                                                       ? sorted_percentile(v, a.percentiles[q])
                                                       : std::numeric_limits<double>::quiet_NaN();
      }
      a.group = groups.values(0, g);
      a.group.erase(a.group.begin());  // without the replicate
      sink.write_replicate_summary(a);
    }
  };
  start_summaries();
  const double last_dose = last_dose_time(base.doses);

  Engine engine;
  SimulationResult result;
  Problem problem = base;
  std::vector<std::int64_t> ids;
  std::vector<double> extra;
  std::vector<double> metrics;
  std::vector<double> etas;
  const int n_etas = static_cast<int>(layout.eta_columns.size());
  std::vector<double> ipred, dv;
  std::vector<std::int8_t> blq;
  PopulationRunReport report;
  // Sweep index -> value of each swept parameter (first parameter slowest).
  auto sweep_value = [&](std::int64_t point, std::size_t k) {
    std::int64_t stride = 1;
    for (std::size_t j = k + 1; j < spec.sweep.values.size(); ++j)
      stride *= static_cast<std::int64_t>(spec.sweep.values[j].size());
    const std::int64_t idx =
        (point / stride) % static_cast<std::int64_t>(spec.sweep.values[k].size());
    return spec.sweep.values[k][static_cast<std::size_t>(idx)];
  };

  for (std::int64_t first = 0, n = 0; first < total; first += n) {
    // A call's rows stay in one summary group.
    n = spec.summaries ? groups.run_end(first, std::min(total, first + chunk)) - first
                       : std::min(chunk, total - first);
    // Every value of the chunk is written below (sampled or copied), so a batch of the same size
    // is reused rather than allocated and faulted in again.
    if (problem.parameters.subjects() != n || &problem.parameters.info() != model_ptr.get())
      problem.parameters = ParameterBatch(model_ptr, n);
    double* rows = problem.parameters.mutable_values();  // n x n_params, filled below
    ids.resize(static_cast<std::size_t>(n));
    extra.resize(static_cast<std::size_t>(n * n_extra));
    etas.resize(static_cast<std::size_t>(n * n_etas));
    // Fill the chunk segment by segment: a segment is a run of rows with the same replicate
    // and sweep point, i.e. consecutive subjects of the base population.
    std::int64_t r = first;
    while (r < first + n) {
      const std::int64_t rep = r / per_rep;
      const std::int64_t point = (r % per_rep) / n_base;
      const std::int64_t subj = r % n_base;
      const std::int64_t len = std::min(first + n - r, n_base - subj);
      double* out = rows + (r - first) * n_params;
      if (sampler) {
        sampler->sample(rep, subj, len, out, n_etas ? etas.data() + (r - first) * n_etas : nullptr);
      } else {
        for (std::int64_t i = 0; i < len; ++i)
          std::copy_n(base.parameters.row(subj + i), n_params, out + i * n_params);
      }
      for (std::size_t k = 0; k < spec.sweep.columns.size(); ++k) {
        const int col = spec.sweep.columns[k];
        const double v = sweep_value(point, k);
        // With a population the grid value is the typical value: individual values scale with
        // it (parameter = typical * effects * exp(eta)).
        const double typical =
            sampler ? spec.population->typical[static_cast<std::size_t>(col)] : 0.0;
        for (std::int64_t i = 0; i < len; ++i) {
          double& x = out[i * n_params + col];
          x = (sampler && typical != 0.0 && std::isfinite(typical)) ? x * (v / typical) : v;
        }
      }
      for (std::int64_t i = 0; i < len; ++i) {
        const std::int64_t row = r - first + i;
        ids[static_cast<std::size_t>(row)] = point * n_base + subj + i + 1;
        double* e = extra.data() + row * n_extra;
        int k = 0;
        if (with_replicate) e[k++] = static_cast<double>(rep + 1);
        for (std::size_t j = 0; j < spec.sweep.columns.size(); ++j) e[k++] = sweep_value(point, j);
      }
      r += len;
    }
    // The chunk's first subject with bad parameters, found in parallel; its message below.
    for (std::int64_t i = first_rejected_row(model, rows, n, false); i < n; ++i) {
      const double* row = rows + i * n_params;
      const std::string msg = check_parameters(model, row);
      if (!msg.empty()) {
        const std::int64_t g = first + i;
        throw DomainError((with_replicate ? "replicate " + std::to_string(g / per_rep + 1) + ", "
                                          : std::string()) +
                          "subject " + std::to_string(ids[static_cast<std::size_t>(i)]) + ": " +
                          msg);
      }
    }
    if (spec.summaries) {
      TimeSummary& summary = summaries[static_cast<std::size_t>(groups.live_index_of_row(first))];
      metrics.resize(static_cast<std::size_t>(n * n_metrics));
      if (spec.trajectories) {
        engine.simulate_into(problem, sim, result);
        summary.add(result, layout.metric_compartment, last_dose, metrics.data());
      } else {
        // Summaries only: the engine summarises as it simulates (fused) when it can.
        engine.summarize_into(problem, sim, summary, layout.metric_compartment, last_dose,
                              metrics.data(), result);
      }
    } else {
      engine.simulate_into(problem, sim, result);
    }
    if (spec.residual) observe(spec, layout, result, first, n, per_rep, n_base, ipred, dv, blq);
    Chunk c;
    c.first = first;
    c.result = &result;
    c.ids = ids.data();
    c.extra = n_extra ? extra.data() : nullptr;
    c.parameters = rows;
    c.metrics = spec.summaries ? metrics.data() : nullptr;
    c.etas = n_etas ? etas.data() : nullptr;
    if (layout.observations) {
      c.ipred = ipred.data();
      c.dv = dv.data();
    }
    if (layout.blq) c.blq = blq.data();
    sink.write(c);
    // A replicate's groups are complete after its last row.
    if (spec.summaries && groups.by_replicate() && (first + n) % per_rep == 0) {
      write_summaries((first + n) / per_rep - 1);
      if (first + n < total) start_summaries();
    }
    const RunSummary& s = result.summary();
    report.summary.method = s.method;
    report.summary.device = s.device;
    report.summary.threads = s.threads;
    report.summary.prepare_seconds += s.prepare_seconds;
    report.summary.scan_seconds += s.scan_seconds;
    report.summary.non_finite_subjects += s.non_finite_subjects;
    report.rows += n;
    ++report.chunks;
    if (options.progress) options.progress(report.rows, total);
  }
  if (spec.summaries && !groups.by_replicate()) write_summaries(0);
  if (across) write_across();
  sink.commit();
  return report;
}

}  // namespace pkscan
