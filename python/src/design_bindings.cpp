// pkscan.simulate_design: design simulations (NONMEM's $SIM) on a dataset without a run file,
// through the library's driver (pkscan::run_design) into a sink that appends every replicate's
// observation rows and parameter table to memory.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"

namespace pkscan::python {

namespace {

// Keeps every replicate's chunk: the observation rows, each subject's status and the parameter
// table (only its layout.parameter_table columns).
class MemoryDesignSink final : public DesignSink {
 public:
  explicit MemoryDesignSink(const DesignLayout& layout) : layout_(layout) {}

  void write(const DesignChunk& c) override {
    const DatasetResult& r = *c.result;
    const auto rows = static_cast<std::size_t>(r.rows());
    if (c.replicate == 0) reserve(rows, static_cast<std::size_t>(c.table_rows));
    const std::int64_t rep = c.replicate + 1;
    replicate.insert(replicate.end(), rows, rep);
    subject.insert(subject.end(), r.subject.begin(), r.subject.end());
    if (c.source)  // resampled: each row's dataset subject
      for (std::int64_t s : r.subject) source.push_back(c.source[static_cast<std::size_t>(s)]);
    record.insert(record.end(), r.record.begin(), r.record.end());
    time.insert(time.end(), r.time.begin(), r.time.end());
    compartment.insert(compartment.end(), r.compartment.begin(), r.compartment.end());
    amounts.insert(amounts.end(), r.amounts.begin(), r.amounts.end());
    concentrations.insert(concentrations.end(), r.concentrations.begin(), r.concentrations.end());
    ipred.insert(ipred.end(), r.prediction.begin(), r.prediction.end());
    if (layout_.observations) dv.insert(dv.end(), c.dv, c.dv + rows);
    if (layout_.blq) blq.insert(blq.end(), c.blq, c.blq + rows);
    for (SubjectStatus st : r.status) ok.push_back(st == SubjectStatus::Ok);
    if (layout_.parameter_table.empty()) return;
    const auto n = static_cast<std::size_t>(c.table_rows);
    const std::size_t np = layout_.model->parameters.size();
    const std::size_t ne = layout_.eta_columns.size();
    const std::size_t nk = layout_.iov_columns.size();
    table_replicate.insert(table_replicate.end(), n, rep);
    table_subject.insert(table_subject.end(), c.table_subject, c.table_subject + n);
    if (c.source)
      for (std::size_t t = 0; t < n; ++t)
        table_source.push_back(c.source[static_cast<std::size_t>(c.table_subject[t])]);
    if (layout_.occasions)
      table_occasion.insert(table_occasion.end(), c.table_occasion, c.table_occasion + n);
    for (std::size_t t = 0; t < n; ++t)
      for (int col : layout_.parameter_table)
        parameters.push_back(c.table_parameters[t * np + static_cast<std::size_t>(col)]);
    etas.insert(etas.end(), c.table_etas, c.table_etas + n * ne);
    kappas.insert(kappas.end(), c.table_kappas, c.table_kappas + n * nk);
  }
  void commit() override {}

  // Reserves every replicate's rows and table rows (the size check counted them) once the first
  // replicate gives their numbers (run_design has checked the run by then).
  void reserve(std::size_t rows, std::size_t table_rows) {
    const auto reps = static_cast<std::size_t>(layout_.replicates);
    const std::size_t all = rows * reps;
    const std::size_t nc = layout_.model->compartments.size();
    for (std::vector<std::int64_t>* v : {&replicate, &subject, &record}) v->reserve(all);
    for (std::vector<double>* v : {&time, &ipred}) v->reserve(all);
    compartment.reserve(all);
    amounts.reserve(all * nc);
    concentrations.reserve(all * nc);
    if (layout_.observations) dv.reserve(all);
    if (layout_.blq) blq.reserve(all);
    ok.reserve(reps * layout_.data->subjects.size());
    if (layout_.parameter_table.empty()) return;
    const std::size_t table = table_rows * reps;
    table_replicate.reserve(table);
    table_subject.reserve(table);
    if (layout_.occasions) table_occasion.reserve(table);
    parameters.reserve(table * layout_.parameter_table.size());
    etas.reserve(table * layout_.eta_columns.size());
    kappas.reserve(table * layout_.iov_columns.size());
  }

  const DesignLayout& layout_;
  std::vector<std::int64_t> replicate, subject, record, table_replicate, table_subject, source,
      table_source;
  std::vector<int> compartment;
  std::vector<double> time, amounts, concentrations, ipred, dv, table_occasion, parameters, etas,
      kappas;
  std::vector<std::int8_t> blq;
  std::vector<bool> ok;
};

// What simulate_design holds (bytes; long double, so that absurd sizes do not wrap): per
// observation row of every replicate its replicate, subject, record, time, compartment, IPRED,
// amounts and concentrations (and DV, BLQ), per subject and replicate its status, and per table
// row its replicate, subject, occasion, parameters, etas and kappas (a row per subject, with IOV
// at most one per record); and one replicate's rows while the library computes it.
// MemoryError (check_memory) when that does not fit.
void check_design_memory(const DesignRun& run) {
  const ModelInfo& model = *run.population.model;
  const Dataset& data = *run.data;
  const auto reps = static_cast<long double>(run.replicates);
  const auto rows = static_cast<long double>(design_rows(run));  // of a replicate
  // With count, the virtual subjects: count per replicate, like the dataset's on average.
  const long double subjects = run.count > 0 ? static_cast<long double>(run.count)
                                             : static_cast<long double>(data.subjects.size());
  const long double per_subject = subjects / static_cast<long double>(data.subjects.size());
  const auto nc = static_cast<long double>(model.compartments.size());
  long double per_row = 8.0L * (5.0L + 2.0L * nc) + 4.0L;
  if (run.residual) per_row += 8.0L;
  if (!std::isnan(run.lloq) || !run.lloq_column.empty()) per_row += 1.0L;
  const bool iov = !run.population.iov.empty();
  const long double table =
      iov ? static_cast<long double>(data.record_count()) * per_subject : subjects;
  const long double per_table_row =
      run.parameter_table
          ? 8.0L * static_cast<long double>(2 + (iov ? 1 : 0) + model.parameters.size() +
                                            run.population.iiv.size() + run.population.iov.size())
          : 0.0L;
  const long double need =
      (reps + 1.0L) * (rows * per_row + table * per_table_row) + reps * subjects;
  check_memory("simulate_design", need,
               "the results of " + format_value(static_cast<double>(reps)) + " replicates x " +
                   format_value(static_cast<double>(rows)) + " observation records",
               run.options, "use fewer replicates, or stream them to a file with a run file");
}

// iov: {'occasion': column, 'variances': {name: variance}} or {'occasion': column, 'block':
// [names], 'omega': [lower triangle]}.
void read_iov(py::handle iov, DesignRun& run) {
  if (iov.is_none()) return;
  const char* form =
      "iov must be None, {'occasion': column, 'variances': {name: variance of kappa}} or "
      "{'occasion': column, 'block': [names], 'omega': [lower triangle of the covariance]}";
  if (!py::isinstance<py::dict>(iov)) throw InvalidArgument(form);
  py::dict rest;
  for (const auto& kv : py::reinterpret_borrow<py::dict>(iov)) {
    const std::string k = str_of(kv.first, "iov key");
    if (k == "occasion")
      run.occasion = str_of(kv.second, "iov occasion");
    else if (k == "variances" || k == "block" || k == "omega")
      rest[kv.first] = kv.second;
    else
      throw InvalidArgument("iov: unknown key '" + k + "'; " + form);
  }
  if (run.occasion.empty()) throw InvalidArgument("iov: missing 'occasion' (the dataset column)");
  if (rest.contains("variances") == (rest.contains("block") || rest.contains("omega")))
    throw InvalidArgument(form);
  PopulationSpec& spec = run.population;
  const py::object omega = rest.contains("variances") ? py::object(rest["variances"]) : rest;
  read_omega(omega, "iov", "kappa", spec, spec.iov, spec.iov_omega);
}

constexpr const char* kDesignDoc = R"doc(
Simulates replicates of a dataset's design with drawn parameters (NONMEM's $SIM): the dataset
gives each subject's doses, observation times, covariates and occasions, the population its
parameters; as a run file's subjects.dataset with subjects.population, without a run file.

dataset: a Dataset, a path or CSV text (then model is required). typical: {name or alias:
typical value} (model defaults elsewhere; a parameter the population does not vary may instead
be a dataset column). iiv: None, {name: variance of eta} or {'block': [names], 'omega': [lower
triangle]}. iov: None, {'occasion': column, 'variances': {name: variance of kappa}} or
{'occasion': column, 'block': [names], 'omega': [lower triangle]}: each occasion (a whole
number in the dataset column) of a subject draws its own kappa. effects: None or a list of
{'parameter', 'covariate' (a dataset column, read on every record), 'type' ('power':
(cov / reference)^coefficient, or 'exponential': exp(coefficient * (cov - reference))),
'coefficient', 'reference'}: parameter = typical * effects * exp(eta + kappa). residual: None,
{'additive': sd, 'proportional': sd} or {'exponential': sd}: simulated observations 'dv';
lloq: a number or a dataset column (each record's LLOQ), with residual: 'blq' (dv < lloq).
seed: the random seed (the etas of subject i of replicate r are grid population subject i's;
kappas depend on (seed, r, i, occasion)). replicates: of the whole design. parameter_table:
also return each subject's (with iov each subject's and occasion's) parameters and draws.
method, threads: as for simulate_dataset (the CPU).

Returns a dict with one row per observation record (EVID 0) of every replicate, replicate by
replicate in dataset order: 'replicate' (1-based), 'subject' (0-based index into 'ids'),
'record' (index within the subject), 'time', 'compartment' (observed, 0-based), 'amounts' and
'concentrations' [rows, compartments], 'ipred' (concentration of the observed compartment),
with residual 'dv' and with lloq 'blq' (int8); 'ok' [replicates, subjects]; with the parameter
table (one row per subject, or per subject and occasion in the order the occasions first appear,
each at its first record): 'parameter_names' and 'parameters' [table rows, parameters],
'eta_columns' and 'etas', 'iov_columns' and 'kappas', 'table_replicate', 'table_subject' and,
with iov, 'table_occasion'; and 'ids', 'compartments', 'method', 'device', 'threads'. The GIL
is released while the engine runs.

count: resample the dataset's subjects with replacement to `count` virtual subjects per
replicate (a run file's subjects.population.count next to a dataset): virtual subject j copies
dataset subject resampled_subject(seed, r, j, n) and draws its own etas as subject j. 'subject'
and 'table_subject' are then the virtual subjects (0-based), 'source' and 'table_source' their
dataset subjects (indices into 'ids'), and 'ok' is [replicates, count].
)doc";

py::dict simulate_design_py(py::handle dataset, py::handle typical, py::handle model,
                            py::handle iiv, py::handle iov, py::handle effects, py::handle residual,
                            py::handle lloq, std::uint64_t seed, std::int64_t replicates,
                            bool parameter_table, const std::string& method, int threads,
                            std::optional<std::int64_t> count) {
  DesignRun run = read_design_run(dataset, typical, model, iiv, iov, effects, residual, lloq, seed,
                                  replicates, method, threads);
  if (count) run.count = *count;
  const ModelPtr info = run.population.model;
  run.parameter_table = parameter_table;
  // A run too large to hold is a MemoryError, invalid values a ValueError (run_design checks
  // everything before it simulates).
  check_design_memory(run);

  const DesignLayout layout = design_layout(run);
  MemoryDesignSink sink(layout);
  RunSummary summary;
  {
    py::gil_scoped_release nogil;
    summary = run_design(run, sink);
  }
  const auto rows = static_cast<py::ssize_t>(sink.time.size());
  const auto nc = static_cast<py::ssize_t>(info->compartments.size());
  py::dict out;
  out["replicate"] = take(sink.replicate, {rows});
  out["subject"] = take(sink.subject, {rows});
  out["record"] = take(sink.record, {rows});
  out["time"] = take(sink.time, {rows});
  out["compartment"] = take(sink.compartment, {rows});
  out["amounts"] = take(sink.amounts, {rows, nc});
  out["concentrations"] = take(sink.concentrations, {rows, nc});
  out["ipred"] = take(sink.ipred, {rows});
  if (layout.observations) out["dv"] = take(sink.dv, {rows});
  if (layout.blq) out["blq"] = take(sink.blq, {rows});
  if (run.count > 0) out["source"] = take(sink.source, {rows});
  const auto subjects = static_cast<py::ssize_t>(
      run.count > 0 ? run.count : static_cast<std::int64_t>(run.data->subjects.size()));
  py::array_t<bool> ok({static_cast<py::ssize_t>(replicates), subjects});
  std::copy(sink.ok.begin(), sink.ok.end(), ok.mutable_data());
  out["ok"] = ok;
  if (parameter_table) {
    const auto trows = static_cast<py::ssize_t>(sink.table_subject.size());
    std::vector<std::string> names;
    for (int c : layout.parameter_table)
      names.push_back(info->parameters[static_cast<std::size_t>(c)].name);
    out["parameter_names"] = names_of(names);
    out["parameters"] = take(sink.parameters, {trows, static_cast<py::ssize_t>(names.size())});
    out["eta_columns"] = names_of(layout.eta_columns);
    out["etas"] = take(sink.etas, {trows, static_cast<py::ssize_t>(layout.eta_columns.size())});
    out["iov_columns"] = names_of(layout.iov_columns);
    out["kappas"] = take(sink.kappas, {trows, static_cast<py::ssize_t>(layout.iov_columns.size())});
    out["table_replicate"] = take(sink.table_replicate, {trows});
    out["table_subject"] = take(sink.table_subject, {trows});
    if (run.count > 0) out["table_source"] = take(sink.table_source, {trows});
    if (layout.occasions) out["table_occasion"] = take(sink.table_occasion, {trows});
  }
  out["ids"] = dataset_ids(*run.data);
  out["compartments"] = names_of(info->compartments);
  out["method"] = to_string(summary.method);
  out["device"] = to_string(summary.device);
  out["threads"] = summary.threads;
  return out;
}

}  // namespace

void read_effects(py::handle effects, PopulationSpec& spec, bool dataset_columns) {
  if (effects.is_none()) return;
  std::size_t i = 0;
  for (py::handle item : py::iter(effects)) {
    const std::string ctx = "effects[" + std::to_string(i++) + "]";
    if (!py::isinstance<py::dict>(item))
      throw InvalidArgument(ctx +
                            " must be a dict {parameter, covariate, type, coefficient, "
                            "reference}");
    const py::dict d = py::reinterpret_borrow<py::dict>(item);
    for (const auto& kv : d) {
      const std::string k = str_of(kv.first, ctx + " key");
      if (k != "parameter" && k != "covariate" && k != "type" && k != "coefficient" &&
          k != "reference")
        throw InvalidArgument(ctx + ": unknown key '" + k +
                              "'; give parameter, covariate, type, coefficient and reference");
    }
    for (const char* k : {"parameter", "covariate", "type", "coefficient", "reference"})
      if (!d.contains(k)) throw InvalidArgument(ctx + ": missing key '" + std::string(k) + "'");
    CovariateEffect e;
    e.parameter = spec.column(str_of(d["parameter"], ctx + ".parameter"));
    const std::string cov = str_of(d["covariate"], ctx + ".covariate");
    auto it = std::find(spec.covariate_names.begin(), spec.covariate_names.end(), cov);
    if (it == spec.covariate_names.end() && !dataset_columns)
      throw InvalidArgument(ctx + ".covariate is '" + cov + "', but " +
                            (spec.covariate_names.empty()
                                 ? "no covariates were given (covariates={'" + cov + "': values})"
                                 : "the covariates are " + join_names(spec.covariate_names)));
    if (it == spec.covariate_names.end())
      it = spec.covariate_names.insert(spec.covariate_names.end(), cov);
    e.covariate = static_cast<int>(it - spec.covariate_names.begin());
    const std::string type = str_of(d["type"], ctx + ".type");
    if (type != "power" && type != "exponential")
      throw InvalidArgument(ctx + ".type is '" + type + "', but must be power or exponential");
    e.model = type == "power" ? CovariateModel::Power : CovariateModel::Exponential;
    e.theta = d["coefficient"].cast<double>();
    e.reference = d["reference"].cast<double>();
    spec.effects.push_back(e);
  }
}

DesignRun read_design_run(py::handle dataset, py::handle typical, py::handle model, py::handle iiv,
                          py::handle iov, py::handle effects, py::handle residual, py::handle lloq,
                          std::uint64_t seed, std::int64_t replicates, const std::string& method,
                          int threads) {
  const PyDataset d = load_dataset(dataset, model);
  const ModelPtr info = d.model;
  DesignRun run;
  run.data = d.data;
  run.population = PopulationSpec(info, 0, seed);
  PopulationSpec& spec = run.population;
  spec.typical = read_typical(info, typical);
  read_omega(iiv, "iiv", "eta", spec, spec.iiv, spec.omega);
  read_effects(effects, spec, true);
  read_iov(iov, run);
  run.replicates = replicates;
  run.residual = read_residual(residual);
  if (py::isinstance<py::str>(lloq))
    run.lloq_column = lloq.cast<std::string>();
  else if (!lloq.is_none())
    run.lloq = lloq.cast<double>();
  run.options = make_options(method, "cpu", "float64", threads);
  return run;
}

void bind_design(py::module_& m) {
  m.def("simulate_design", &simulate_design_py, kDesignDoc, py::arg("dataset"), py::arg("typical"),
        py::kw_only(), py::arg("model") = py::none(), py::arg("iiv") = py::none(),
        py::arg("iov") = py::none(), py::arg("effects") = py::none(),
        py::arg("residual") = py::none(), py::arg("lloq") = py::none(), py::arg("seed") = 0,
        py::arg("replicates") = 1, py::arg("parameter_table") = true, py::arg("method") = "auto",
        py::arg("threads") = 0, py::arg("count") = py::none());
}

}  // namespace pkscan::python
