// pkscan.simulate_population: virtual populations, replicates and parameter sweeps without a run
// file, through the library's population driver (pkscan::run_population) into a sink that keeps
// the summaries and the per-subject metrics in memory (and the amounts when asked for); and the
// readers of a population's typical values, variability and residual error (bindings.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <pkscan/checks.hpp>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"

namespace pkscan::python {

namespace {

// Keeps what the driver hands over: ids, extra columns, parameters, metrics, optionally the
// amounts (float64), and the summary table.
class MemorySink final : public ResultSink {
 public:
  // Reserves every table for the layout's rows up front (the size check counted them).
  explicit MemorySink(const RunLayout& layout) : layout_(layout) {
    const auto rows = static_cast<std::size_t>(layout.rows);
    ids.reserve(rows);
    extra.reserve(rows * layout.extra_columns.size());
    etas.reserve(rows * layout.eta_columns.size());
    parameters.reserve(rows * layout.model->parameters.size());
    metrics.reserve(rows * layout.metric_names.size());
    ok.reserve(rows);
    if (layout.trajectories)
      amounts.reserve(rows * layout.times.size() * layout.model->compartments.size());
  }

  void write(const Chunk& c) override {
    const SimulationResult& r = *c.result;
    const std::int64_t n = r.subjects();
    const auto np = static_cast<std::int64_t>(layout_.model->parameters.size());
    const auto ne = static_cast<std::int64_t>(layout_.extra_columns.size());
    const auto nm = static_cast<std::int64_t>(layout_.metric_names.size());
    for (std::int64_t s = 0; s < n; ++s) ids.push_back(c.ids ? c.ids[s] : c.first + s + 1);
    if (ne) extra.insert(extra.end(), c.extra, c.extra + n * ne);
    // An arm with its own times: its values at the run's times (layout.times, the union of
    // the arms'), NaN (BLQ 0) where the arm does not sample.
    const std::vector<std::int64_t> at =
        n > 0 && ne > 0 ? positions(static_cast<std::int64_t>(c.extra[0]) - 1) : identity();
    const auto nt = static_cast<std::int64_t>(layout_.times.size());
    const auto padded = [&](auto& to, const auto* from, std::int64_t per_time, auto fill) {
      if (static_cast<std::int64_t>(at.size()) == nt) {
        to.insert(to.end(), from, from + n * nt * per_time);
        return;
      }
      const auto k = static_cast<std::int64_t>(at.size());
      for (std::int64_t s = 0; s < n; ++s) {
        const std::size_t base = to.size();
        to.insert(to.end(), static_cast<std::size_t>(nt * per_time), fill);
        for (std::int64_t i = 0; i < k; ++i)
          std::copy_n(from + (s * k + i) * per_time, per_time,
                      to.begin() + static_cast<std::ptrdiff_t>(base) + at[i] * per_time);
      }
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (layout_.observations) {
      padded(ipred, c.ipred, 1, nan);
      padded(dv, c.dv, 1, nan);
      if (layout_.blq) padded(blq, c.blq, 1, std::int8_t{0});
    }
    const auto neta = static_cast<std::int64_t>(layout_.eta_columns.size());
    if (neta) etas.insert(etas.end(), c.etas, c.etas + n * neta);
    parameters.insert(parameters.end(), c.parameters, c.parameters + n * np);
    if (nm) metrics.insert(metrics.end(), c.metrics, c.metrics + n * nm);
    for (SubjectStatus st : r.status()) ok.push_back(st == SubjectStatus::Ok);
    if (layout_.trajectories) {
      if (r.precision() == Precision::Float64) {
        padded(amounts, r.amounts_f64().data(), r.compartments(), nan);
      } else {
        const std::vector<double> wide(r.amounts_f32().begin(), r.amounts_f32().end());
        padded(amounts, wide.data(), r.compartments(), nan);
      }
    }
  }
  // A group's table at the run's times (NaN where its arm does not sample).
  void write_summary(const TimeSummaryTable& t) override {
    summaries.push_back(t);
    const auto nt = layout_.times.size();
    if (t.times.size() == nt) return;
    TimeSummaryTable& w = summaries.back();
    const std::size_t per = t.mean.size() / t.times.size();  // compartments
    const std::size_t perq = t.quantiles.size() / t.times.size();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    w.times = layout_.times;
    w.mean.assign(nt * per, nan);
    w.quantiles.assign(nt * perq, nan);
    for (std::size_t i = 0; i < t.times.size(); ++i) {
      const auto u = static_cast<std::size_t>(
          std::lower_bound(layout_.times.begin(), layout_.times.end(), t.times[i]) -
          layout_.times.begin());
      std::copy_n(t.mean.begin() + static_cast<std::ptrdiff_t>(i * per), per,
                  w.mean.begin() + static_cast<std::ptrdiff_t>(u * per));
      std::copy_n(t.quantiles.begin() + static_cast<std::ptrdiff_t>(i * perq), perq,
                  w.quantiles.begin() + static_cast<std::ptrdiff_t>(u * perq));
    }
  }
  void commit() override {}

  // Positions among layout.times of arm `arm`'s times (every time without arm_sampled).
  std::vector<std::int64_t> positions(std::int64_t arm) const {
    if (layout_.arm_sampled.empty() || arm < 0) return identity();
    std::vector<std::int64_t> at;
    const std::size_t nt = layout_.times.size();
    for (std::size_t u = 0; u < nt; ++u)
      if (layout_.arm_sampled[static_cast<std::size_t>(arm) * nt + u])
        at.push_back(static_cast<std::int64_t>(u));
    return at;
  }
  std::vector<std::int64_t> identity() const {
    std::vector<std::int64_t> at(layout_.times.size());
    for (std::size_t u = 0; u < at.size(); ++u) at[u] = static_cast<std::int64_t>(u);
    return at;
  }

  const RunLayout& layout_;
  std::vector<std::int64_t> ids;
  std::vector<double> extra, parameters, metrics, amounts, etas, ipred, dv;
  std::vector<std::int8_t> blq;
  std::vector<bool> ok;
  std::vector<TimeSummaryTable> summaries;  // one per group, in group order
};

// What simulate_population holds for the run (bytes; long double, so that absurd sizes do not
// wrap): per row (replicate x sweep point x subject) its id, extra columns, parameters, metrics
// and `ok` flag, and with trajectories its amounts (float64: result_bytes of one subject); the
// per-time summaries: the state of the groups kept at once (population_summary_bytes) and every
// group's table.
// MemoryError (check_memory) when that does not fit. Call before population_layout, which
// allocates the output times.
void check_population_memory(const PopulationRun& run, std::int64_t count) {
  const Problem& p = run.problem;
  const ModelInfo& model = p.parameters.info();
  long double rows = static_cast<long double>(count) * static_cast<long double>(run.replicates);
  for (const std::vector<double>& v : run.sweep.values) rows *= static_cast<long double>(v.size());
  const auto times = static_cast<long double>(
      p.output.all ? p.grid.steps + 1 : static_cast<std::int64_t>(p.output.steps.size()));
  const auto nc = static_cast<long double>(model.compartments.size());
  const auto columns = static_cast<long double>(
      1 + model.parameters.size() + kMetricCount + run.sweep.columns.size() +
      (run.replicates > 1 ? 1 : 0) + (run.population ? run.population->iiv.size() : 0));
  long double per_row = 8.0L * columns + 1.0L;
  if (run.trajectories) {
    Problem one = p;
    one.parameters = ParameterBatch(p.parameters.info_ptr(), 1);
    SimulateOptions f64 = run.options;
    f64.precision = Precision::Float64;
    f64.concentrations = false;
    per_row += static_cast<long double>(result_bytes(one, f64));
  }
  if (run.residual) per_row += 17.0L * times;  // ipred, dv and blq at every output time
  // The summaries' state while the run goes (the library's figure), and every group's table.
  const long double summary =
      population_summary_bytes(run) +
      static_cast<long double>(population_summary_groups(run)) * 8.0L * times *
          (1.0L + nc * (1.0L + static_cast<long double>(run.percentiles.size())));
  check_memory("simulate_population", rows * per_row + summary,
               "the results of " + format_value(static_cast<double>(rows)) +
                   " rows (replicates x "
                   "sweep points x count) and the summaries of " +
                   format_value(static_cast<double>(times)) + " output times",
               run.options,
               std::string("use a smaller count, fewer replicates or sweep points, fewer steps "
                           "or sparse output times, summary_by fewer swept parameters") +
                   (run.trajectories ? ", or trajectories=False" : ""));
}

// covariates: {name: 1-D array of a value per subject of the population}, stored once the count
// is known (store_covariates).
std::vector<DoubleArray> read_covariates(py::handle covariates, PopulationSpec& spec) {
  std::vector<DoubleArray> columns;
  if (covariates.is_none()) return columns;
  if (!py::isinstance<py::dict>(covariates))
    throw InvalidArgument("covariates must be None or {name: 1-D array of a value per subject}");
  for (const auto& [name, values] : py::reinterpret_borrow<py::dict>(covariates)) {
    spec.covariate_names.push_back(str_of(name, "covariates key"));
    columns.emplace_back(DoubleArray::ensure(values));
    if (!columns.back() || columns.back().ndim() != 1)
      throw InvalidArgument("covariates['" + spec.covariate_names.back() +
                            "'] must be a 1-D array of numbers, a value per subject");
  }
  return columns;
}

// spec.covariates: count x covariate_names, row-major, from read_covariates' columns (a count
// below 1 is left to the library's check of the count).
void store_covariates(const std::vector<DoubleArray>& columns, PopulationSpec& spec) {
  if (spec.count < 1) return;
  const auto n = static_cast<std::size_t>(spec.count);
  const std::size_t nc = columns.size();
  for (std::size_t c = 0; c < nc; ++c)
    if (static_cast<std::size_t>(columns[c].size()) != n)
      throw InvalidArgument("covariates['" + spec.covariate_names[c] + "'] has " +
                            std::to_string(columns[c].size()) + " values, but the population has " +
                            std::to_string(n) + " subjects (a value per subject)");
  spec.covariates.resize(n * nc);
  for (std::size_t c = 0; c < nc; ++c)
    for (std::size_t i = 0; i < n; ++i) spec.covariates[i * nc + c] = columns[c].data()[i];
}

// Output times (grid points of `grid`) as grid indices; `what` names them in errors.
OutputTimes output_times_of(py::handle times, const TimeGrid& grid, const std::string& what) {
  std::vector<std::int64_t> idx;
  for (double t : times.cast<std::vector<double>>()) {
    const std::int64_t k = grid.index_of(t);
    if (k < 0 || k > grid.steps)
      throw DomainError("simulate_population: " + what + " " + format_value(t) +
                        " is not a point of the grid t = i * " + format_value(grid.dt) +
                        ", i = 0.." + std::to_string(grid.steps));
    idx.push_back(k);
  }
  return OutputTimes::at_steps(std::move(idx));
}

// arms: [{name, count or share, doses, times}] (a run file's arms); shares split `count`.
std::vector<Arm> read_arms(py::handle arms, const ModelInfo& model,
                           const std::vector<std::string>& covariates,
                           std::optional<std::int64_t> count, const TimeGrid& grid) {
  const char* form = "arms must be a non-empty list of arms, each {name, count or share, doses}";
  if (py::isinstance<py::dict>(arms) || py::isinstance<py::str>(arms)) throw InvalidArgument(form);
  std::vector<Arm> out;
  std::vector<double> shares;
  for (py::handle item : py::iter(arms)) {
    const std::string ctx = "arms[" + std::to_string(out.size()) + "]";
    if (!py::isinstance<py::dict>(item))
      throw InvalidArgument(ctx + " must be a dict {name, count or share, doses}");
    const py::dict d = py::reinterpret_borrow<py::dict>(item);
    for (const auto& kv : d) {
      const std::string k = str_of(kv.first, ctx + " key");
      if (k != "name" && k != "count" && k != "share" && k != "doses" && k != "times")
        throw InvalidArgument(ctx + ": unknown key '" + k +
                              "'; give name, count or share, doses, times");
    }
    if (!d.contains("name")) throw InvalidArgument(ctx + ": missing key 'name'");
    if (d.contains("count") == d.contains("share"))
      throw InvalidArgument(ctx +
                            " needs count (its subjects) or share (its fraction of count), one "
                            "of them");
    Arm a;
    a.name = str_of(d["name"], ctx + ".name");
    if (d.contains("count")) {
      try {
        a.count = d["count"].cast<std::int64_t>();
      } catch (const py::cast_error&) {
        throw InvalidArgument(ctx + ".count must be a whole number");
      }
    } else {
      try {
        shares.push_back(d["share"].cast<double>());
      } catch (const py::cast_error&) {
        throw InvalidArgument(ctx + ".share must be a number");
      }
    }
    if (d.contains("doses"))
      a.doses = read_doses(model, d["doses"], ctx + ".doses", &covariates, &a.scaling);
    if (d.contains("times") && !d["times"].is_none())
      a.output = output_times_of(d["times"], grid, ctx + ".times: output time");
    out.push_back(std::move(a));
  }
  if (out.empty()) throw InvalidArgument(form);
  if (!shares.empty()) {
    if (shares.size() != out.size())
      throw InvalidArgument(
          "arms give count for some arms and share for others; give one kind "
          "for all");
    if (!count) throw InvalidArgument("arms given by share need count (the subjects they share)");
    const std::vector<std::int64_t> counts = arm_counts_of_shares(shares, *count);
    for (std::size_t k = 0; k < out.size(); ++k) out[k].count = counts[k];
  }
  return out;
}

constexpr const char* kPopulationDoc = R"doc(
Simulates a virtual population, its replicates and a parameter sweep on the grid
t_i = i * dt, in chunks (memory does not grow with count): pkscan's population driver, as a
run file's `population`, `sweep` and `output.summaries` give it, without a run file.

model: as for simulate. typical: {name or alias: typical value} (model defaults elsewhere).
doses, dt, steps, times, method, device, precision, discretization, threads: as for simulate.
count: subjects per replicate and sweep point; seed: the random seed (a subject's draws depend
only on seed, replicate and subject index). iiv: None, {name: variance of eta} (diagonal Omega)
or {'block': [names], 'omega': [lower triangle]}; parameter = typical * effects * exp(eta).
covariates: None or {name: 1-D array of a value per subject}; effects: None or a list of
{'parameter', 'covariate' (a name of covariates), 'type' ('power' or 'exponential'),
'coefficient', 'reference'} as for simulate_design. A dose may depend on the subject: 'per':
a covariate name (the amount per unit of the subject's value, mg/kg), or instead of 'amount'
'bands': {'covariate', 'edges' (ascending), 'amounts' (one more than edges: below the first
edge, between edges, from the last edge on)}. arms: None or a list of {'name', 'count' or
'share' (of count; shares add up to 1), 'doses', 'times'} (instead of doses): the population's
subjects split into the arms in order, each with its own doses and output times (default
`times`); count may then be left out (the sum of the counts). 'times' is then the union of the
arms' times, each arm's values and summaries NaN at times it does not sample, and
'arm_sampled' [arms, times] says which it samples.
replicates: replicate trials. sweep: {name: [values]}, the cartesian product, first name
slowest; a swept value is the typical value. percentiles: of the per-time summaries; exact:
the percentiles are the exact ones (type 7) at any size, rows simulated again where the
summaries' budget is exceeded (False: the sketch's estimates there; 'exact' says which).
summary_by: what the summaries are grouped by, a list of 'arm', 'replicate', swept names and at
most one covariate (its distinct values: strata, the group column last)
(None: the arm and every swept parameter, the replicates pooled; []: one summary of every row;
with arms, 'arm' is needed).
trajectories: also return every subject's amounts (memory grows with count).
residual: None or {'additive': sd, 'proportional': sd} or {'exponential': sd} (standard
deviations; with trajectories): simulated observations, 'ipred' and 'dv' [rows, times]; lloq:
also 'blq' [rows, times] (dv < lloq), as a run file's subjects.population.residual and lloq.
exchange: None, or an object that splits the run over several processes, with the methods
rank(), size(), send(message: bytes) (to rank 0) and receive(rank) -> bytes (from that rank);
any transport: mpi4py, multiprocessing pipes, sockets. Every process calls simulate_population
with the same arguments and its own exchange; chunk u of the run is simulated on rank u mod
size, and rank 0 returns the result of one process, bit for bit (the others return None).

Rows: arm (slowest), replicate, sweep point, subject. Returns a dict: 'times', 'compartments',
'percentiles', 'mean' [times, compartments] and 'quantiles' [times, compartments, percentiles]
(concentrations, over the subjects with finite values), 'count', 'excluded' and 'exact'; with
grouping columns, 'summary_columns' names them, 'groups' [groups, columns] holds each group's
values (arm and replicate 1-based, swept values; groups in row order), 'mean', 'quantiles',
'count' and 'excluded' gain a leading groups axis and 'exact' is a list (one per group). With
arms, 'arm' [rows] (1-based), 'arm_names' and 'arm_sampled'.
Then 'metric_names' and 'metrics' [rows, metrics] (of the model's observed compartment), 'ids'
[rows] (1-based within a replicate, over the arms), 'extra_columns' and 'extra' [rows, extra]
(arm, replicate, swept values),
'parameters' [rows, parameters] (the values simulated), 'eta_columns' and 'etas' [rows, etas]
(each row's drawn etas, 'eta_<name>' in iiv's order), 'ok' [rows], 'method', 'device',
and with trajectories 'amounts' [rows, times, compartments] (float64). The GIL is released
while the engine runs.
)doc";

// A RunExchange whose transport is a Python object (simulate_population's `exchange`): its
// methods run with the GIL held.
class PyExchange final : public RunExchange {
 public:
  explicit PyExchange(py::object o) : o_(std::move(o)) {
    rank_ = o_.attr("rank")().cast<int>();
    size_ = o_.attr("size")().cast<int>();
    if (size_ < 1 || rank_ < 0 || rank_ >= size_)
      throw InvalidArgument("exchange: rank() is " + std::to_string(rank_) + " and size() " +
                            std::to_string(size_) + ", but must be 0 <= rank < size");
    broadcasts_ = py::hasattr(o_, "broadcast");
  }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  void send(const std::vector<char>& message) override {
    py::gil_scoped_acquire gil;
    o_.attr("send")(py::bytes(message.data(), message.size()));
  }
  void receive(int from, std::vector<char>& message) override {
    py::gil_scoped_acquire gil;
    const py::object got = o_.attr("receive")(from);
    char* data = nullptr;
    py::ssize_t n = 0;
    if (!PyBytes_Check(got.ptr()) || PyBytes_AsStringAndSize(got.ptr(), &data, &n) != 0)
      throw InvalidArgument("exchange: receive() must return bytes");
    message.assign(data, data + n);
  }
  bool can_broadcast() const noexcept override { return broadcasts_; }
  // broadcast(bytes) on rank 0, broadcast(None) on the others: rank 0's bytes on every rank.
  void broadcast(std::vector<char>& message) override {
    py::gil_scoped_acquire gil;
    const py::object got = rank_ == 0
                               ? o_.attr("broadcast")(py::bytes(message.data(), message.size()))
                               : o_.attr("broadcast")(py::none());
    if (rank_ == 0) return;
    char* data = nullptr;
    py::ssize_t n = 0;
    if (!PyBytes_Check(got.ptr()) || PyBytes_AsStringAndSize(got.ptr(), &data, &n) != 0)
      throw InvalidArgument("exchange: broadcast() must return bytes");
    message.assign(data, data + n);
  }

 private:
  py::object o_;
  int rank_ = 0;
  int size_ = 1;
  bool broadcasts_ = false;
};

py::object simulate_population_py(py::handle model, py::handle typical, py::handle doses, double dt,
                                  std::int64_t steps, std::optional<std::int64_t> count,
                                  std::uint64_t seed, py::handle iiv, std::int64_t replicates,
                                  py::handle sweep, std::vector<double> percentiles,
                                  py::handle summary_by, bool trajectories, py::handle residual,
                                  py::handle lloq, py::handle times, const std::string& method,
                                  const std::string& device, const std::string& precision,
                                  const std::string& discretization, int threads,
                                  py::handle covariates, py::handle effects, py::handle arms,
                                  bool exact, py::handle exchange) {
  const ModelPtr info = resolve_model(model);
  std::unique_ptr<PyExchange> split;
  if (!exchange.is_none())
    split = std::make_unique<PyExchange>(py::reinterpret_borrow<py::object>(exchange));
  PopulationRun run;
  run.exact_percentiles = exact;
  run.problem.discretization = pkscan::discretization_from_string(discretization);
  run.problem.grid = {dt, steps};
  check_time_grid(run.problem.grid);  // an invalid grid is a ValueError, whatever its size
  PopulationSpec spec(info, 0, seed);
  const std::vector<DoubleArray> covariate_columns = read_covariates(covariates, spec);
  run.problem.doses = read_doses(*info, doses, "doses", &spec.covariate_names, &run.dose_scaling);
  if (!arms.is_none()) {
    if (!doses.is_none())
      throw InvalidArgument(
          "doses is not used with arms (each arm has its own doses); give them in the arms");
    run.arms = read_arms(arms, *info, spec.covariate_names, count, run.problem.grid);
  }
  if (!count && run.arms.empty())
    throw InvalidArgument("simulate_population: give count (the subjects), or arms");
  spec.count = count ? *count : 0;
  if (!count)
    for (const Arm& a : run.arms) spec.count += a.count;
  if (!times.is_none())
    run.problem.output = output_times_of(times, run.problem.grid, "output time");
  run.options = make_options(method, device, precision, threads);
  spec.typical = read_typical(info, typical);
  read_omega(iiv, "iiv", "eta", spec, spec.iiv, spec.omega);
  store_covariates(covariate_columns, spec);
  read_effects(effects, spec, false);
  run.population = std::move(spec);
  run.replicates = replicates;
  if (!sweep.is_none()) {
    for (const auto& [name, values] : sweep.cast<py::dict>()) {
      run.sweep.columns.push_back(run.population->column(str_of(name, "sweep key")));
      run.sweep.values.push_back(values.cast<std::vector<double>>());
    }
  }
  if (!summary_by.is_none()) {
    SummaryBy by;
    for (py::handle name : summary_by) {
      const std::string key = str_of(name, "summary_by entry");
      if (key == "replicate")
        by.replicate = true;
      else if (key == "arm")
        by.arm = true;
      else if (const auto& names = run.population->covariate_names;
               std::find(names.begin(), names.end(), key) != names.end()) {
        if (by.covariate >= 0)
          throw InvalidArgument("simulate_population: summary_by names two covariates (" +
                                names[static_cast<std::size_t>(by.covariate)] + ", " + key +
                                "); the summaries are stratified by one at most");
        by.covariate = static_cast<int>(std::find(names.begin(), names.end(), key) - names.begin());
      } else
        by.columns.push_back(run.population->column(key));
    }
    run.summary_by = std::move(by);
  }
  run.residual = read_residual(residual);
  if (!lloq.is_none()) run.lloq = lloq.cast<double>();
  run.summaries = true;
  run.percentiles = std::move(percentiles);
  run.trajectories = trajectories;
  run.problem.parameters = ParameterBatch(info, 1);
  // A run too large to hold is a MemoryError (also the summaries' groups, which the library
  // checks as a DomainError), invalid values a ValueError, whatever the run's size.
  check_population_memory(run, run.population->count);
  check_population_run(run);

  const RunLayout layout = population_layout(run);
  MemorySink sink(layout);
  PopulationRunReport report;
  PopulationRunOptions options;
  options.exchange = split.get();
  {
    py::gil_scoped_release nogil;
    report = run_population(run, sink, options);
  }
  if (split && split->rank() != 0) return py::none();
  const auto rows = static_cast<py::ssize_t>(sink.ids.size());
  const auto nt = static_cast<py::ssize_t>(layout.times.size());
  const auto nc = static_cast<py::ssize_t>(info->compartments.size());
  const std::vector<TimeSummaryTable>& tables = sink.summaries;
  const auto nq = static_cast<py::ssize_t>(run.percentiles.size());
  py::dict out;
  out["times"] = array(layout.times, {nt});
  out["compartments"] = names_of(info->compartments);
  out["percentiles"] = array(run.percentiles, {nq});
  if (layout.summary_columns.empty()) {
    const TimeSummaryTable& t = tables.at(0);
    out["mean"] = array(t.mean, {nt, nc});
    out["quantiles"] = array(t.quantiles, {nt, nc, nq});
    out["count"] = t.count;
    out["excluded"] = t.excluded;
    out["exact"] = t.exact;
  } else {
    const auto ng = static_cast<py::ssize_t>(tables.size());
    const auto nk = static_cast<py::ssize_t>(layout.summary_columns.size());
    std::vector<double> groups, mean, quantiles;
    std::vector<std::int64_t> count, excluded;
    std::vector<bool> exact_of;
    for (const TimeSummaryTable& t : tables) {
      exact_of.push_back(t.exact);
      groups.insert(groups.end(), t.group.begin(), t.group.end());
      mean.insert(mean.end(), t.mean.begin(), t.mean.end());
      quantiles.insert(quantiles.end(), t.quantiles.begin(), t.quantiles.end());
      count.push_back(t.count);
      excluded.push_back(t.excluded);
    }
    out["summary_columns"] = names_of(layout.summary_columns);
    out["groups"] = take(groups, {ng, nk});
    out["mean"] = take(mean, {ng, nt, nc});
    out["quantiles"] = take(quantiles, {ng, nt, nc, nq});
    out["count"] = take(count, {ng});
    out["excluded"] = take(excluded, {ng});
    py::list e;
    for (bool x : exact_of) e.append(x);
    out["exact"] = e;
  }
  if (!layout.arm_names.empty()) {  // the arm column: extra's first
    std::vector<std::int64_t> arm;
    const std::size_t ne = layout.extra_columns.size();
    for (std::size_t r = 0; r < sink.ids.size(); ++r)
      arm.push_back(static_cast<std::int64_t>(sink.extra[r * ne]));
    out["arm"] = take(arm, {rows});
    out["arm_names"] = names_of(layout.arm_names);
    const auto na = static_cast<py::ssize_t>(layout.arm_names.size());
    py::array_t<bool> sampled({na, nt});
    std::copy(layout.arm_sampled.begin(), layout.arm_sampled.end(), sampled.mutable_data());
    out["arm_sampled"] = sampled;
  }
  out["metric_names"] = names_of(layout.metric_names);
  out["metrics"] = take(sink.metrics, {rows, static_cast<py::ssize_t>(layout.metric_names.size())});
  out["ids"] = take(sink.ids, {rows});
  out["extra_columns"] = names_of(layout.extra_columns);
  out["extra"] = take(sink.extra, {rows, static_cast<py::ssize_t>(layout.extra_columns.size())});
  out["parameters"] =
      take(sink.parameters, {rows, static_cast<py::ssize_t>(info->parameters.size())});
  out["eta_columns"] = names_of(layout.eta_columns);
  out["etas"] = take(sink.etas, {rows, static_cast<py::ssize_t>(layout.eta_columns.size())});
  py::array_t<bool> ok(rows);
  std::copy(sink.ok.begin(), sink.ok.end(), ok.mutable_data());
  out["ok"] = ok;
  if (trajectories) out["amounts"] = take(sink.amounts, {rows, nt, nc});
  if (layout.observations) {
    out["ipred"] = take(sink.ipred, {rows, nt});
    out["dv"] = take(sink.dv, {rows, nt});
  }
  if (layout.blq) out["blq"] = take(sink.blq, {rows, nt});
  out["method"] = to_string(report.summary.method);
  out["device"] = to_string(report.summary.device);
  return out;
}

}  // namespace

std::vector<double> read_typical(const ModelPtr& model, py::handle typical) {
  std::int64_t subjects = -1;
  ParameterBatch row(model, 1);
  const std::vector<ParameterValue> values = read_parameters(*model, typical, subjects);
  if (subjects >= 0) throw InvalidArgument("typical: give one number per parameter, not arrays");
  store_parameters(values, row);
  return {row.row(0), row.row(0) + row.parameters()};
}

void read_omega(py::handle h, const std::string& what, const std::string& of,
                const PopulationSpec& spec, std::vector<int>& columns, Eigen::MatrixXd& omega) {
  if (h.is_none()) return;
  if (!py::isinstance<py::dict>(h))
    throw InvalidArgument(what + " must be None, {name: variance of " + of +
                          "} or {'block': [names], 'omega': [lower triangle of the covariance]}");
  const py::dict d = py::reinterpret_borrow<py::dict>(h);
  if (d.contains("block") || d.contains("omega")) {
    if (!d.contains("block") || !d.contains("omega"))
      throw InvalidArgument(what + ": a block needs both 'block' (names) and 'omega'");
    for (py::handle name : d["block"])
      columns.push_back(spec.column(str_of(name, what + " block entry")));
    const auto m = static_cast<Eigen::Index>(columns.size());
    const std::vector<double> tri = d["omega"].cast<std::vector<double>>();
    if (static_cast<Eigen::Index>(tri.size()) != m * (m + 1) / 2)
      throw InvalidArgument(what + ": omega has " + std::to_string(tri.size()) +
                            " values, but a block of " + std::to_string(m) + " needs " +
                            std::to_string(m * (m + 1) / 2) + " (the lower triangle, row by row)");
    omega = Eigen::MatrixXd::Zero(m, m);
    std::size_t k = 0;
    for (Eigen::Index r = 0; r < m; ++r)
      for (Eigen::Index c = 0; c <= r; ++c) omega(r, c) = omega(c, r) = tri[k++];
    return;
  }
  std::vector<double> variances;
  for (const auto& [name, value] : d) {
    columns.push_back(spec.column(str_of(name, what + " key")));
    variances.push_back(value.cast<double>());
  }
  const auto m = static_cast<Eigen::Index>(variances.size());
  omega = Eigen::MatrixXd::Zero(m, m);
  for (Eigen::Index i = 0; i < m; ++i) omega(i, i) = variances[static_cast<std::size_t>(i)];
}

std::optional<ResidualError> read_residual(py::handle residual) {
  if (residual.is_none()) return std::nullopt;
  ResidualError e;
  for (const auto& [key, value] : residual.cast<py::dict>()) {
    const std::string k = str_of(key, "residual key");
    const double sd = value.cast<double>();
    if (k == "additive")
      e.additive = sd;
    else if (k == "proportional")
      e.proportional = sd;
    else if (k == "exponential")
      e.exponential = sd;
    else
      throw InvalidArgument("residual: unknown key '" + k +
                            "'; give additive, proportional or exponential");
  }
  return e;
}

void bind_population(py::module_& m) {
  m.def("simulate_population", &simulate_population_py, kPopulationDoc, py::arg("model"),
        py::arg("typical"), py::arg("doses") = py::none(), py::arg("dt"), py::arg("steps"),
        py::arg("count") = py::none(), py::arg("seed") = 0, py::arg("iiv") = py::none(),
        py::arg("replicates") = 1, py::arg("sweep") = py::none(),
        py::arg("percentiles") = std::vector<double>{5.0, 50.0, 95.0},
        py::arg("summary_by") = py::none(), py::arg("trajectories") = false,
        py::arg("residual") = py::none(), py::arg("lloq") = py::none(),
        py::arg("times") = py::none(), py::arg("method") = "auto", py::arg("device") = "auto",
        py::arg("precision") = "float64", py::arg("discretization") = "exact",
        py::arg("threads") = 0, py::arg("covariates") = py::none(), py::arg("effects") = py::none(),
        py::arg("arms") = py::none(), py::arg("exact") = true, py::arg("exchange") = py::none());
}

}  // namespace pkscan::python
