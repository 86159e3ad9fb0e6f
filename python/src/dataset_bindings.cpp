// The module's NONMEM-format datasets: pkscan.Dataset, read_dataset, parse_dataset and
// simulate_dataset (exact event times), and the dataset helpers the Predictor shares.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

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

PyDataset read_dataset_py(const std::string& path, py::handle model) {
  PyDataset d;
  d.model = resolve_model(model);
  py::gil_scoped_release nogil;
  d.data = std::make_shared<const pkscan::Dataset>(pkscan::read_dataset(path, *d.model));
  return d;
}

PyDataset parse_dataset_py(const std::string& text, py::handle model, const std::string& file) {
  PyDataset d;
  d.model = resolve_model(model);
  py::gil_scoped_release nogil;
  d.data = std::make_shared<const pkscan::Dataset>(pkscan::parse_dataset(text, file, *d.model));
  return d;
}

// Per-record table of a dataset: one entry per column, arrays over all records in file order.
py::dict dataset_records(const PyDataset& d) {
  using Record = pkscan::DatasetRecord;
  const pkscan::Dataset& data = *d.data;
  const auto n = static_cast<py::ssize_t>(data.record_count());
  const auto np = static_cast<py::ssize_t>(data.parameter_columns.size());
  // One array of `T` over every record: get(subject index, record).
  auto column = [&](auto get) {
    using T = decltype(get(std::size_t{0}, std::declval<const Record&>()));
    py::array_t<T> a(n);
    T* p = a.mutable_data();
    for (std::size_t s = 0; s < data.subjects.size(); ++s)
      for (const Record& r : data.subjects[s].records) *p++ = get(s, r);
    return a;
  };
  py::dict out;
  out["subject"] = column([](std::size_t s, const Record&) { return std::int64_t(s); });
  out["line"] = column([](std::size_t, const Record& r) { return r.line; });
  out["addl"] = column([](std::size_t, const Record& r) { return r.addl; });
  out["mdv"] = column([](std::size_t, const Record& r) { return r.mdv; });
  const std::pair<const char*, double Record::*> reals[] = {{"time", &Record::time},
                                                            {"amt", &Record::amt},
                                                            {"rate", &Record::rate},
                                                            {"ii", &Record::ii},
                                                            {"dv", &Record::dv}};
  for (const auto& [name, m] : reals)
    out[name] = column([m = m](std::size_t, const Record& r) { return r.*m; });
  const std::pair<const char*, int Record::*> ints[] = {
      {"evid", &Record::evid}, {"cmt", &Record::cmt}, {"ss", &Record::ss}};
  for (const auto& [name, m] : ints)
    out[name] = column([m = m](std::size_t, const Record& r) { return r.*m; });
  py::array_t<double> params({n, np});
  double* p = params.mutable_data();
  for (const auto& subject : data.subjects)
    for (const Record& r : subject.records)
      for (py::ssize_t c = 0; c < np; ++c) *p++ = r.parameters[static_cast<std::size_t>(c)];
  out["parameters"] = params;
  return out;
}

// The parameter batch of a dataset run: one row per dataset subject; a parameter that is
// required, has no default and is neither given nor a dataset column is an error.
pkscan::ParameterBatch dataset_batch(const PyDataset& d, py::handle parameters,
                                     const char* function) {
  const ModelInfo& model = *d.model;
  const auto count = static_cast<std::int64_t>(d.data->subjects.size());
  std::int64_t subjects = -1;
  const std::vector<ParameterValue> values = read_parameters(model, parameters, subjects);
  if (subjects >= 0 && subjects != count)
    throw InvalidArgument(std::string(function) + ": parameter arrays have " +
                          std::to_string(subjects) + " values, but the dataset has " +
                          std::to_string(count) +
                          " subjects (IDs); give one value per subject, in dataset order");
  pkscan::ParameterBatch batch(d.model, count);
  store_parameters(values, batch);
  std::vector<char> given(model.parameters.size(), 0);
  for (const ParameterValue& v : values) given[static_cast<std::size_t>(v.column)] = 1;
  for (const std::string& c : d.data->parameter_columns) {
    const int col = pkscan::parameter_index(model, c);
    if (col >= 0) given[static_cast<std::size_t>(col)] = 1;
  }
  for (std::size_t c = 0; c < model.parameters.size(); ++c)
    if (!given[c] && std::isnan(model.parameters[c].default_value) && !model.in_alternative[c])
      throw InvalidArgument(
          std::string(function) + ": missing parameter '" + model.parameters[c].name +
          "': give it in parameters or as a dataset column (required by model " + model.name + ")");
  return batch;
}

py::dict simulate_dataset_py(py::handle dataset, py::handle model, py::handle parameters,
                             const std::string& method, const std::string& device, int threads) {
  const PyDataset d = load_dataset(dataset, model);
  const pkscan::ParameterBatch batch = dataset_batch(d, parameters, "simulate_dataset");
  const pkscan::SimulateOptions options = make_options(method, device, "float64", threads);
  auto result = std::make_unique<pkscan::DatasetResult>();
  {
    py::gil_scoped_release nogil;
    pkscan::simulate_dataset_into(*d.data, batch, options, *result);
  }
  const pkscan::DatasetResult& r = *result;
  const auto rows = static_cast<py::ssize_t>(r.rows());
  const py::ssize_t c = r.compartments;
  py::dict out;
  py::array_t<double> dv(rows);
  py::array_t<int> compartment(rows);
  for (py::ssize_t i = 0; i < rows; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const pkscan::DatasetSubject& subj = d.data->subjects[static_cast<std::size_t>(r.subject[ui])];
    dv.mutable_data()[i] = subj.records[static_cast<std::size_t>(r.record[ui])].dv;
    compartment.mutable_data()[i] = r.compartment[ui];
  }
  const auto subjects = static_cast<py::ssize_t>(r.status.size());
  py::array_t<bool> ok(subjects);
  for (py::ssize_t i = 0; i < subjects; ++i)
    ok.mutable_data()[i] = r.status[static_cast<std::size_t>(i)] == pkscan::SubjectStatus::Ok;
  out["dv"] = dv;
  out["compartment"] = compartment;
  out["ok"] = ok;
  out["ids"] = dataset_ids(*d.data);
  out["compartments"] = names_of(d.model->compartments);
  out["method"] = pkscan::to_string(r.summary.method);
  out["device"] = pkscan::to_string(r.summary.device);
  out["threads"] = r.summary.threads;
  const py::capsule owner = owning_capsule(std::move(result));
  out["subject"] = view(r.subject.data(), {rows}, owner);
  out["record"] = view(r.record.data(), {rows}, owner);
  out["time"] = view(r.time.data(), {rows}, owner);
  out["amounts"] = view(r.amounts.data(), {rows, c}, owner);
  out["concentrations"] = view(r.concentrations.data(), {rows, c}, owner);
  out["prediction"] = view(r.prediction.data(), {rows}, owner);
  return out;
}

}  // namespace

// A dataset given as a Dataset, CSV text (a string with a line break) or a path.
PyDataset load_dataset(py::handle dataset, py::handle model) {
  if (py::isinstance<PyDataset>(dataset)) {
    const PyDataset& d = dataset.cast<const PyDataset&>();
    if (!model.is_none()) {
      const ModelPtr m = resolve_model(model);
      if (m->name != d.model->name || m->compartments != d.model->compartments ||
          m->parameters.size() != d.model->parameters.size())
        throw InvalidArgument("the dataset was read for model " + d.model->name +
                              ", not for model " + m->name + "; read it again for this model");
    }
    return d;
  }
  if (model.is_none())
    throw InvalidArgument("model is required when the dataset is a path or CSV text");
  const std::string s = str_of(dataset, "dataset");
  if (s.find('\n') != std::string::npos) return parse_dataset_py(s, model, "<text>");
  return read_dataset_py(s, model);
}

py::list dataset_ids(const pkscan::Dataset& data) {
  py::list ids;
  for (const pkscan::DatasetSubject& s : data.subjects) ids.append(s.id);
  return ids;
}

void bind_datasets(py::module_& m) {
  py::class_<PyDataset>(m, "Dataset", R"doc(
A NONMEM-format dataset read for a model (pkscan.read_dataset, pkscan.parse_dataset).)doc")
      .def_property_readonly("model", [](const PyDataset& self) { return PyModel{self.model}; })
      .def_property_readonly("file", [](const PyDataset& self) { return self.data->file; })
      .def_property_readonly("columns",
                             [](const PyDataset& self) { return names_of(self.data->columns); })
      .def_property_readonly(
          "parameter_columns",
          [](const PyDataset& self) { return names_of(self.data->parameter_columns); },
          "Model parameters given as columns (canonical names).")
      .def_property_readonly(
          "covariate_columns",
          [](const PyDataset& self) { return names_of(self.data->covariate_columns); })
      .def_property_readonly(
          "ids", [](const PyDataset& self) { return dataset_ids(*self.data); },
          "Subject IDs as written, in dataset order.")
      .def_property_readonly("subjects",
                             [](const PyDataset& self) {
                               return static_cast<std::int64_t>(self.data->subjects.size());
                             })
      .def_property_readonly("observation_count",
                             [](const PyDataset& self) { return self.data->observation_count(); })
      .def_property_readonly("record_count",
                             [](const PyDataset& self) { return self.data->record_count(); })
      .def("records", &dataset_records, R"doc(
Every record, in file order, as a dict of arrays: subject (0-based index), line, time, evid,
amt, rate, cmt (0 = not given), ii, addl, ss, dv (NaN = missing), mdv, and parameters
([records, len(parameter_columns)], NaN = '.').)doc")
      .def("__len__",
           [](const PyDataset& self) {
             return static_cast<py::ssize_t>(self.data->subjects.size());
           })
      .def("__repr__", [](const PyDataset& self) {
        return "pkscan.Dataset('" + self.data->file + "', model='" + self.model->name + "', " +
               std::to_string(self.data->subjects.size()) + " subjects, " +
               std::to_string(self.data->record_count()) + " records)";
      });

  m.def("read_dataset", &read_dataset_py, py::arg("path"), py::arg("model"), R"doc(
Reads a NONMEM-format CSV dataset for `model` (a Model, name or linear mapping): columns named
like the model's parameters become per-record parameters. Raises ValueError with the file, line
and column of the first problem.)doc");
  m.def("parse_dataset", &parse_dataset_py, py::arg("text"), py::arg("model"),
        py::arg("file") = "<text>", "Same as read_dataset, from the CSV text itself.");
  m.def("simulate_dataset", &simulate_dataset_py, py::arg("dataset"), py::arg("model") = py::none(),
        py::arg("parameters") = py::none(), py::arg("method") = "auto", py::arg("device") = "auto",
        py::arg("threads") = 0, R"doc(
Simulates every subject of a dataset with exact event times.

dataset: a Dataset, a path or CSV text (then model is required).
parameters: dict name -> number or 1-D array with one value per dataset subject (dataset order):
    the parameters that are not dataset columns, and fall-backs for missing ('.') cells.

Returns a dict with one row per observation record (EVID 0), in dataset order: 'subject'
(0-based index into 'ids'), 'record' (index within the subject), 'time', 'compartment'
(observed, 0-based), 'amounts' and 'concentrations' ([rows, compartments]), 'prediction'
(concentration of the observed compartment), 'dv' (NaN = missing); and 'ids', 'ok' (per subject),
'compartments', 'method', 'device', 'threads'.)doc");
}

}  // namespace pkscan::python
