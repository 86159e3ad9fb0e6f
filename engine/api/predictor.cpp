// Predictor: a dataset prepared once, then predictions at its observation records, the
// log-likelihood and their exact gradients, evaluated many times.
//
// Numeric contract: predictions are computed by the event solver of simulate_dataset()
// (solver.hpp), so they equal its `prediction` bit for bit; gradients are the solver's forward
// sensitivities (solver_impl.hpp says how). Deterministic: the same inputs give the same bits for
// any thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <pkscan/error.hpp>
#include <pkscan/predictor.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/names.hpp"
#include "core/parallel.hpp"
#include "device/device_events.hpp"
#include "events/plan.hpp"
#include "events/solver.hpp"

namespace pkscan {

namespace {
constexpr detail::Named<ErrorModelKind> kErrorModels[] = {
    {ErrorModelKind::Additive, "additive"},
    {ErrorModelKind::Proportional, "proportional"},
    {ErrorModelKind::Combined, "combined"}};
}  // namespace

std::string to_string(ErrorModelKind kind) { return detail::name_of(kErrorModels, kind); }
ErrorModelKind error_model_from_string(std::string_view name) {
  return detail::value_named(kErrorModels, name, "error model");
}

std::vector<std::string> ErrorModel::parameter_names() const {
  switch (kind) {
    case ErrorModelKind::Additive:
      return {"sigma_add"};
    case ErrorModelKind::Proportional:
      return {"sigma_prop"};
    case ErrorModelKind::Combined:
      return {"sigma_add", "sigma_prop"};
  }
  return {};
}

namespace {

[[noreturn]] void throw_invalid(const std::string& msg) { throw InvalidArgument(msg); }
[[noreturn]] void throw_domain(const std::string& msg) { throw DomainError(msg); }

}  // namespace

// What a Predictor holds (immutable once built): its dataset, the setup and every subject's
// plan.
struct Prepared {
  Prepared(Dataset dataset, std::shared_ptr<const ModelInfo> model)
      : data(std::move(dataset)), setup(data, std::move(model), "Predictor", true) {
    setup.set_memory_limit(SimulateOptions{});
    plans.resize(data.subjects.size());
    for (std::size_t s = 0; s < plans.size(); ++s) {
      detail::SubjectPlan& plan = plans[s];
      setup.build_plan(static_cast<std::int64_t>(s), plan);
      plan.obs_offset = total_obs;
      total_obs += plan.obs_count;
      max_events = std::max(max_events, plan.events.size() + plan.lag_boundaries);
      max_obs = std::max(max_obs, static_cast<std::size_t>(plan.obs_count));
      max_rows = std::max(max_rows, plan.rows.size());
    }
  }
  Dataset data;
  detail::DatasetSetup setup;  // refers to `data`
  std::vector<detail::SubjectPlan> plans;
  std::int64_t total_obs = 0;
  std::size_t max_events = 0, max_obs = 0, max_rows = 0;

  void check_subject(std::int64_t s) const {
    if (s < 0 || s >= static_cast<std::int64_t>(plans.size()))
      throw_invalid("Predictor: subject index is " + std::to_string(s) + ", but must be in 0.." +
                    std::to_string(static_cast<std::int64_t>(plans.size()) - 1) + " (0-based)");
  }
};

// ---- Workspace. ----

struct Predictor::Impl : Prepared {
  using Prepared::Prepared;
  // Device::Cuda: the plans on the device, and what a call there reuses (under `mutex`).
  std::unique_ptr<detail::DeviceEvents> events;
  std::mutex mutex;
  std::vector<double> pred, jac;
  std::vector<std::int64_t> host;
  DeviceCall last;
};

struct Predictor::Workspace::State {
  explicit State(const Prepared& impl)
      : owner(&impl),
        solver(detail::make_event_solver(impl.setup, impl.max_rows, impl.max_events)),
        pred(impl.max_obs),
        jac(impl.max_obs * static_cast<std::size_t>(impl.setup.np)) {}
  const Prepared* owner;
  std::unique_ptr<detail::EventSolver> solver;
  std::vector<double> pred, jac;               // log_likelihood's predictions and Jacobian
  std::vector<double> hess, grad, sigma_grad;  // log_likelihood_hessian's
};

Predictor::Workspace::Workspace(std::unique_ptr<State> state) : state_(std::move(state)) {}
Predictor::Workspace::~Workspace() = default;

// ---- Predictor. ----

Predictor::Predictor(Dataset data, std::shared_ptr<const ModelInfo> model)
    : impl_(std::make_unique<Impl>(std::move(data), std::move(model))) {}

namespace {
std::shared_ptr<const ModelInfo> builtin_model(ModelKind model) {
  if (model == ModelKind::Linear)
    throw_invalid(
        "Predictor: model linear needs its description; pass the ModelInfo from "
        "make_linear_model()");
  // model_info() returns a static: share it without ownership.
  return std::shared_ptr<const ModelInfo>(std::shared_ptr<const ModelInfo>(), &model_info(model));
}
}  // namespace

Predictor::Predictor(Dataset data, ModelKind model)
    : Predictor(std::move(data), builtin_model(model)) {}

Predictor::~Predictor() = default;
Predictor::Predictor(Predictor&&) noexcept = default;
Predictor& Predictor::operator=(Predictor&&) noexcept = default;

const ModelInfo& Predictor::model() const noexcept { return *impl_->setup.model; }
const Dataset& Predictor::dataset() const noexcept { return impl_->data; }
std::int64_t Predictor::subjects() const noexcept {
  return static_cast<std::int64_t>(impl_->plans.size());
}
int Predictor::parameters() const noexcept { return impl_->setup.np; }
std::int64_t Predictor::observations(std::int64_t s) const noexcept {
  return impl_->plans[static_cast<std::size_t>(s)].obs_count;
}
std::int64_t Predictor::observation_offset(std::int64_t s) const noexcept {
  return impl_->plans[static_cast<std::size_t>(s)].obs_offset;
}
std::int64_t Predictor::observations() const noexcept { return impl_->total_obs; }

std::unique_ptr<Predictor::Workspace> Predictor::make_workspace() const {
  return std::unique_ptr<Workspace>(new Workspace(std::make_unique<Workspace::State>(*impl_)));
}

void Predictor::set_device(Device device) {
  if (device != Device::Cuda) {
    impl_->events.reset();
    return;
  }
  if (!impl_->events)
    impl_->events = std::make_unique<detail::DeviceEvents>(impl_->setup, impl_->plans);
}

Device Predictor::device() const noexcept { return impl_->events ? Device::Cuda : Device::Cpu; }

Predictor::DeviceCall Predictor::last_device_call() const {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->last;
}

namespace {
void check_call(const Prepared& impl, const Prepared* owner, const void* params, const char* what) {
  if (owner != &impl)
    throw_invalid(std::string("Predictor::") + what +
                  ": the workspace was made by another Predictor (use make_workspace())");
  if (params == nullptr) throw_invalid(std::string("Predictor::") + what + ": params is null");
}
}  // namespace

void Predictor::predict(std::int64_t s, const double* params, double* out, Workspace& ws) const {
  impl_->check_subject(s);
  check_call(*impl_, ws.state_->owner, params, "predict");
  if (out == nullptr && observations(s) > 0) throw_invalid("Predictor::predict: out is null");
  ws.state_->solver->predict(impl_->plans[static_cast<std::size_t>(s)], s, params, out, nullptr);
}

void Predictor::predict_gradient(std::int64_t s, const double* params, double* out,
                                 double* jacobian, Workspace& ws) const {
  impl_->check_subject(s);
  check_call(*impl_, ws.state_->owner, params, "predict_gradient");
  if ((out == nullptr || jacobian == nullptr) && observations(s) > 0)
    throw_invalid("Predictor::predict_gradient: out or jacobian is null");
  ws.state_->solver->predict(impl_->plans[static_cast<std::size_t>(s)], s, params, out, jacobian);
}

namespace {
// predict_hessian's columns: in range and distinct.
void check_columns(const Prepared& impl, const int* columns, int count, const char* what) {
  const std::string who = std::string("Predictor::") + what + ": ";
  if (count < 0 || (count > 0 && columns == nullptr))
    throw_invalid(who + "columns is null or count is negative");
  for (int a = 0; a < count; ++a) {
    if (columns[a] < 0 || columns[a] >= impl.setup.np)
      throw_invalid(who + "columns[" + std::to_string(a) + "] is " + std::to_string(columns[a]) +
                    ", but must be in 0.." + std::to_string(impl.setup.np - 1));
    for (int b = 0; b < a; ++b)
      if (columns[b] == columns[a])
        throw_invalid(who + "column " + std::to_string(columns[a]) + " is listed twice");
  }
}
}  // namespace

void Predictor::predict_hessian(std::int64_t s, const double* params, const int* columns, int count,
                                double* out, double* jacobian, double* hessian,
                                Workspace& ws) const {
  impl_->check_subject(s);
  check_call(*impl_, ws.state_->owner, params, "predict_hessian");
  check_columns(*impl_, columns, count, "predict_hessian");
  if ((out == nullptr || jacobian == nullptr || (hessian == nullptr && count > 0)) &&
      observations(s) > 0)
    throw_invalid("Predictor::predict_hessian: out, jacobian or hessian is null");
  ws.state_->solver->predict_hessian(impl_->plans[static_cast<std::size_t>(s)], s, params, out,
                                     jacobian, columns, count, hessian);
}

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// What Predictor::log_likelihood checks whatever the parameters (misuse, and the dataset's DV on
// the log scale): InvalidArgument or DomainError.
void check_error_model(const ErrorModel& error, const double* sigma) {
  if (sigma == nullptr) throw_invalid("Predictor::log_likelihood: sigma is null");
  if (error.log_scale && error.kind != ErrorModelKind::Additive)
    throw_invalid(
        "Predictor::log_likelihood: error model on the log scale is proportional or combined, but "
        "must be additive (log(DV) = log(IPRED) + eps, sd = sigma_add)");
}

void check_dv(const Prepared& impl, std::int64_t s, const ErrorModel& error) {
  if (!error.log_scale) return;
  const detail::SubjectPlan& plan = impl.plans[static_cast<std::size_t>(s)];
  for (std::size_t i = 0; i < plan.ll_dv.size(); ++i)
    if (!(plan.ll_dv[i] > 0.0)) {
      const DatasetSubject& sub = impl.data.subjects[static_cast<std::size_t>(s)];
      throw_domain("Predictor::log_likelihood: " + impl.data.file + ":" +
                   std::to_string(plan.ll_line[i]) + ": ID \"" + sub.id + "\" (subject " +
                   std::to_string(s + 1) + "): DV is " + format_value(plan.ll_dv[i]) +
                   ", but must be > 0 on the log scale");
    }
}

// The domain of the error-model parameters: every sigma finite and > 0 (subnormal and 1e308
// included).
bool sigma_in_domain(const ErrorModel& error, const double* sigma) {
  for (int i = 0; i < error.parameter_count(); ++i)
    if (!(std::isfinite(sigma[i]) && sigma[i] > 0.0)) return false;
  return true;
}

// The answer out of the domain: -infinity with zero gradients.
double reject(std::size_t np, int ns, double* gradient, double* sigma_gradient) {
  if (gradient != nullptr) std::fill(gradient, gradient + np, 0.0);
  if (sigma_gradient != nullptr) std::fill(sigma_gradient, sigma_gradient + ns, 0.0);
  return -kInf;
}

// (dv - f) / sd for finite dv and f, also where dv - f overflows.
double standardized(double dv, double f, double sd) {
  const double r = dv - f;
  return std::isfinite(r) ? r / sd : dv / sd - f / sd;
}

// The log-likelihood of subject s from its predictions `pred` (and, with a gradient, their
// Jacobian `jac`); Predictor::log_likelihood's documented contract. Each observation's term is
// -log(2 pi) / 2 - log(sd) - z^2 / 2 with z = (DV - IPRED) / sd, formed from log(sigma) and z
// (never sd^2, which overflows for sigma > 1e154), its derivatives from z and 1 / sd; a log-density
// below the range of double is -infinity.
double likelihood(const Prepared& impl, std::int64_t s, const double* pred, const double* jac,
                  const ErrorModel& error, const double* sigma, double* gradient,
                  double* sigma_gradient) {
  const detail::SubjectPlan& plan = impl.plans[static_cast<std::size_t>(s)];
  const std::size_t np = static_cast<std::size_t>(impl.setup.np);
  constexpr double kHalfLog2Pi = 0.91893853320467274178;
  const int ns = error.parameter_count();
  // A subject whose solution is not finite (overflow, a steady state that does not exist) has
  // no density.
  for (std::int64_t o = 0; o < plan.obs_count; ++o)
    if (!std::isfinite(pred[o])) return reject(np, ns, gradient, sigma_gradient);
  const bool add = error.kind != ErrorModelKind::Proportional;
  const bool prop = error.kind != ErrorModelKind::Additive;
  const double sa = add ? sigma[0] : 0.0;
  const double sp = prop ? sigma[add ? 1 : 0] : 0.0;
  if (gradient != nullptr) std::fill(gradient, gradient + np, 0.0);
  if (sigma_gradient != nullptr) std::fill(sigma_gradient, sigma_gradient + ns, 0.0);
  double ll = 0.0;
  for (std::size_t i = 0; i < plan.ll_obs.size(); ++i) {
    const std::size_t o = static_cast<std::size_t>(plan.ll_obs[i]);
    const double dv = plan.ll_dv[i];
    const double f = pred[o];
    double dll_df, dll_dsa = 0.0, dll_dsp = 0.0;
    if (error.log_scale) {
      if (!(f > 0.0)) return reject(np, ns, gradient, sigma_gradient);  // log(IPRED) undefined
      const double z = (std::log(dv) - std::log(f)) / sa;
      ll += -kHalfLog2Pi - std::log(sa) - std::log(dv) - 0.5 * z * z;
      dll_df = z / sa / f;
      dll_dsa = (z * z - 1.0) / sa;
    } else if (error.kind == ErrorModelKind::Additive) {
      const double z = standardized(dv, f, sa);
      ll += -kHalfLog2Pi - std::log(sa) - 0.5 * z * z;
      dll_df = z / sa;
      dll_dsa = (z * z - 1.0) / sa;
    } else {
      const double af = std::fabs(f);
      // Proportional error at a prediction of 0: no density.
      if (af == 0.0 && error.kind == ErrorModelKind::Proportional)
        return reject(np, ns, gradient, sigma_gradient);
      const double sgn = f >= 0.0 ? 1.0 : -1.0;
      if (error.kind == ErrorModelKind::Proportional) {
        // sd = sp |f|, log(sd) = log(sp) + log|f|: neither overflows nor underflows.
        const double sd = sp * af;
        const double z = std::isnormal(sd) ? standardized(dv, f, sd) : standardized(dv, f, af) / sp;
        ll += -kHalfLog2Pi - std::log(sp) - std::log(af) - 0.5 * z * z;
        dll_dsp = (z * z - 1.0) / sp;
        dll_df = (z / sp + (z * z - 1.0) * sgn) / af;
      } else {
        // sd = hypot(sa, sp |f|); where that overflows, sd = m h with m the larger of sa and
        // sp |f| (kept as the product sp * |f|) and h = hypot(1, smaller / m) in [1, sqrt 2]:
        // log(sd) = log(m) + log(h), z = ((DV - IPRED) / m) / h.
        const double b = sp * af;
        const double sd = std::hypot(sa, b);
        // u = sa / sd, w = sp |f| / sd, sp_sd = sp / sd, af_sd = |f| / sd (each formed without
        // 1 / sd, which underflows where sd overflows)
        double log_sd, z, u, w, inv_sd, sp_sd, af_sd;
        if (std::isfinite(sd)) {
          log_sd = std::log(sd);
          z = standardized(dv, f, sd);
          u = sa / sd;
          w = b / sd;
          inv_sd = 1.0 / sd;
          sp_sd = sp / sd;
          af_sd = af / sd;
        } else if (sa >= b) {
          const double h = std::hypot(1.0, b / sa);
          log_sd = std::log(sa) + std::log(h);
          z = standardized(dv, f, sa) / h;
          u = 1.0 / h;
          w = b / sa / h;
          inv_sd = 1.0 / sa / h;
          sp_sd = sp / sa / h;
          af_sd = af / sa / h;
        } else {
          const double h = std::hypot(1.0, sa / sp / af);
          log_sd = std::log(sp) + std::log(af) + std::log(h);
          z = standardized(dv, f, af) / sp / h;
          u = sa / sp / af / h;
          w = 1.0 / h;
          inv_sd = 1.0 / sp / af / h;
          sp_sd = 1.0 / af / h;
          af_sd = 1.0 / sp / h;
        }
        ll += -kHalfLog2Pi - log_sd - 0.5 * z * z;
        dll_dsa = (z * z - 1.0) * inv_sd * u;
        dll_dsp = (z * z - 1.0) * w * af_sd;
        dll_df = z * inv_sd + (z * z - 1.0) * w * sgn * sp_sd;
      }
    }
    if (gradient != nullptr) {
      const double* jr = jac + o * np;
      for (std::size_t c = 0; c < np; ++c) gradient[c] += dll_df * jr[c];
    }
    if (sigma_gradient != nullptr) {
      if (add) sigma_gradient[0] += dll_dsa;
      if (prop) sigma_gradient[add ? 1 : 0] += dll_dsp;
    }
  }
  // A log-density below the range of double (a residual of many sd): no representable density.
  if (!std::isfinite(ll)) return reject(np, ns, gradient, sigma_gradient);
  // A derivative whose chain-rule terms leave the range of double (a sensitivity that overflows,
  // d IPRED / d V at V = 1e-300; 0 x inf, inf - inf) is reported as 0, never NaN or inf.
  const auto finite = [](double* g, std::size_t n) {
    for (std::size_t c = 0; g != nullptr && c < n; ++c)
      if (!std::isfinite(g[c])) g[c] = 0.0;
  };
  finite(gradient, np);
  finite(sigma_gradient, static_cast<std::size_t>(ns));
  return ll;
}
}  // namespace

double Predictor::log_likelihood(std::int64_t s, const double* params, const ErrorModel& error,
                                 const double* sigma, double* gradient, double* sigma_gradient,
                                 Workspace& ws) const {
  impl_->check_subject(s);
  check_call(*impl_, ws.state_->owner, params, "log_likelihood");
  check_error_model(error, sigma);
  check_dv(*impl_, s, error);
  const std::size_t np = static_cast<std::size_t>(impl_->setup.np);
  if (!sigma_in_domain(error, sigma))
    return reject(np, error.parameter_count(), gradient, sigma_gradient);
  const detail::SubjectPlan& plan = impl_->plans[static_cast<std::size_t>(s)];
  double* pred = ws.state_->pred.data();
  double* jac = ws.state_->jac.data();
  try {
    ws.state_->solver->predict(plan, s, params, pred, gradient != nullptr ? jac : nullptr);
  } catch (const DomainError&) {  // a parameter row out of the model's domain
    return reject(np, error.parameter_count(), gradient, sigma_gradient);
  }
  return likelihood(*impl_, s, pred, jac, error, sigma, gradient, sigma_gradient);
}

namespace {
// The first (d) and second (h) derivatives of one observation's log-density in
// (IPRED, sigma_add, sigma_prop). With V = sd^2 and q = (DV - IPRED)^2 (log DV and log IPRED on
// the log scale), the density is -log(2 pi) / 2 - log(V) / 2 - q / (2 V), differentiated term
// by term; on the log scale the IPRED derivatives go through log IPRED.
void density_derivatives(const ErrorModel& error, double dv, double f, double sa, double sp,
                         double d[3], double h[3][3]) {
  const bool add = error.kind != ErrorModelKind::Proportional;
  const bool prop = error.kind != ErrorModelKind::Additive;
  const double u = error.log_scale ? std::log(dv) - std::log(f) : dv - f;
  const double q = u * u;
  const double qv[3] = {-2.0 * u, 0.0, 0.0};
  double v = 0.0, vv[3] = {0.0, 0.0, 0.0}, vvv[3][3] = {};
  if (add) {
    v += sa * sa;
    vv[1] = 2.0 * sa;
    vvv[1][1] = 2.0;
  }
  if (prop) {
    v += sp * sp * f * f;
    vv[0] = 2.0 * sp * sp * f;
    vvv[0][0] = 2.0 * sp * sp;
    vv[2] = 2.0 * sp * f * f;
    vvv[2][2] = 2.0 * f * f;
    vvv[0][2] = vvv[2][0] = 4.0 * sp * f;
  }
  for (int i = 0; i < 3; ++i) {
    d[i] = -0.5 * vv[i] / v - 0.5 * qv[i] / v + 0.5 * q * vv[i] / (v * v);
    for (int j = 0; j < 3; ++j) {
      const double qij = i == 0 && j == 0 ? 2.0 : 0.0;
      h[i][j] = -0.5 * vvv[i][j] / v + 0.5 * vv[i] * vv[j] / (v * v) - 0.5 * qij / v +
                0.5 * (qv[i] * vv[j] + qv[j] * vv[i]) / (v * v) + 0.5 * q * vvv[i][j] / (v * v) -
                q * vv[i] * vv[j] / (v * v * v);
    }
  }
  if (!error.log_scale) return;
  // Variable 0 was log IPRED: d/df = (1/f) d/dg, d2/df2 = (d2/dg2 - d/dg) / f^2.
  h[0][0] = (h[0][0] - d[0]) / (f * f);
  for (int j = 1; j < 3; ++j) h[0][j] = h[j][0] = h[0][j] / f;
  d[0] /= f;
}
}  // namespace

double Predictor::log_likelihood_hessian(std::int64_t s, const double* params, const int* columns,
                                         int count, const ErrorModel& error, const double* sigma,
                                         double* gradient, double* hessian, Workspace& ws) const {
  impl_->check_subject(s);
  check_call(*impl_, ws.state_->owner, params, "log_likelihood_hessian");
  check_error_model(error, sigma);
  check_dv(*impl_, s, error);
  check_columns(*impl_, columns, count, "log_likelihood_hessian");
  const int ns = error.parameter_count();
  const std::size_t nv = static_cast<std::size_t>(count + ns);
  const auto reject_all = [&] {
    if (gradient != nullptr) std::fill(gradient, gradient + nv, 0.0);
    if (hessian != nullptr) std::fill(hessian, hessian + nv * nv, 0.0);
    return -kInf;
  };
  if (!sigma_in_domain(error, sigma)) return reject_all();
  const detail::SubjectPlan& plan = impl_->plans[static_cast<std::size_t>(s)];
  Workspace::State& st = *ws.state_;
  const std::size_t m = static_cast<std::size_t>(count);
  st.hess.resize(static_cast<std::size_t>(plan.obs_count) * m * m);
  st.grad.resize(static_cast<std::size_t>(impl_->setup.np));
  st.sigma_grad.resize(static_cast<std::size_t>(ns));
  try {
    st.solver->predict_hessian(plan, s, params, st.pred.data(), st.jac.data(), columns, count,
                               st.hess.data());
  } catch (const DomainError&) {
    return reject_all();
  }
  const double ll = likelihood(*impl_, s, st.pred.data(), st.jac.data(), error, sigma,
                               st.grad.data(), st.sigma_grad.data());
  if (ll == -kInf) return reject_all();
  if (gradient != nullptr) {
    for (std::size_t a = 0; a < m; ++a) gradient[a] = st.grad[static_cast<std::size_t>(columns[a])];
    for (int j = 0; j < ns; ++j) gradient[m + static_cast<std::size_t>(j)] = st.sigma_grad[j];
  }
  if (hessian == nullptr) return ll;
  std::fill(hessian, hessian + nv * nv, 0.0);
  const bool add = error.kind != ErrorModelKind::Proportional;
  const double sa = add ? sigma[0] : 0.0;
  const double sp = error.kind != ErrorModelKind::Additive ? sigma[add ? 1 : 0] : 0.0;
  // The density's variable of each sigma: 1 sigma_add, 2 sigma_prop.
  const int var_of[2] = {add ? 1 : 2, 2};
  const std::size_t np = static_cast<std::size_t>(impl_->setup.np);
  for (std::size_t i = 0; i < plan.ll_obs.size(); ++i) {
    const std::size_t o = static_cast<std::size_t>(plan.ll_obs[i]);
    double d[3], h[3][3];
    density_derivatives(error, plan.ll_dv[i], st.pred[o], sa, sp, d, h);
    const double* jr = st.jac.data() + o * np;
    const double* hr = st.hess.data() + o * m * m;
    for (std::size_t a = 0; a < m; ++a) {
      const double ja = jr[columns[a]];
      for (std::size_t b = a; b < m; ++b) {
        const double v = h[0][0] * ja * jr[columns[b]] + d[0] * hr[a * m + b];
        hessian[a * nv + b] += v;
        if (b != a) hessian[b * nv + a] += v;
      }
      for (int j = 0; j < ns; ++j) {
        const double v = h[0][var_of[j]] * ja;
        hessian[a * nv + m + static_cast<std::size_t>(j)] += v;
        hessian[(m + static_cast<std::size_t>(j)) * nv + a] += v;
      }
    }
    for (int j = 0; j < ns; ++j)
      for (int k = 0; k < ns; ++k)  // h is symmetric: entries (j, k) and (k, j) get the same
        hessian[(m + static_cast<std::size_t>(j)) * nv + m + static_cast<std::size_t>(k)] +=
            h[std::min(var_of[j], var_of[k])][std::max(var_of[j], var_of[k])];
  }
  for (std::size_t i = 0; i < nv * nv; ++i)
    if (!std::isfinite(hessian[i])) hessian[i] = 0.0;
  return ll;
}

namespace {
// Runs body(s, workspace) for every subject on `threads` threads, one workspace per thread; the
// error of the lowest failing subject is rethrown (deterministic).
template <class Body>
void for_subjects(const Predictor& pred, int threads, Body&& body) {
  detail::parallel_for(
      pred.subjects(), resolve_threads(threads), 8, [&] { return pred.make_workspace(); },
      [&](std::int64_t s, std::unique_ptr<Predictor::Workspace>& ws) { body(s, *ws); });
}
}  // namespace

// Predictions of every subject into `out` on the device, the subjects it leaves to the host on
// the CPU's solver.
void Predictor::predict_on_device(const double* params, double* out, double* jacobian,
                                  int threads) const {
  const Predictor& pred = *this;
  Impl& impl = *impl_;
  const int t = resolve_threads(threads);
  impl.events->predict(params, t, out, jacobian, impl.host);
  impl.last.host_subjects = static_cast<std::int64_t>(impl.host.size());
  impl.last.device_subjects = subjects() - impl.last.host_subjects;
  impl.last.kernel_seconds = impl.events->kernel_seconds();
  impl.last.transfer_seconds = impl.events->transfer_seconds();
  const std::size_t np = static_cast<std::size_t>(impl.setup.np);
  detail::parallel_for(
      static_cast<std::int64_t>(impl.host.size()), t, 1, [&] { return pred.make_workspace(); },
      [&](std::int64_t i, std::unique_ptr<Predictor::Workspace>& ws) {
        const std::int64_t s = impl.host[static_cast<std::size_t>(i)];
        const std::size_t off = static_cast<std::size_t>(pred.observation_offset(s));
        const double* row = params + static_cast<std::size_t>(s) * np;
        if (jacobian != nullptr)
          pred.predict_gradient(s, row, out + off, jacobian + off * np, *ws);
        else
          pred.predict(s, row, out + off, *ws);
      });
}

void Predictor::predict_all(const double* params, double* out, int threads) const {
  if (params == nullptr || (out == nullptr && observations() > 0))
    throw_invalid("Predictor::predict_all: params or out is null");
  if (impl_->events) {
    const std::lock_guard<std::mutex> lock(impl_->mutex);
    predict_on_device(params, out, nullptr, threads);
    return;
  }
  const std::size_t np = static_cast<std::size_t>(impl_->setup.np);
  for_subjects(*this, threads, [&](std::int64_t s, Workspace& ws) {
    predict(s, params + static_cast<std::size_t>(s) * np, out + observation_offset(s), ws);
  });
}

void Predictor::predict_gradient_all(const double* params, double* out, double* jacobian,
                                     int threads) const {
  if (params == nullptr || ((out == nullptr || jacobian == nullptr) && observations() > 0))
    throw_invalid("Predictor::predict_gradient_all: params, out or jacobian is null");
  if (impl_->events) {
    const std::lock_guard<std::mutex> lock(impl_->mutex);
    predict_on_device(params, out, jacobian, threads);
    return;
  }
  const std::size_t np = static_cast<std::size_t>(impl_->setup.np);
  for_subjects(*this, threads, [&](std::int64_t s, Workspace& ws) {
    const std::size_t off = static_cast<std::size_t>(observation_offset(s));
    predict_gradient(s, params + static_cast<std::size_t>(s) * np, out + off, jacobian + off * np,
                     ws);
  });
}

double Predictor::log_likelihood_all(const double* params, const ErrorModel& error,
                                     const double* sigma, double* per_subject, double* gradient,
                                     double* sigma_gradient, int threads) const {
  if (params == nullptr) throw_invalid("Predictor::log_likelihood_all: params is null");
  check_error_model(error, sigma);
  for (std::int64_t s = 0; s < subjects(); ++s) check_dv(*impl_, s, error);
  const std::size_t np = static_cast<std::size_t>(impl_->setup.np);
  const std::size_t n = static_cast<std::size_t>(subjects());
  const std::size_t ns = static_cast<std::size_t>(error.parameter_count());
  std::vector<double> lls(n);
  std::vector<double> sg(sigma_gradient != nullptr ? n * ns : 0);
  bool done = false;
  if (impl_->events && sigma_in_domain(error, sigma)) {
    // Predictions (and Jacobians) on the device, then each subject's likelihood from them.
    const std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->pred.resize(static_cast<std::size_t>(observations()));
    impl_->jac.resize(gradient != nullptr ? impl_->pred.size() * np : 0);
    double* jac = gradient != nullptr ? impl_->jac.data() : nullptr;
    try {
      predict_on_device(params, impl_->pred.data(), jac, threads);
      done = true;
    } catch (const DomainError&) {
      // A row out of the domain: the per-subject calls below give its subject -infinity.
    }
    if (done)
      detail::parallel_for(
          subjects(), resolve_threads(threads), 64, [] { return 0; },
          [&](std::int64_t s, int&) {
            const std::size_t i = static_cast<std::size_t>(s);
            const std::size_t off = static_cast<std::size_t>(observation_offset(s));
            lls[i] = likelihood(*impl_, s, impl_->pred.data() + off,
                                jac != nullptr ? jac + off * np : nullptr, error, sigma,
                                gradient != nullptr ? gradient + i * np : nullptr,
                                sigma_gradient != nullptr ? sg.data() + i * ns : nullptr);
          });
  }
  if (!done) {
    for_subjects(*this, threads, [&](std::int64_t s, Workspace& ws) {
      const std::size_t i = static_cast<std::size_t>(s);
      lls[i] = log_likelihood(s, params + i * np, error, sigma,
                              gradient != nullptr ? gradient + i * np : nullptr,
                              sigma_gradient != nullptr ? sg.data() + i * ns : nullptr, ws);
    });
  }
  // Sums in subject order: the same bits for any thread count.
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += lls[i];
  if (per_subject != nullptr) std::copy(lls.begin(), lls.end(), per_subject);
  if (total == -kInf) {  // the whole set is rejected
    reject(np * n, static_cast<int>(ns), gradient, sigma_gradient);
    return total;
  }
  if (sigma_gradient != nullptr) {
    std::fill(sigma_gradient, sigma_gradient + ns, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < ns; ++j) sigma_gradient[j] += sg[i * ns + j];
  }
  return total;
}

}  // namespace pkscan
