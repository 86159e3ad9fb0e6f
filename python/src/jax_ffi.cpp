// XLA FFI handlers of pkscan.jax (python/pkscan/jax.py): the Predictor called directly from a
// compiled JAX program, no Python in between. Compiled into the pkscan extension module only when
// the headers of jaxlib/include (jax.ffi.include_dir()) were found (PKSCAN_WITH_XLA_FFI); the
// module then exposes the handlers as PyCapsules (`_xla_ffi_targets()`), which pkscan.jax registers
// with jax.ffi.register_ffi_target, and the XLA FFI API version of those headers with the jaxlib
// they came from (`_xla_ffi_api_version`, `_xla_ffi_jaxlib`; PKSCAN_XLA_FFI_JAXLIB), which its
// message names when an installed jaxlib does not accept the handlers.
//
// Both handlers take a leading batch (any number of leading dimensions, flattened: the
// vmap_method="broadcast_all" layout) and evaluate every (batch element, subject) pair in one
// OpenMP loop. The Predictor is passed as its address (attribute `predictor`); the Python side
// keeps the Predictor alive while the function exists.
//
// Values: float32 or float64 buffers (the dtype of `params`; sigma the same), computed in float64.
// Invalid parameter values (DomainError: negative, NaN or infinite rates and volumes, sigma not
// finite and > 0) never escape: the subject's log-likelihood is -inf with zero gradients, its
// predictions NaN with zero Jacobian. A non-finite log-likelihood (a proportional model at a
// prediction of 0) is also reported as -inf with zero gradients. Anything else that fails (no
// memory, a wrong shape) is returned to XLA as an error status; no C++ exception leaves a handler.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/grid_gradient.hpp>
#include <pkscan/predictor.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "xla/ffi/api/ffi.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

namespace ffi = xla::ffi;

namespace pkscan::python {
namespace {

// float32 or float64 buffer data as float64 (copied for float32).
class Doubles {
 public:
  Doubles(const ffi::AnyBuffer& b) : n_(b.element_count()) {  // NOLINT(google-explicit-constructor)
    if (b.element_type() == ffi::DataType::F64) {
      data_ = static_cast<const double*>(b.untyped_data());
    } else {
      const auto* f = static_cast<const float*>(b.untyped_data());
      copy_.assign(f, f + n_);
      data_ = copy_.data();
    }
  }
  const double* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return n_; }

 private:
  std::size_t n_;
  const double* data_ = nullptr;
  std::vector<double> copy_;
};

// Writes float64 values into a float32 or float64 result buffer.
void store(const std::vector<double>& v, ffi::Result<ffi::AnyBuffer>& r) {
  if (r->element_type() == ffi::DataType::F64) {
    auto* d = static_cast<double*>(r->untyped_data());
    for (std::size_t i = 0; i < v.size(); ++i) d[i] = v[i];
  } else {
    auto* f = static_cast<float*>(r->untyped_data());
    for (std::size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i]);
  }
}

bool floating(ffi::DataType t) { return t == ffi::DataType::F32 || t == ffi::DataType::F64; }

ffi::Error check_result(ffi::Result<ffi::AnyBuffer>& r, std::size_t n, const char* what) {
  if (!floating(r->element_type()) || r->element_count() != n)
    return ffi::Error::InvalidArgument(std::string("pkscan.jax: result ") + what +
                                       " has the wrong size or type");
  return ffi::Error::Success();
}

ErrorModel error_model(std::int64_t kind, std::int64_t log_scale) {
  ErrorModel e;
  e.kind = kind == 1   ? ErrorModelKind::Proportional
           : kind == 2 ? ErrorModelKind::Combined
                       : ErrorModelKind::Additive;
  e.log_scale = log_scale != 0;
  return e;
}

// One subject's values (predictions or concentrations) and their derivatives after evaluation:
// a subject out of the domain (ok false, or a non-finite value) gets NaN values and zero
// derivatives; otherwise non-finite derivative entries (unused NaN columns) become 0, so no NaN
// reaches JAX's gradients. `d` may be null (no derivatives asked).
void finish_values(bool ok, double* v, std::int64_t n, double* d, std::int64_t nd) {
  for (std::int64_t i = 0; ok && i < n; ++i) ok = std::isfinite(v[i]);
  if (!ok) {
    for (std::int64_t i = 0; i < n; ++i) v[i] = std::numeric_limits<double>::quiet_NaN();
    if (d != nullptr)
      for (std::int64_t i = 0; i < nd; ++i) d[i] = 0.0;
  } else if (d != nullptr) {
    for (std::int64_t i = 0; i < nd; ++i)
      if (!std::isfinite(d[i])) d[i] = 0.0;
  }
}

// XLA runs its CPU code, and calls these handlers, with subnormal numbers flushed to zero (x86's
// MXCSR FTZ and DAZ flags); pkscan computes with IEEE subnormals. While one lives, this thread
// computes with subnormals (as the Python Predictor does, so that both give the same bits); the
// thread's mode is restored after.
class IeeeSubnormals {
#if defined(__x86_64__) || defined(_M_X64)
 public:
  IeeeSubnormals() noexcept : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~kFlushBits); }
  ~IeeeSubnormals() { _mm_setcsr(saved_); }
  IeeeSubnormals(const IeeeSubnormals&) = delete;
  IeeeSubnormals& operator=(const IeeeSubnormals&) = delete;

 private:
  static constexpr unsigned kFlushBits = 0x8040u;  // FTZ (bit 15) and DAZ (bit 6)
  unsigned saved_;
#endif
};

// Runs body(i, worker) for i in [0, count) on `threads` threads (pkscan::parallel_for), each
// with IEEE subnormals; returns the message of the lowest failing index's exception, empty when
// none failed.
template <class Body>
std::string for_each_index(std::int64_t count, int threads, Body body) {
  try {
    pkscan::parallel_for(count, threads, [&](std::int64_t i, int worker) {
      const IeeeSubnormals ieee;
      body(i, worker);
    });
    return {};
  } catch (const std::exception& e) {
    return e.what()[0] ? std::string(e.what()) : std::string("failed");
  } catch (...) {
    return "unknown exception";
  }
}

// Runs body(thread_workspace, batch, subject) for every pair; the first failure other than
// DomainError (which body handles) is returned as its message.
template <class Body>
std::string for_each_pair(const Predictor& p, std::int64_t batch, Body body) {
  const std::int64_t S = p.subjects();
  const std::int64_t pairs = batch * S;
  // A few microseconds per subject (docs/performance.md, "Thresholds"): small calls (the common
  // case inside a sampler) run on the calling thread; a parallel region there costs more than it
  // saves, and far more on a loaded machine, where a descheduled team member holds up the
  // barrier for a whole time slice.
  const int threads = static_cast<int>(
      std::max<std::int64_t>(1, std::min<std::int64_t>(default_threads(), pairs / 16)));
  std::vector<std::unique_ptr<Predictor::Workspace>> ws(static_cast<std::size_t>(threads));
  return for_each_index(pairs, threads, [&](std::int64_t i, int worker) {
    std::unique_ptr<Predictor::Workspace>& w = ws[static_cast<std::size_t>(worker)];
    if (!w) w = p.make_workspace();
    body(*w, i / S, i % S);
  });
}

// The batch size B of params [B, ...] with `row` values per batch entry, after checking the
// element type and the shape.
ffi::Error batch_of(const ffi::AnyBuffer& params, std::size_t row, std::int64_t& B) {
  if (!floating(params.element_type()))
    return ffi::Error::InvalidArgument("pkscan.jax: params must be float32 or float64");
  if (row == 0 || params.element_count() % row != 0)
    return ffi::Error::InvalidArgument("pkscan.jax: params has the wrong shape");
  B = static_cast<std::int64_t>(params.element_count() / row);
  return ffi::Error::Success();
}

// Runs a handler's body; an exception becomes an Internal error named after the Python function.
template <class F>
ffi::Error handle(const char* function, F&& body) {
  const IeeeSubnormals ieee;  // also for the conversions of the results to float32
  try {
    return body();
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(function) + ": " + e.what());
  } catch (...) {
    return ffi::Error::Internal(std::string(function) + ": unknown exception");
  }
}

// The batch size B of a log-likelihood call: params [B, S, P] (row = S P values) and sigma
// [B, K], after checking their element types and shapes.
ffi::Error loglik_batch(const ffi::AnyBuffer& params, const ffi::AnyBuffer& sigma, std::int64_t row,
                        std::int64_t K, std::int64_t& B) {
  if (!floating(sigma.element_type()))
    return ffi::Error::InvalidArgument("pkscan.jax: params and sigma must be float32 or float64");
  if (ffi::Error e = batch_of(params, static_cast<std::size_t>(row), B); e.failure()) return e;
  if (sigma.element_count() != static_cast<std::size_t>(B * K))
    return ffi::Error::InvalidArgument("pkscan.jax: sigma has the wrong shape");
  return ffi::Error::Success();
}

// Per-subject log-likelihood: params [B, S, P], sigma [B, K] -> per_subject [B, S],
// gradient [B, S, P], sigma_gradient [B, S, K] (zeros when with_gradient is 0).
ffi::Error loglik_impl(ffi::AnyBuffer params, ffi::AnyBuffer sigma,
                       ffi::Result<ffi::AnyBuffer> per_subject, ffi::Result<ffi::AnyBuffer> grad,
                       ffi::Result<ffi::AnyBuffer> sigma_grad, std::int64_t predictor,
                       std::int64_t error_kind, std::int64_t log_scale,
                       std::int64_t with_gradient) {
  return handle("pkscan.jax.log_likelihood", [&] {
    const auto& p = *reinterpret_cast<const Predictor*>(static_cast<std::uintptr_t>(predictor));
    const ErrorModel error = error_model(error_kind, log_scale);
    const std::int64_t S = p.subjects(), P = p.parameters(), K = error.parameter_count();
    std::int64_t B = 0;
    if (ffi::Error e = loglik_batch(params, sigma, S * P, K, B); e.failure()) return e;
    for (const auto& [r, n, what] :
         {std::tuple{&per_subject, B * S, "per_subject"}, std::tuple{&grad, B * S * P, "gradient"},
          std::tuple{&sigma_grad, B * S * K, "sigma_gradient"}})
      if (ffi::Error e = check_result(*r, static_cast<std::size_t>(n), what); e.failure()) return e;

    const Doubles x(params), sg(sigma);
    std::vector<double> ll(static_cast<std::size_t>(B * S));
    std::vector<double> g(static_cast<std::size_t>(B * S * P), 0.0);
    std::vector<double> gs(static_cast<std::size_t>(B * S * K), 0.0);
    const bool want = with_gradient != 0;
    const std::string failure =
        for_each_pair(p, B, [&](Predictor::Workspace& ws, std::int64_t b, std::int64_t s) {
          const std::size_t k = static_cast<std::size_t>(b * S + s);
          double* gp = want ? &g[k * static_cast<std::size_t>(P)] : nullptr;
          double* gsp = want ? &gs[k * static_cast<std::size_t>(K)] : nullptr;
          // Out of the domain: -inf with zero gradients (Predictor::log_likelihood's rule, the
          // one the Python Predictor answers with).
          ll[k] = p.log_likelihood(s, x.data() + k * static_cast<std::size_t>(P), error,
                                   sg.data() + static_cast<std::size_t>(b * K), gp, gsp, ws);
        });
    if (!failure.empty()) return ffi::Error::Internal("pkscan.jax.log_likelihood: " + failure);
    store(ll, per_subject);
    store(g, grad);
    store(gs, sigma_grad);
    return ffi::Error::Success();
  });
}

// Per-subject Hessians of the log-likelihood over (params, sigma): params [B, S, P], sigma
// [B, K] -> hessian [B, S, P + K, P + K] (Predictor::log_likelihood_hessian with every column;
// zeros out of the domain).
ffi::Error loglik_hessian_impl(ffi::AnyBuffer params, ffi::AnyBuffer sigma,
                               ffi::Result<ffi::AnyBuffer> hessian, std::int64_t predictor,
                               std::int64_t error_kind, std::int64_t log_scale) {
  return handle("pkscan.jax.log_likelihood", [&] {
    const auto& p = *reinterpret_cast<const Predictor*>(static_cast<std::uintptr_t>(predictor));
    const ErrorModel error = error_model(error_kind, log_scale);
    const std::int64_t S = p.subjects(), P = p.parameters(), K = error.parameter_count();
    std::int64_t B = 0;
    if (ffi::Error e = loglik_batch(params, sigma, S * P, K, B); e.failure()) return e;
    const std::size_t V = static_cast<std::size_t>(P + K);
    if (ffi::Error e = check_result(hessian, static_cast<std::size_t>(B * S) * V * V, "hessian");
        e.failure())
      return e;
    const Doubles x(params), sg(sigma);
    std::vector<int> cols(static_cast<std::size_t>(P));
    for (std::size_t c = 0; c < cols.size(); ++c) cols[c] = static_cast<int>(c);
    std::vector<double> h(static_cast<std::size_t>(B * S) * V * V, 0.0);
    const std::string failure =
        for_each_pair(p, B, [&](Predictor::Workspace& ws, std::int64_t b, std::int64_t s) {
          const std::size_t k = static_cast<std::size_t>(b * S + s);
          p.log_likelihood_hessian(
              s, x.data() + k * static_cast<std::size_t>(P), cols.data(), static_cast<int>(P),
              error, sg.data() + static_cast<std::size_t>(b * K), nullptr, &h[k * V * V], ws);
        });
    if (!failure.empty()) return ffi::Error::Internal("pkscan.jax.log_likelihood: " + failure);
    store(h, hessian);
    return ffi::Error::Success();
  });
}

// Hessians of the predictions: params [B, S, P] -> hessian [B, N, P, P] (row i: d2 pred[i] /
// d params[subject of i]^2; zeros for a subject out of the domain).
ffi::Error predict_hessian_impl(ffi::AnyBuffer params, ffi::Result<ffi::AnyBuffer> hessian,
                                std::int64_t predictor) {
  return handle("pkscan.jax.predict", [&] {
    const auto& p = *reinterpret_cast<const Predictor*>(static_cast<std::uintptr_t>(predictor));
    const std::int64_t S = p.subjects(), P = p.parameters(), N = p.observations();
    std::int64_t B = 0;
    if (ffi::Error e = batch_of(params, static_cast<std::size_t>(S * P), B); e.failure()) return e;
    const std::size_t pp = static_cast<std::size_t>(P * P);
    if (ffi::Error e = check_result(hessian, static_cast<std::size_t>(B * N) * pp, "hessian");
        e.failure())
      return e;
    const Doubles x(params);
    std::vector<int> cols(static_cast<std::size_t>(P));
    for (std::size_t c = 0; c < cols.size(); ++c) cols[c] = static_cast<int>(c);
    std::vector<double> h(static_cast<std::size_t>(B * N) * pp, 0.0);
    const std::string failure =
        for_each_pair(p, B, [&](Predictor::Workspace& ws, std::int64_t b, std::int64_t s) {
          const std::size_t n = static_cast<std::size_t>(p.observations(s));
          const std::size_t o = static_cast<std::size_t>(b * N + p.observation_offset(s));
          std::vector<double> pred(n), jac(n * static_cast<std::size_t>(P));
          try {
            p.predict_hessian(s, x.data() + static_cast<std::size_t>((b * S + s) * P), cols.data(),
                              static_cast<int>(P), pred.data(), jac.data(), &h[o * pp], ws);
          } catch (const DomainError&) {  // NaN predictions: zero derivatives
            std::fill(h.begin() + static_cast<std::ptrdiff_t>(o * pp),
                      h.begin() + static_cast<std::ptrdiff_t>((o + n) * pp), 0.0);
          }
        });
    if (!failure.empty()) return ffi::Error::Internal("pkscan.jax.predict: " + failure);
    store(h, hessian);
    return ffi::Error::Success();
  });
}

// Predictions: params [B, S, P] -> predictions [B, N], jacobian [B, N, P] (row i: d pred[i] /
// d params[subject of i]; zeros when with_gradient is 0).
ffi::Error predict_impl(ffi::AnyBuffer params, ffi::Result<ffi::AnyBuffer> out,
                        ffi::Result<ffi::AnyBuffer> jac, std::int64_t predictor,
                        std::int64_t with_gradient) {
  return handle("pkscan.jax.predict", [&] {
    const auto& p = *reinterpret_cast<const Predictor*>(static_cast<std::uintptr_t>(predictor));
    const std::int64_t S = p.subjects(), P = p.parameters(), N = p.observations();
    std::int64_t B = 0;
    if (ffi::Error e = batch_of(params, static_cast<std::size_t>(S * P), B); e.failure()) return e;
    if (ffi::Error e = check_result(out, static_cast<std::size_t>(B * N), "predictions");
        e.failure())
      return e;
    if (ffi::Error e = check_result(jac, static_cast<std::size_t>(B * N * P), "jacobian");
        e.failure())
      return e;

    const Doubles x(params);
    std::vector<double> pred(static_cast<std::size_t>(B * N));
    std::vector<double> J(static_cast<std::size_t>(B * N * P), 0.0);
    const bool want = with_gradient != 0;
    const std::string failure =
        for_each_pair(p, B, [&](Predictor::Workspace& ws, std::int64_t b, std::int64_t s) {
          const std::int64_t n = p.observations(s);
          if (n == 0) return;
          const std::size_t o = static_cast<std::size_t>(b * N + p.observation_offset(s));
          const double* row_params = x.data() + static_cast<std::size_t>((b * S + s) * P);
          double* jp = &J[o * static_cast<std::size_t>(P)];
          bool ok = true;
          try {
            if (want)
              p.predict_gradient(s, row_params, &pred[o], jp, ws);
            else
              p.predict(s, row_params, &pred[o], ws);
          } catch (const DomainError&) {
            ok = false;
          }
          finish_values(ok, &pred[o], n, want ? jp : nullptr, n * P);
        });
    if (!failure.empty()) return ffi::Error::Internal("pkscan.jax.predict: " + failure);
    store(pred, out);
    store(J, jac);
    return ffi::Error::Success();
  });
}

// Grid concentrations (GridGradient, euler): params [B, S, P] -> conc [B, S, T, C],
// jacobian [B, S, T, C, P] (d conc / d the subject's own row; zeros when with_gradient is 0).
ffi::Error grid_impl(ffi::AnyBuffer params, ffi::Result<ffi::AnyBuffer> out,
                     ffi::Result<ffi::AnyBuffer> jac, std::int64_t gradient, std::int64_t subjects,
                     std::int64_t with_gradient) {
  return handle("pkscan.jax.Simulator", [&] {
    const auto& g = *reinterpret_cast<const GridGradient*>(static_cast<std::uintptr_t>(gradient));
    const std::int64_t S = subjects, P = g.parameters();
    const std::int64_t M = static_cast<std::int64_t>(g.output_steps().size()) * g.compartments();
    std::int64_t B = 0;
    if (ffi::Error e = batch_of(params, static_cast<std::size_t>(S < 1 ? 0 : S * P), B);
        e.failure())
      return e;
    if (ffi::Error e = check_result(out, static_cast<std::size_t>(B * S * M), "concentrations");
        e.failure())
      return e;
    if (ffi::Error e = check_result(jac, static_cast<std::size_t>(B * S * M * P), "jacobian");
        e.failure())
      return e;
    const Doubles x(params);
    std::vector<double> conc(static_cast<std::size_t>(B * S * M));
    std::vector<double> J(static_cast<std::size_t>(B * S * M * P), 0.0);
    const bool want = with_gradient != 0;
    // One subject's gradient is some work: a thread for every four subjects at the most.
    const int threads = static_cast<int>(
        std::max<std::int64_t>(1, std::min<std::int64_t>(default_threads(), B * S / 4)));
    const std::string failure = for_each_index(B * S, threads, [&](std::int64_t i, int) {
      const std::size_t o = static_cast<std::size_t>(i * M);
      double* cp = &conc[o];
      double* jp = want ? &J[o * static_cast<std::size_t>(P)] : nullptr;
      bool ok = true;
      try {
        g.evaluate(x.data() + static_cast<std::size_t>(i * P), cp, jp);
      } catch (const DomainError&) {
        ok = false;
      }
      finish_values(ok, cp, M, jp, M * P);
    });
    if (!failure.empty()) return ffi::Error::Internal("pkscan.jax.Simulator: " + failure);
    store(conc, out);
    store(J, jac);
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(pkscan_jax_loglik, loglik_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::int64_t>("predictor")
                                  .Attr<std::int64_t>("error_kind")
                                  .Attr<std::int64_t>("log_scale")
                                  .Attr<std::int64_t>("with_gradient"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(pkscan_jax_loglik_hessian, loglik_hessian_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::int64_t>("predictor")
                                  .Attr<std::int64_t>("error_kind")
                                  .Attr<std::int64_t>("log_scale"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    pkscan_jax_predict_hessian, predict_hessian_impl,
    ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Attr<std::int64_t>("predictor"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(pkscan_jax_predict, predict_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::int64_t>("predictor")
                                  .Attr<std::int64_t>("with_gradient"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(pkscan_jax_grid, grid_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::int64_t>("gradient")
                                  .Attr<std::int64_t>("subjects")
                                  .Attr<std::int64_t>("with_gradient"));

void bind_jax_ffi(py::module_& m) {
  m.def(
      "_xla_ffi_targets",
      [] {
        py::dict d;
        d["pkscan_loglik"] =
            py::capsule(reinterpret_cast<void*>(&pkscan_jax_loglik), "xla._CUSTOM_CALL_TARGET");
        d["pkscan_predict"] =
            py::capsule(reinterpret_cast<void*>(&pkscan_jax_predict), "xla._CUSTOM_CALL_TARGET");
        d["pkscan_loglik_hessian"] = py::capsule(
            reinterpret_cast<void*>(&pkscan_jax_loglik_hessian), "xla._CUSTOM_CALL_TARGET");
        d["pkscan_predict_hessian"] = py::capsule(
            reinterpret_cast<void*>(&pkscan_jax_predict_hessian), "xla._CUSTOM_CALL_TARGET");
        d["pkscan_grid"] =
            py::capsule(reinterpret_cast<void*>(&pkscan_jax_grid), "xla._CUSTOM_CALL_TARGET");
        return d;
      },
      "XLA FFI handlers of pkscan.jax (name: PyCapsule), for jax.ffi.register_ffi_target.");
  m.attr("_xla_ffi_api_version") = py::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  m.attr("_xla_ffi_jaxlib") = PKSCAN_XLA_FFI_JAXLIB;
}

}  // namespace pkscan::python
