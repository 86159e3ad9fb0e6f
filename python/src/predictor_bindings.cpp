// The Python `Predictor`: pkscan::Predictor on NumPy arrays. A dataset is prepared once; then
// predictions at its observation records, the log-likelihood and their exact gradients are
// evaluated many times with new parameters (fitting, sampling).
//
// Parameters are full rows in Model.parameters order (Predictor.parameter_names), one row per
// subject for the *_all calls; they are read in place when they are C-contiguous float64.
// Outputs are NumPy arrays written directly by the engine. Every evaluation runs with the GIL
// released. pkscan::Predictor is immutable and thread-safe given one workspace per thread: the
// workspaces live in a small pool here, so calls from several Python threads run in parallel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <pkscan/error.hpp>
#include <pkscan/predictor.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"

namespace pkscan::python {

namespace {

// Whatever make_workspace() returns (a unique_ptr, possibly with a deleter of the library's).
using WorkspacePtr = decltype(std::declval<const Predictor&>().make_workspace());

ErrorModel error_model(const std::string& error, bool log_scale) {
  ErrorModel e;
  e.kind = error_model_from_string(error);
  e.log_scale = log_scale;
  return e;
}

// sigma: a number or a sequence of error.parameter_count() numbers (sigma_add, sigma_prop).
std::vector<double> read_sigma(py::handle sigma, const ErrorModel& error) {
  if (sigma.is_none()) {
    std::string names;
    for (const std::string& s : error.parameter_names()) names += (names.empty() ? "" : ", ") + s;
    throw InvalidArgument("sigma is required: the error-model parameters (" + names + ")");
  }
  const DoubleArray a = DoubleArray::ensure(sigma);
  if (!a || a.ndim() > 1) {
    PyErr_Clear();
    throw InvalidArgument("sigma must be a number or a sequence of numbers");
  }
  const std::size_t n = a.ndim() == 0 ? 1 : static_cast<std::size_t>(a.shape(0));
  const auto want = static_cast<std::size_t>(error.parameter_count());
  if (n != want) {
    std::string names;
    for (const std::string& s : error.parameter_names()) names += (names.empty() ? "" : ", ") + s;
    throw InvalidArgument("sigma has " + std::to_string(n) + " values, but the error model needs " +
                          std::to_string(want) + " (" + names + ")");
  }
  return std::vector<double>(a.data(), a.data() + n);
}

int check_threads(int threads) {
  if (threads < 0)
    throw InvalidArgument("threads is " + std::to_string(threads) +
                          ", but must be >= 0 (0 = the default: OMP_NUM_THREADS, else every CPU "
                          "this process may use)");
  return threads;
}

class PyPredictor {
 public:
  PyPredictor(py::handle dataset, py::handle model) {
    const PyDataset d = load_dataset(dataset, model);
    data_ = d.data;
    model_ = d.model;
    {
      py::gil_scoped_release nogil;
      predictor_ = std::make_unique<Predictor>(*data_, model_);
    }
    index_observations();
  }

  const Predictor& predictor() const noexcept { return *predictor_; }
  std::string device() const { return to_string(predictor_->device()); }
  void set_device(const std::string& name) {
    const Device d = device_from_string(name);
    py::gil_scoped_release nogil;
    predictor_->set_device(d);
  }
  PyModel model() const { return PyModel{model_}; }
  PyDataset dataset() const { return PyDataset{data_, model_}; }
  std::int64_t subjects() const noexcept { return predictor_->subjects(); }
  std::int64_t parameters() const noexcept { return predictor_->parameters(); }
  std::int64_t observations() const noexcept { return predictor_->observations(); }

  py::list parameter_names() const {
    py::list l;
    for (const ParameterInfo& p : model_->parameters) l.append(p.name);
    return l;
  }
  py::array_t<std::int64_t> observation_offsets() const {
    py::array_t<std::int64_t> a(subjects() + 1);
    for (std::int64_t s = 0; s < subjects(); ++s)
      a.mutable_data()[s] = predictor_->observation_offset(s);
    a.mutable_data()[subjects()] = observations();
    return a;
  }
  py::array_t<std::int64_t> observation_counts() const {
    py::array_t<std::int64_t> a(subjects());
    for (std::int64_t s = 0; s < subjects(); ++s) a.mutable_data()[s] = predictor_->observations(s);
    return a;
  }
  py::array_t<double> dv() const {
    return py::array_t<double>(static_cast<py::ssize_t>(obs_dv_.size()), obs_dv_.data());
  }
  py::array_t<double> observation_times() const {
    return py::array_t<double>(static_cast<py::ssize_t>(obs_time_.size()), obs_time_.data());
  }
  py::array_t<std::int64_t> observation_subjects() const {
    return py::array_t<std::int64_t>(static_cast<py::ssize_t>(obs_subject_.size()),
                                     obs_subject_.data());
  }
  py::array_t<bool> observed() const {
    py::array_t<bool> a(static_cast<py::ssize_t>(obs_observed_.size()));
    for (std::size_t i = 0; i < obs_observed_.size(); ++i)
      a.mutable_data()[i] = obs_observed_[i] != 0;
    return a;
  }

  // Full parameter rows [subjects, parameters] from {name: number or per-subject array}; the
  // model's defaults elsewhere (NaN = not given).
  py::array_t<double> make_parameters(py::handle values) const {
    std::int64_t n = -1;
    const std::vector<ParameterValue> v = read_parameters(*model_, values, n);
    ParameterBatch batch(model_, subjects());
    store_parameters(v, batch);
    py::array_t<double> out(
        {static_cast<py::ssize_t>(subjects()), static_cast<py::ssize_t>(parameters())});
    std::copy(batch.values().begin(), batch.values().end(), out.mutable_data());
    return out;
  }

  py::array_t<double> predict(std::int64_t s, py::handle params) const {
    check_subject(s);
    const DoubleArray p = row(params);
    py::array_t<double> out(predictor_->observations(s));
    double* o = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      const Lease lease(*this);
      predictor_->predict(s, p.data(), o, *lease.ws);
    }
    return out;
  }

  py::tuple predict_gradient(std::int64_t s, py::handle params, bool hessian,
                             py::handle columns) const {
    check_subject(s);
    const DoubleArray p = row(params);
    const auto n = static_cast<py::ssize_t>(predictor_->observations(s));
    py::array_t<double> out(n);
    py::array_t<double> jac({n, static_cast<py::ssize_t>(parameters())});
    double* o = out.mutable_data();
    double* j = jac.mutable_data();
    if (!hessian) {
      if (!columns.is_none()) throw InvalidArgument("columns is only read with hessian=True");
      {
        py::gil_scoped_release nogil;
        const Lease lease(*this);
        predictor_->predict_gradient(s, p.data(), o, j, *lease.ws);
      }
      return py::make_tuple(out, jac);
    }
    const std::vector<int> cols = column_list(columns);
    const auto m = static_cast<py::ssize_t>(cols.size());
    py::array_t<double> hess({n, m, m});
    double* h = hess.mutable_data();
    {
      py::gil_scoped_release nogil;
      const Lease lease(*this);
      predictor_->predict_hessian(s, p.data(), cols.data(), static_cast<int>(cols.size()), o, j, h,
                                  *lease.ws);
    }
    return py::make_tuple(out, jac, hess);
  }

  py::object log_likelihood(std::int64_t s, py::handle params, const std::string& error,
                            py::handle sigma, bool log_scale, bool gradient, bool hessian,
                            py::handle columns) const {
    check_subject(s);
    const DoubleArray p = row(params);
    const ErrorModel e = error_model(error, log_scale);
    const std::vector<double> sig = read_sigma(sigma, e);
    if (hessian) {
      const std::vector<int> cols = column_list(columns);
      const auto nv = static_cast<py::ssize_t>(cols.size()) + e.parameter_count();
      py::array_t<double> g(nv);
      py::array_t<double> h({nv, nv});
      double* gp = g.mutable_data();
      double* hp = h.mutable_data();
      double value = 0.0;
      {
        py::gil_scoped_release nogil;
        const Lease lease(*this);
        value = predictor_->log_likelihood_hessian(s, p.data(), cols.data(),
                                                   static_cast<int>(cols.size()), e, sig.data(), gp,
                                                   hp, *lease.ws);
      }
      return py::make_tuple(value, g, h);
    }
    if (!columns.is_none()) throw InvalidArgument("columns is only read with hessian=True");
    py::array_t<double> g(gradient ? parameters() : 0);
    py::array_t<double> gs(gradient ? e.parameter_count() : 0);
    double* gp = gradient ? g.mutable_data() : nullptr;
    double* gsp = gradient ? gs.mutable_data() : nullptr;
    double value = 0.0;
    {
      py::gil_scoped_release nogil;
      const Lease lease(*this);
      value = predictor_->log_likelihood(s, p.data(), e, sig.data(), gp, gsp, *lease.ws);
    }
    if (!gradient) return py::float_(value);
    return py::make_tuple(value, g, gs);
  }

  py::array_t<double> predict_all(py::handle params, int threads) const {
    const DoubleArray p = matrix(params);
    check_threads(threads);
    py::array_t<double> out(observations());
    double* o = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      predictor_->predict_all(p.data(), o, threads);
    }
    return out;
  }

  // Predictions of every subject and, row by row, their derivatives with respect to the
  // parameters of the row's own subject: jacobian[i, k] = d pred[i] / d params[subject(i), k].
  py::tuple predict_gradient_all(py::handle params, int threads) const {
    const DoubleArray p = matrix(params);
    check_threads(threads);
    const auto np = static_cast<py::ssize_t>(parameters());
    py::array_t<double> out(observations());
    py::array_t<double> jac({static_cast<py::ssize_t>(observations()), np});
    double* o = out.mutable_data();
    double* j = jac.mutable_data();
    const double* pp = p.data();
    {
      py::gil_scoped_release nogil;
      predictor_->predict_gradient_all(pp, o, j, threads);
    }
    return py::make_tuple(out, jac);
  }

  py::object log_likelihood_all(py::handle params, const std::string& error, py::handle sigma,
                                bool log_scale, bool gradient, bool per_subject,
                                int threads) const {
    const DoubleArray p = matrix(params);
    check_threads(threads);
    const ErrorModel e = error_model(error, log_scale);
    const std::vector<double> sig = read_sigma(sigma, e);
    py::array_t<double> each(per_subject ? subjects() : 0);
    py::array_t<double> g(gradient
                              ? std::vector<py::ssize_t>{static_cast<py::ssize_t>(subjects()),
                                                         static_cast<py::ssize_t>(parameters())}
                              : std::vector<py::ssize_t>{0, 0});
    py::array_t<double> gs(gradient ? e.parameter_count() : 0);
    double* ep = per_subject ? each.mutable_data() : nullptr;
    double* gp = gradient ? g.mutable_data() : nullptr;
    double* gsp = gradient ? gs.mutable_data() : nullptr;
    double value = 0.0;
    {
      py::gil_scoped_release nogil;
      value = predictor_->log_likelihood_all(p.data(), e, sig.data(), ep, gp, gsp, threads);
    }
    py::object v = per_subject ? py::object(each) : py::object(py::float_(value));
    if (!gradient) return v;
    return py::make_tuple(v, g, gs);
  }

 private:
  // A workspace taken from the pool for one evaluation and given back after it; runs without
  // the GIL (the pool has its own lock).
  struct Lease {
    explicit Lease(const PyPredictor& p) : owner(p), ws(p.acquire()) {}
    ~Lease() { owner.give_back(std::move(ws)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    const PyPredictor& owner;
    WorkspacePtr ws;
  };

  WorkspacePtr acquire() const {
    {
      const std::lock_guard<std::mutex> lock(pool_mutex_);
      if (!pool_.empty()) {
        WorkspacePtr ws = std::move(pool_.back());
        pool_.pop_back();
        return ws;
      }
    }
    return predictor_->make_workspace();
  }

  void give_back(WorkspacePtr ws) const noexcept {
    try {
      const std::lock_guard<std::mutex> lock(pool_mutex_);
      pool_.push_back(std::move(ws));
    } catch (...) {  // out of memory growing the pool: the workspace is freed instead
    }
  }

  void check_subject(std::int64_t s) const {
    if (s < 0 || s >= subjects())
      throw py::index_error("subject " + std::to_string(s) + " is out of range: the dataset has " +
                            std::to_string(subjects()) + " subjects (0-based indices)");
  }

  DoubleArray row(py::handle params) const {
    DoubleArray p = DoubleArray::ensure(params);
    if (!p || p.ndim() != 1 || p.shape(0) != parameters()) {
      PyErr_Clear();
      throw InvalidArgument(
          "params must be a 1-D array of " + std::to_string(parameters()) +
          " values, one per parameter in parameter_names order (NaN for unused ones)" +
          (p ? ", not an array of shape " + shape_of(p) : std::string()));
    }
    return p;
  }

  // columns: None (every parameter column) or a sequence of names (parameter_names) or indices.
  std::vector<int> column_list(py::handle columns) const {
    std::vector<int> cols;
    std::vector<std::string> names;
    for (const ParameterInfo& p : model_->parameters) names.push_back(p.name);
    if (columns.is_none()) {
      for (int c = 0; c < parameters(); ++c) cols.push_back(c);
      return cols;
    }
    if (py::isinstance<py::str>(columns))
      throw InvalidArgument("columns must be a sequence of parameter names or indices, not a str");
    for (py::handle item : py::iter(columns)) {
      if (py::isinstance<py::str>(item)) {
        const std::string name = item.cast<std::string>();
        const auto it = std::find(names.begin(), names.end(), name);
        if (it == names.end())
          throw InvalidArgument("columns: \"" + name + "\" is not a parameter of this predictor");
        cols.push_back(static_cast<int>(it - names.begin()));
      } else {
        cols.push_back(py::cast<int>(item));
      }
    }
    return cols;
  }

  DoubleArray matrix(py::handle params) const {
    DoubleArray p = DoubleArray::ensure(params);
    if (!p || p.ndim() != 2 || p.shape(0) != subjects() || p.shape(1) != parameters()) {
      PyErr_Clear();
      throw InvalidArgument("params must be a 2-D array of shape (" + std::to_string(subjects()) +
                            ", " + std::to_string(parameters()) +
                            "): one row per subject, one column per parameter" +
                            (p ? ", not " + shape_of(p) : std::string()));
    }
    return p;
  }

  static std::string shape_of(const DoubleArray& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
  }

  // Observation records (EVID 0) in the predictor's order: subjects in dataset order, records in
  // file order within each subject.
  void index_observations() {
    for (std::size_t s = 0; s < data_->subjects.size(); ++s) {
      std::int64_t count = 0;
      for (const DatasetRecord& r : data_->subjects[s].records) {
        if (r.evid != 0) continue;
        obs_subject_.push_back(static_cast<std::int64_t>(s));
        obs_time_.push_back(r.time);
        obs_dv_.push_back(r.dv);
        obs_observed_.push_back(!r.mdv && !std::isnan(r.dv) ? 1 : 0);
        ++count;
      }
      const auto si = static_cast<std::int64_t>(s);
      if (count != predictor_->observations(si) ||
          static_cast<std::int64_t>(obs_time_.size()) - count != predictor_->observation_offset(si))
        throw Error("Predictor: observation records of subject " + data_->subjects[s].id +
                    " do not match the predictor's (internal error)");
    }
  }

  std::shared_ptr<const Dataset> data_;
  ModelPtr model_;
  std::unique_ptr<Predictor> predictor_;
  std::vector<std::int64_t> obs_subject_;
  std::vector<double> obs_time_;
  std::vector<double> obs_dv_;
  std::vector<char> obs_observed_;
  mutable std::mutex pool_mutex_;
  mutable std::vector<WorkspacePtr> pool_;
};

const char* const kPredictorDoc = R"doc(
A dataset prepared once for many evaluations: predictions at its observation records (EVID 0),
the log-likelihood of the observed DV and their exact gradients (forward sensitivities, not
finite differences), for fitting and sampling.

Predictor(dataset, model=None): dataset is a Dataset, a path or CSV text (then model is
required). Parameters are full rows in parameter_names order (make_parameters builds them from
a dict); the derivative with respect to an unused (NaN) column, or one a dataset column
overrides, is 0. Subjects are 0-based indices in dataset order. Every evaluation releases the
GIL; calls from several threads run in parallel.)doc";

}  // namespace

void bind_predictor(py::module_& m) {
  py::class_<PyPredictor>(m, "Predictor", kPredictorDoc)
      .def(py::init<py::handle, py::handle>(), py::arg("dataset"), py::arg("model") = py::none())
      .def_property_readonly("model", &PyPredictor::model)
      .def_property_readonly("dataset", &PyPredictor::dataset)
      .def_property_readonly("parameter_names", &PyPredictor::parameter_names,
                             "Parameter columns, in row order.")
      .def_property_readonly("subjects", &PyPredictor::subjects)
      .def_property_readonly(
          "ids", [](const PyPredictor& self) { return dataset_ids(self.predictor().dataset()); },
          "Subject IDs, in dataset (row) order.")
      .def_property_readonly("observations", &PyPredictor::observations,
                             "Number of observation records (EVID 0), all subjects.")
      .def_property_readonly("observation_offsets", &PyPredictor::observation_offsets,
                             "[subjects + 1]: subject s's predictions are "
                             "[offsets[s], offsets[s + 1]) of the all-subjects vectors.")
      .def_property_readonly("observation_counts", &PyPredictor::observation_counts,
                             "[subjects]: observation records per subject.")
      .def_property_readonly("observation_subjects", &PyPredictor::observation_subjects,
                             "[observations]: subject index of each observation record.")
      .def_property_readonly("observation_times", &PyPredictor::observation_times,
                             "[observations]: TIME of each observation record.")
      .def_property_readonly("dv", &PyPredictor::dv,
                             "[observations]: DV of each observation record (NaN = missing).")
      .def_property_readonly("observed", &PyPredictor::observed,
                             "[observations]: True where the record enters the likelihood "
                             "(MDV 0 and DV present).")
      .def("make_parameters", &PyPredictor::make_parameters, py::arg("values"), R"doc(
Parameter rows [subjects, len(parameter_names)] from {name or alias: number or array with one
value per subject}; the model's defaults elsewhere (NaN = not given, e.g. cl when ke is given).)doc")
      .def("predict", &PyPredictor::predict, py::arg("subject"), py::arg("params"), R"doc(
Predictions (concentration of the observed compartment) at subject's observation records.
params: [len(parameter_names)]. Returns [observation_counts[subject]].)doc")
      .def("predict_gradient", &PyPredictor::predict_gradient, py::arg("subject"),
           py::arg("params"), py::arg("hessian") = false, py::arg("columns") = py::none(), R"doc(
(predictions [n], jacobian [n, len(parameter_names)]): d prediction[i] / d params[k].
With hessian=True also the exact second derivatives with respect to `columns` (names or
indices; default every column): (predictions, jacobian, hessian [n, m, m]) with
hessian[i, a, b] = d2 prediction[i] / d params[columns[a]] d params[columns[b]].)doc")
      .def("log_likelihood", &PyPredictor::log_likelihood, py::arg("subject"), py::arg("params"),
           py::arg("error") = "additive", py::arg("sigma") = py::none(),
           py::arg("log_scale") = false, py::arg("gradient") = true, py::arg("hessian") = false,
           py::arg("columns") = py::none(), R"doc(
Log-likelihood of subject's observed DV: the full Gaussian density (log-normal on the DV scale
with log_scale). error: 'additive' (sd = sigma_add), 'proportional' (sd = sigma_prop * pred) or
'combined' (sd = sqrt(sigma_add^2 + (sigma_prop pred)^2)); sigma: a number, or
[sigma_add, sigma_prop] for combined. Returns the value, or with gradient=True
(value, d/d params [len(parameter_names)], d/d sigma [1 or 2]). Out of the domain (a parameter
predict rejects, a sigma not finite and > 0, non-finite predictions, no density): -inf with zero
gradients, not an exception (docs/python.md).
With hessian=True: (value, gradient [m + k], hessian [m + k, m + k]) over the variables
(params[columns] (names or indices; default every column), sigma), exact; -inf with zeros out of
the domain.)doc")
      .def_property("device", &PyPredictor::device, &PyPredictor::set_device, R"doc(
Where predict_all, predict_gradient_all and log_likelihood_all run: 'cpu' (the default) or
'cuda' (the event walk on the GPU, one device thread per subject, gradients included; the
dataset goes to the device when this is set; the per-subject calls stay on the CPU). 'auto'
reads back as 'cpu'.
Setting 'cuda' without a usable device raises RuntimeError ("Predictor: device 'cuda' is not
available: ..."); a name other than cpu, cuda or auto raises ValueError.)doc")
      .def("predict_all", &PyPredictor::predict_all, py::arg("params"), py::arg("threads") = 0,
           R"doc(
Predictions of every subject: params [subjects, len(parameter_names)]; returns [observations]
(subject s at observation_offsets[s]:observation_offsets[s + 1]). threads: 0 = OMP_NUM_THREADS, else every CPU this process may use.)doc")
      .def("predict_gradient_all", &PyPredictor::predict_gradient_all, py::arg("params"),
           py::arg("threads") = 0, R"doc(
(predictions [observations], jacobian [observations, len(parameter_names)]): row i holds the
derivatives of prediction i with respect to the parameters of its own subject
(observation_subjects[i]); the other subjects' derivatives are 0.)doc")
      .def("log_likelihood_all", &PyPredictor::log_likelihood_all, py::arg("params"),
           py::arg("error") = "additive", py::arg("sigma") = py::none(),
           py::arg("log_scale") = false, py::arg("gradient") = true, py::arg("per_subject") = false,
           py::arg("threads") = 0,
           R"doc(
Sum over subjects of log_likelihood (per_subject=True: the [subjects] values instead of the
sum). Returns the value, or with gradient=True (value, d/d params [subjects,
len(parameter_names)], d/d sigma [1 or 2], the gradient of the sum). One subject out of the
domain makes the sum -inf with zero gradients.)doc")
      .def_property_readonly(
          "_address",
          [](const PyPredictor& self) {
            return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&self.predictor()));
          },
          "Address of the C++ Predictor (for pkscan.jax's XLA FFI calls; valid while this object "
          "lives).")
      .def("__repr__", [](const PyPredictor& self) {
        return "pkscan.Predictor(" + std::to_string(self.subjects()) + " subjects, " +
               std::to_string(self.observations()) + " observations, model '" +
               self.predictor().model().name + "')";
      });
}

}  // namespace pkscan::python
