#pragma once
/// @file predictor.hpp
/// pkscan inside fitting code: prepare a dataset once, then evaluate predictions at its
/// observation records, the log-likelihood and their exact gradients many times with new
/// parameters.
///
/// Parameters are given per subject as full rows in ModelInfo::parameters order (the columns of
/// a ParameterBatch for the same model): a parameter that is not used (the unused one of micro
/// constants / clearances) is NaN, as in a ParameterBatch. Gradients are taken with respect to
/// every column; the derivative with respect to an unused (NaN) column is 0. Dataset columns
/// named like parameters override the row per record, as in simulate_dataset(); a column that
/// a dataset record overrides has derivative 0 over the intervals it governs.
///
/// Predictions are those of simulate_dataset() for the same dataset and parameters, bit for bit
/// (both run one event solver, engine/events/solver.hpp), with the same conventions
/// (docs/conventions.md): EVID 0-4, ADDL/II, SS=1/2 in closed form, f_<cmt> scaling the amount
/// (and with a fixed RATE the duration), lag_<cmt>, next-record-carries-backward parameter
/// columns. A steady state that does not exist (no elimination) gives NaN predictions, not an
/// exception (simulate_dataset() reports SubjectStatus::NonFinite).
///
/// Derivatives are exact (forward sensitivities of the linear ODE: the Frechet derivative of
/// the matrix exponential and of its integral, plus the jump terms of event times that move with
/// lag_* and, for fixed-RATE infusions, of infusion ends that move with f_*), not finite
/// differences. Observations exactly at a lagged dose's arrival time or at an infusion's end
/// are points where the prediction is not differentiable in lag_* / f_*; there the one-sided
/// derivative on the side of the state the observation reports is returned (the observation
/// sees the arrival, and sees the infusion stopped: lag_* or f_* decreasing). Where a moving
/// event time coincides with a change of the parameter row (always so for a dose with lag 0,
/// which arrives at its own record's time), the derivative is the one for the event moving
/// later (the rate matrix of the interval after the event). Event order, steady-state interval
/// counts and F = 0 (no infusion) are discrete: the derivative is that of the current order.
///
/// Thread-safety: a Predictor is immutable after construction; evaluate from any number of
/// threads at once, each with its own Workspace (a Workspace is used by one thread at a time).
/// The per-subject evaluation functions (predict, predict_gradient, log_likelihood) do not
/// allocate or log once the workspace has served one evaluation of the subject shape at hand
/// (its buffers keep their capacity), and throw only for invalid input (predict and
/// predict_gradient: DomainError for invalid parameter values, which allocates the message;
/// log_likelihood returns -infinity there instead). The *_all functions make one workspace per
/// thread per call.

#include <cstdint>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/dataset.hpp>
#include <pkscan/models/model.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pkscan {

/// Residual error model of the observations (DV) around the predictions (IPRED).
enum class ErrorModelKind {
  Additive,      ///< DV = IPRED + eps, sd = sigma_add
  Proportional,  ///< DV = IPRED (1 + eps), sd = sigma_prop * IPRED
  Combined,      ///< sd = sqrt(sigma_add^2 + (sigma_prop * IPRED)^2)
};

/// An error model. Error-model parameters, in this order where used: sigma_add, sigma_prop
/// (standard deviations, finite and > 0). With log_scale, the model applies to log(DV) around
/// log(IPRED), additive on the log scale: log(DV) = log(IPRED) + eps, sd = sigma_add (the
/// exponential error model; only ErrorModelKind::Additive is accepted there, and DV and IPRED
/// must be > 0). The proportional sd is sigma_prop * |IPRED|.
struct ErrorModel {
  ErrorModelKind kind = ErrorModelKind::Additive;  ///< which model
  bool log_scale = false;                          ///< log-transform both sides
  /// Number of error-model parameters (1 for additive or proportional, 2 for combined).
  int parameter_count() const noexcept { return kind == ErrorModelKind::Combined ? 2 : 1; }
  /// Names of the error-model parameters ("sigma_add", "sigma_prop").
  std::vector<std::string> parameter_names() const;
};

/// The name of an error model kind in run files, the command line and Python: "additive",
/// "proportional" or "combined".
std::string to_string(ErrorModelKind kind);

/// Parses an error model name (to_string's).
/// @throws InvalidArgument "error model is "x", but must be additive, proportional or combined"
ErrorModelKind error_model_from_string(std::string_view name);

/// Evaluated on its own: for one subject or all, predictions at the observation records
/// (EVID 0), in dataset order within the subject.
class Predictor {
 public:
  /// Scratch memory for one thread; make one per thread with make_workspace(). Opaque; movable
  /// only through its std::unique_ptr. Valid only with the Predictor that made it.
  class Workspace {
   public:
    ~Workspace();
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

   private:
    friend class Predictor;
    struct State;
    explicit Workspace(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
  };

  /// Prepares `data` for `model`: sorts each subject's events, builds ADDL doses, finds the
  /// observation records. @throws InvalidArgument when the dataset does not fit the model
  /// (a CMT out of range, a parameter column the model does not have), or `model` is null.
  Predictor(Dataset data, std::shared_ptr<const ModelInfo> model);
  /// Same for a built-in model. @throws InvalidArgument for ModelKind::Linear (pass the
  /// ModelInfo from make_linear_model() instead).
  Predictor(Dataset data, ModelKind model);
  ~Predictor();
  Predictor(Predictor&&) noexcept;
  Predictor& operator=(Predictor&&) noexcept;
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  /// The model.
  const ModelInfo& model() const noexcept;
  /// The dataset as read.
  const Dataset& dataset() const noexcept;
  /// Number of subjects (Dataset::subjects).
  std::int64_t subjects() const noexcept;
  /// Number of parameter columns (ModelInfo::parameters).
  int parameters() const noexcept;
  /// Number of observation records (EVID 0) of subject `s`; their predictions are at offsets
  /// observation_offset(s) .. observation_offset(s) + observations(s) - 1 of the whole vector.
  std::int64_t observations(std::int64_t s) const noexcept;
  /// Offset of subject `s`'s first observation in the all-subjects vectors.
  std::int64_t observation_offset(std::int64_t s) const noexcept;
  /// Observation records of all subjects.
  std::int64_t observations() const noexcept;
  /// A workspace for this predictor (allocates; reuse it across evaluations).
  std::unique_ptr<Workspace> make_workspace() const;

  /// Where predict_all(), predict_gradient_all() and log_likelihood_all() run (the per-subject
  /// functions always run on the CPU):
  /// - Device::Cpu (the default) and Device::Auto: the CPU (on an H100 the device's call is
  ///   1.6-1.7x faster than 16 cores at 1e5 subjects, 0.4x at 1e3; docs/performance.md);
  /// - Device::Cuda: the event walk on the GPU, one device thread per subject on the dataset's
  ///   plans, uploaded here once (engine/device/walk_kernels.hpp). The host's threads check each
  ///   call's parameter rows and compute their eigendecompositions (and, for gradients, each
  ///   row's V^-1 dA/dp V); one launch walks every subject. Predictions are the CPU's up to
  ///   CUDA's exp and expm1 (the walk is the CPU solver's arithmetic, step for step); gradients
  ///   are the CPU's forward sensitivities to rounding (about 1e-14 relative on the host system).
  ///   A subject whose rows have no well-conditioned real eigendecomposition, or with more than
  ///   32 infusions running at once, runs on the CPU
  ///   in the same call. The likelihood is summed on the host from the predictions (and their
  ///   Jacobian). Calls on one Predictor take turns on the device (a lock). The Predictor keeps
  ///   device memory and pinned host memory of about one call's rows, predictions and Jacobian
  ///   between calls (released by set_device(Device::Cpu) or its destruction).
  /// Not to be called while another thread evaluates this Predictor.
  /// @throws BackendUnavailable for Device::Cuda when this build or machine has no usable device
  ///         ("Predictor: device 'cuda' is not available: ..."); DeviceError when the device fails
  void set_device(Device device);
  /// The device set by set_device() (Device::Cpu by default; Device::Auto reads as Cpu).
  Device device() const noexcept;

  /// What the last *_all() call on Device::Cuda did.
  struct DeviceCall {
    std::int64_t device_subjects = 0;  ///< subjects the device walked
    std::int64_t host_subjects = 0;    ///< subjects it left to the CPU's solver
    double kernel_seconds = 0.0;       ///< the walk's kernel (device events around it)
    double transfer_seconds = 0.0;     ///< the copies of rows up and predictions down
  };
  /// The last call on the device (all zero before one).
  DeviceCall last_device_call() const;

  /// Predictions (concentration of the observed compartment: CMT or the model's observation
  /// compartment) of subject `s` (0-based) with parameters `params` (parameters() values).
  /// @param out observations(s) values
  /// @param ws a workspace of this predictor (make_workspace())
  /// @throws DomainError naming the subject ID and line for invalid parameter values
  /// @throws InvalidArgument for `s` out of range, null pointers, or a workspace made by another
  ///         Predictor
  void predict(std::int64_t s, const double* params, double* out, Workspace& ws) const;

  /// Predictions and their Jacobian with respect to the parameters (every column; 0 for
  /// unused (NaN) columns and for columns with no influence on this subject). The predictions
  /// are bit for bit those of predict().
  /// @param jacobian observations(s) x parameters() values, row-major
  /// @throws as predict()
  void predict_gradient(std::int64_t s, const double* params, double* out, double* jacobian,
                        Workspace& ws) const;

  /// Predictions, their Jacobian (every column, as predict_gradient()) and their Hessians with
  /// respect to the `count` columns `columns` (0-based, distinct; only these are differentiated
  /// twice: 3 of 15 columns cost 3 x 3). Exact, as the first derivatives: second-order forward
  /// sensitivities through doses, ADDL/II, resets, time-varying parameters, F and lag (the
  /// second-order terms of the Frechet derivative of expm on the eigenbasis or block-exponential
  /// path, and of the jumps of event times that move with lag_* and F;
  /// engine/events/second_order.hpp). At the non-differentiable points of the class comment the
  /// one-sided second derivative of the same side is returned. Steady states (SS=1/2) are
  /// differentiated twice in closed form, their phase with the lag included.
  /// @param hessian observations(s) x count x count values, row-major and symmetric:
  ///        hessian[(o * count + a) * count + b] = d2 pred_o / d params[columns[a]] d
  ///        params[columns[b]]
  /// @throws as predict_gradient(); InvalidArgument for a column out of range or listed twice
  void predict_hessian(std::int64_t s, const double* params, const int* columns, int count,
                       double* out, double* jacobian, double* hessian, Workspace& ws) const;

  /// log_likelihood() with its gradient and Hessian with respect to the variables
  /// v = (params[columns[0]], ..., params[columns[count - 1]], sigma[0], ..., sigma[ns - 1])
  /// (ns = error.parameter_count()), from predict_hessian() and the exact derivatives of each
  /// observation's log-density in IPRED and the sigmas. The value and the gradient are
  /// log_likelihood()'s (the same bits), and so is the domain: out of it, -infinity with zero
  /// gradient and Hessian. A Hessian entry whose terms leave the range of double is 0.
  /// @param gradient count + ns values (or null)
  /// @param hessian (count + ns) x (count + ns) values, row-major and symmetric
  /// @throws as log_likelihood() and predict_hessian()
  double log_likelihood_hessian(std::int64_t s, const double* params, const int* columns, int count,
                                const ErrorModel& error, const double* sigma, double* gradient,
                                double* hessian, Workspace& ws) const;

  /// Log-likelihood of subject `s`'s observed DV (EVID 0 with MDV 0 and DV present) under
  /// `error` with error-model parameters `sigma` (error.parameter_count() values), the full
  /// Gaussian density including -0.5 log(2 pi) terms (log-normal density on the DV scale for
  /// log_scale, i.e. including the -log(DV) Jacobian term). A subject without such observations
  /// gives 0. Each term is formed from log(sigma) and (DV - IPRED) / sd, so that any finite
  /// sigma > 0 (subnormal to 1e308) gives the finite log-density; one below the range of double
  /// (a residual of more than about 1e154 sd) is -infinity. Derivatives are finite: an entry
  /// whose chain-rule terms leave the range of double (a sensitivity that overflows, such as
  /// d IPRED / d V at V = 1e-300) is 0, never NaN or infinity.
  ///
  /// The domain: the result is -infinity with zero gradients (never an exception: a sampler
  /// rejects the proposal, an optimizer steps back) when
  /// - a parameter row, with the dataset's parameter cells written in, breaks the model's rules
  ///   (what makes predict() throw DomainError: a rate constant, clearance or volume that is
  ///   negative, zero where it must be > 0, NaN or infinite; both or neither of an alternative
  ///   pair; F or lag out of range);
  /// - a sigma is not finite and > 0 (0, negative, NaN, infinite);
  /// - a prediction of the subject (at any observation record) is not finite: the solution
  ///   overflows, or a steady state does not exist (simulate_dataset()'s NonFinite status);
  /// - there is no density: a proportional model at a prediction of exactly 0, or a prediction
  ///   <= 0 on the log scale.
  /// @param gradient if not null: parameters() values, d loglik / d params
  /// @param sigma_gradient if not null: error.parameter_count() values, d loglik / d sigma
  /// @throws DomainError for a DV <= 0 on the log scale (naming the dataset line), whatever
  ///         the parameters
  /// @throws InvalidArgument as predict(), for a null sigma, or log_scale with a proportional
  ///         or combined model
  double log_likelihood(std::int64_t s, const double* params, const ErrorModel& error,
                        const double* sigma, double* gradient, double* sigma_gradient,
                        Workspace& ws) const;

  /// All subjects at once on `threads` threads (0 = the process default of pkscan/threads.hpp:
  /// OMP_NUM_THREADS, else the CPUs of the affinity mask), params subjects() x parameters()
  /// row-major. Same values as the per-subject calls, for any thread count. When subjects fail,
  /// the exception of the lowest-numbered one is thrown.
  /// @param out observations() values
  void predict_all(const double* params, double* out, int threads = 0) const;

  /// predict_gradient() of every subject, as predict_all(): `jacobian` holds observations() x
  /// parameters() values, row i the derivatives of prediction i with respect to the parameter
  /// row of its own subject.
  void predict_gradient_all(const double* params, double* out, double* jacobian,
                            int threads = 0) const;

  /// Sum over subjects of log_likelihood(); per_subject (if not null) receives subjects()
  /// values, gradient (if not null) subjects() x parameters() values (each subject's gradient
  /// with respect to its own row), sigma_gradient (if not null) the sum over subjects. Sums run
  /// in subject order: the same bits for any thread count. A subject out of the domain
  /// (log_likelihood()) makes the sum -infinity, with zero gradients throughout (gradient and
  /// sigma_gradient: the whole set is rejected; per_subject still holds every subject's value).
  double log_likelihood_all(const double* params, const ErrorModel& error, const double* sigma,
                            double* per_subject, double* gradient, double* sigma_gradient,
                            int threads = 0) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  // predict_all() (and with `jacobian`, predict_gradient_all()) on the device
  // (set_device(Device::Cuda)); call with the device's lock held.
  void predict_on_device(const double* params, double* out, double* jacobian, int threads) const;
};

}  // namespace pkscan
