#include <algorithm>
#include <chrono>
#include <cmath>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>

#include "api/plan.hpp"
#include "api/result_parts.hpp"
#include "api/select_subjects.hpp"
#include "core/parallel.hpp"
#include "core/validate.hpp"
#include "grid/backend.hpp"
#include "grid/schedule.hpp"

namespace pkscan {

// Fills SimulationResult's private members; the only writer of results.
class ResultBuilder {
 public:
  static detail::ResultParts parts(SimulationResult& r) noexcept {
    return {&r.subjects_,   &r.compartments_, &r.precision_, &r.output_times_,
            &r.output_steps_, &r.volumes_,    &r.amounts_f64_, &r.amounts_f32_,
            &r.conc_f64_,   &r.conc_f32_,     &r.status_,    &r.summary_};
  }
  static void make(const Problem& p, const detail::PreparedBatch& b, const SimulateOptions& o,
                   SimulationResult& r, bool amounts = true) {
    r.subjects_ = b.subjects;
    r.compartments_ = b.n;
    r.precision_ = o.precision;
    r.output_steps_ = b.out_steps;
    r.output_times_.clear();
    for (std::int64_t s : b.out_steps) r.output_times_.push_back(p.grid.time(s));
    r.volumes_.resize(static_cast<std::size_t>(b.subjects * b.n));
    // On the call's threads when there are many subjects.
    auto volumes_of = [&](std::int64_t s, int) {
      for (int c = 0; c < b.n; ++c)
        r.volumes_[static_cast<std::size_t>(s * b.n + c)] =
            p.parameters.get(s, b.model->volume_parameter[static_cast<std::size_t>(c)]);
    };
    const int threads = detail::threads_for_work(b.threads, static_cast<double>(b.subjects), 65536);
    if (threads > 1)
      pkscan::parallel_for(b.subjects, threads, volumes_of, 4096);
    else
      for (std::int64_t s = 0; s < b.subjects; ++s) volumes_of(s, 0);
    const std::size_t count =
        static_cast<std::size_t>(b.subjects) * b.out_steps.size() * static_cast<std::size_t>(b.n);
    if (!amounts) {
      r.amounts_f64_.clear();
      r.amounts_f32_.clear();
    } else if (o.precision == Precision::Float64) {
      r.amounts_f64_.resize_uninitialized(count);
      r.amounts_f32_.clear();
    } else {
      r.amounts_f32_.resize_uninitialized(count);
      r.amounts_f64_.clear();
    }
    r.conc_f64_.clear();
    r.conc_f32_.clear();
    r.status_.assign(static_cast<std::size_t>(b.subjects), SubjectStatus::Ok);
    r.summary_ = RunSummary{};
  }

  template <class Real>
  static void divide_by_volumes(const Array<Real>& amounts, Array<Real>& conc,
                                const SimulationResult& r) {
    // Volume division deferred to the end, one pass over the amounts.
    conc.resize_uninitialized(amounts.size());
    const std::int64_t per_subject = r.times() * r.compartments_;
    for (std::int64_t s = 0; s < r.subjects_; ++s) {
      Real v[64];
      for (int c = 0; c < r.compartments_; ++c) v[c] = static_cast<Real>(r.volume(s, c));
      const std::size_t base = static_cast<std::size_t>(s * per_subject);
      for (std::int64_t i = 0; i < per_subject; ++i)
        conc.data()[base + static_cast<std::size_t>(i)] =
            amounts[base + static_cast<std::size_t>(i)] / v[i % r.compartments_];
    }
  }

  // `fused`: the fused summary's three parts' seconds (RunSummary::fused_*), or null.
  static void finish(SimulationResult& r, const SimulateOptions& o, const detail::Backend& be,
                     int threads, double prep, double scan, const double* fused = nullptr) {
    if (o.concentrations) {
      if (o.precision == Precision::Float64)
        divide_by_volumes(r.amounts_f64_, r.conc_f64_, r);
      else
        divide_by_volumes(r.amounts_f32_, r.conc_f32_, r);
    }
    r.summary_.method = be.method();
    r.summary_.device = be.device();
    r.summary_.threads = threads;
    r.summary_.prepare_seconds = prep;
    r.summary_.scan_seconds = scan;
    r.summary_.fused_recurrence_seconds = fused ? fused[0] : 0.0;
    r.summary_.fused_sums_seconds = fused ? fused[1] : 0.0;
    r.summary_.fused_metrics_seconds = fused ? fused[2] : 0.0;
    const detail::Backend::DeviceTimes dt = be.last_device_times();
    r.summary_.device_kernel_seconds = dt.kernel_seconds;
    r.summary_.device_transfer_seconds = dt.transfer_seconds;
    std::int64_t bad = 0;
    for (SubjectStatus st : r.status_) bad += st != SubjectStatus::Ok;
    r.summary_.non_finite_subjects = bad;
  }

  static SubjectStatus* status(SimulationResult& r) { return r.status_.data(); }

  static void select(const SimulationResult& from, const std::int64_t* idx, std::int64_t n,
                     SimulationResult& to) {
    to.subjects_ = n;
    to.compartments_ = from.compartments_;
    to.precision_ = from.precision_;
    to.output_times_ = from.output_times_;
    to.output_steps_ = from.output_steps_;
    to.summary_ = from.summary_;
    const auto per =
        static_cast<std::size_t>(from.times()) * static_cast<std::size_t>(from.compartments_);
    const auto nc = static_cast<std::size_t>(from.compartments_);
    to.volumes_.resize(static_cast<std::size_t>(n) * nc);
    to.status_.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const auto s = static_cast<std::size_t>(idx[i]);
      std::copy_n(from.volumes_.data() + s * nc, nc,
                  to.volumes_.data() + static_cast<std::size_t>(i) * nc);
      to.status_[static_cast<std::size_t>(i)] = from.status_[s];
    }
    auto rows = [&](const auto& a, auto& b) {
      if (a.empty()) {
        b.clear();
        return;
      }
      b.resize_uninitialized(static_cast<std::size_t>(n) * per);
      for (std::int64_t i = 0; i < n; ++i)
        std::copy_n(a.data() + static_cast<std::size_t>(idx[i]) * per, per,
                    b.data() + static_cast<std::size_t>(i) * per);
    };
    rows(from.amounts_f64_, to.amounts_f64_);
    rows(from.amounts_f32_, to.amounts_f32_);
    rows(from.conc_f64_, to.conc_f64_);
    rows(from.conc_f32_, to.conc_f32_);
  }

  static detail::ResultView<double> view64(SimulationResult& r) {
    return {r.amounts_f64_.data(), r.status_.data()};
  }
  static detail::ResultView<float> view32(SimulationResult& r) {
    return {r.amounts_f32_.data(), r.status_.data()};
  }
};

detail::ResultParts detail::result_parts(SimulationResult& r) noexcept {
  return ResultBuilder::parts(r);
}

void detail::select_subjects(const SimulationResult& from, const std::int64_t* idx, std::int64_t n,
                             SimulationResult& to) {
  ResultBuilder::select(from, idx, n, to);
}

namespace {

std::uint64_t bytes_for(const Problem& p, const SimulateOptions& o, std::uint64_t n_out) {
  const std::uint64_t n = p.parameters.info().compartments.size();
  const std::uint64_t subjects =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.parameters.subjects()));
  const std::uint64_t scalar = o.precision == Precision::Float64 ? 8 : 4;
  const std::uint64_t arrays = o.concentrations ? 2 : 1;
  // Saturating multiply: absurd sizes must compare as too large, never wrap around.
  long double total = static_cast<long double>(subjects) * n_out * n * scalar * arrays;
  if (total > 1.8e19L) return UINT64_MAX;
  return static_cast<std::uint64_t>(total);
}

std::uint64_t out_count(const Problem& p) {
  return p.output.all ? static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.grid.steps)) + 1
                      : p.output.steps.size();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Everything of a PreparedBatch but its schedule, for a checked problem.
void fill_batch(const Problem& problem, const SimulateOptions& options,
                detail::PreparedBatch& batch) {
  batch.problem = &problem;
  batch.model = &problem.parameters.info();
  batch.n = static_cast<int>(batch.model->compartments.size());
  batch.subjects = problem.parameters.subjects();
  batch.out_steps = detail::output_steps(problem.output, problem.grid);
  // Threads by the work, steps and values written (docs/performance.md, "Threads"): a small call
  // runs on fewer.
  const double subjects = static_cast<double>(batch.subjects);
  batch.threads =
      detail::threads_for_work(resolve_threads(options.threads),
                               subjects * (static_cast<double>(problem.grid.steps) +
                                           static_cast<double>(batch.out_steps.size()) * batch.n),
                               detail::kGridWorkPerThread);
}

}  // namespace

std::uint64_t result_bytes(const Problem& problem, const SimulateOptions& options) noexcept {
  return bytes_for(problem, options, out_count(problem));
}

namespace detail {

bool fills_the_device(std::int64_t subjects, std::int64_t steps) noexcept {
  return subjects >= 100'000 && static_cast<double>(subjects) * static_cast<double>(steps) >= 1e7;
}

Path resolve_path(const Problem& problem, const SimulateOptions& options, std::int64_t subjects) {
  const std::int64_t steps = problem.grid.steps;
  const std::int64_t n_out = static_cast<std::int64_t>(out_count(problem));
  const bool sparse = n_out > 0 && steps / std::max<std::int64_t>(1, n_out) >= 64;
  const int threads = resolve_threads(options.threads);
  Path path{options.method, options.device};
  if (path.device == Device::Auto) {
    // The GPU where it pays (docs/performance.md, "How auto chooses"): much work, over enough
    // subjects to fill the device (one thread each), whose results stay small. Trajectories that
    // must cross the bus to the host are written faster by the CPU (dense output on the GPU is
    // slower than the CPU: docs/performance.md, "How auto chooses").
    const bool big = detail::fills_the_device(subjects, steps);
    const bool small_output = n_out * 16 <= steps;
    const Method m =
        path.method == Method::Auto ? (sparse ? Method::Power : Method::Batched) : path.method;
    path.device = big && small_output && m != Method::Scan && is_backend_available(m, Device::Cuda)
                      ? Device::Cuda
                      : Device::Cpu;
  }
  if (path.method == Method::Auto) {
    if (sparse)
      path.method = Method::Power;
    else if (subjects >= 4)
      path.method = Method::Batched;
    else if (steps >= 16384 && threads > 1)
      path.method = Method::Power;
    else
      path.method = path.device == Device::Cuda ? Method::Batched : Method::Scan;
  }
  return path;
}

Path summary_path(const Problem& problem, const SimulateOptions& options, std::int64_t subjects,
                  std::int64_t rows) {
  const Path path = resolve_path(problem, options, rows);
  if (options.device != Device::Auto || path.device == Device::Cuda ||
      path.method == Method::Scan || !fills_the_device(subjects, problem.grid.steps) ||
      static_cast<double>(subjects) * static_cast<double>(problem.grid.steps) <
          kDeviceSummaryWork ||
      !is_backend_available(path.method, Device::Cuda))
    return path;
  return {path.method, Device::Cuda};
}

Path summary_path(const Problem& problem, const SimulateOptions& options, std::int64_t subjects) {
  return summary_path(problem, options, subjects, problem.parameters.subjects());
}

}  // namespace detail

Path resolve_path(const Problem& problem, const SimulateOptions& options) {
  return detail::resolve_path(problem, options, problem.parameters.subjects());
}

std::uint64_t result_byte_limit(const SimulateOptions& options) noexcept {
  return detail::result_limit(options);
}

void check(const Problem& problem, const SimulateOptions& options) {
  detail::validate_problem(problem, true, options.threads);
  if (options.threads < 0)
    detail::throw_invalid("simulate", "options.threads", std::to_string(options.threads),
                          ">= 0 (0 = all hardware threads)");
  const std::uint64_t need = result_bytes(problem, options);
  // The memory available is read from /proc/meminfo, which costs more than a small simulation
  // itself (fitting code calls it millions of times; docs/performance.md, "Thresholds"). A
  // result below kUncheckedResultBytes is checked only against max_result_bytes when that is set.
  const bool measure = options.max_result_bytes > 0 || need > detail::kUncheckedResultBytes;
  const std::uint64_t limit = measure ? detail::result_limit(options) : need;
  if (need > limit) {
    auto gib = [](std::uint64_t b) {
      return format_value(static_cast<double>(b) / (1024.0 * 1024 * 1024));
    };
    detail::throw_domain("simulate", "the result size", gib(need) + " GiB",
                         "<= " + gib(limit) +
                             " GiB (the memory available); use fewer subjects, "
                             "fewer steps or sparse output times");
  }
  std::string why;
  if (!is_backend_available(options.method, options.device, &why)) throw BackendUnavailable(why);
}

struct Engine::Impl {
  // Cached schedule and the inputs it was compiled from.
  std::vector<DoseEvent> doses;
  TimeGrid grid{0.0, -1};
  int n = -1;
  std::unique_ptr<detail::Schedule> schedule;
  // Backends by (method, device), created on first use.
  std::unique_ptr<detail::Backend> backends[4][3];

  const detail::Schedule& schedule_for(const Problem& p, int compartments) {
    auto same_dose = [](const DoseEvent& a, const DoseEvent& b) {
      return a.compartment == b.compartment && a.time == b.time && a.amount == b.amount &&
             a.rate == b.rate && a.duration == b.duration && a.every == b.every &&
             a.repeat == b.repeat;
    };
    const bool hit = schedule && n == compartments && grid.dt == p.grid.dt &&
                     grid.steps == p.grid.steps && doses.size() == p.doses.size() &&
                     std::equal(doses.begin(), doses.end(), p.doses.begin(), same_dose);
    if (!hit) {
      schedule = std::make_unique<detail::Schedule>(
          detail::compile_schedule(p.doses, p.grid, compartments));
      doses = p.doses;
      grid = p.grid;
      n = compartments;
    }
    return *schedule;
  }

  detail::Backend& backend(Method m, Device d) {
    auto& slot = backends[static_cast<int>(m)][static_cast<int>(d)];
    if (!slot) slot = detail::make_backend(m, d);
    return *slot;
  }
};

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

SimulationResult Engine::simulate(const Problem& problem, const SimulateOptions& options) {
  SimulationResult r;
  simulate_into(problem, options, r);
  return r;
}

SimulationResult simulate(const Problem& problem, const SimulateOptions& options) {
  Engine engine;
  return engine.simulate(problem, options);
}

void simulate_into(const Problem& problem, const SimulateOptions& options, SimulationResult& r) {
  Engine engine;
  engine.simulate_into(problem, options, r);
}

void Engine::simulate_into(const Problem& problem, const SimulateOptions& options,
                           SimulationResult& r) {
  check(problem, options);
  const auto t0 = std::chrono::steady_clock::now();
  const ModelInfo& model = problem.parameters.info();
  const int n = static_cast<int>(model.compartments.size());
  detail::PreparedBatch batch(impl_->schedule_for(problem, n));
  fill_batch(problem, options, batch);

  const Path path = resolve_path(problem, options);
  detail::Backend* backend = &impl_->backend(path.method, path.device);
  if (const std::string why = backend->unsupported_reason(batch); !why.empty()) {
    if (options.method != Method::Auto) throw BackendUnavailable(why);
    backend = &impl_->backend(Method::Scan, Device::Cpu);  // partial backend: fall back
  }
  ResultBuilder::make(problem, batch, options, r);
  const double prep = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  if (options.precision == Precision::Float64)
    backend->run(batch, ResultBuilder::view64(r));
  else
    backend->run(batch, ResultBuilder::view32(r));
  const double scan = seconds_since(t1);
  const int used =
      backend->method() == Method::Scan || backend->device() == Device::Cuda ? 1 : batch.threads;
  ResultBuilder::finish(r, options, *backend, used, prep, scan);
}

bool Engine::summarize_into(const Problem& problem, const SimulateOptions& options,
                            TimeSummary& summary, int metric_compartment, double last_dose_time,
                            double* metrics, SimulationResult& r) {
  check(problem, options);
  // Concentrations asked for: the trajectories must be stored; a pass of the summary's exact
  // percentiles reads stored trajectories.
  if (!options.concentrations && !summary.in_pass()) {
    const auto t0 = std::chrono::steady_clock::now();
    const int n = static_cast<int>(problem.parameters.info().compartments.size());
    detail::PreparedBatch batch(impl_->schedule_for(problem, n));
    fill_batch(problem, options, batch);
    // The device summary where it pays under device auto, else the path simulate() takes;
    // either summarises only where its backend can (the device summary and the CPU's fused path
    // give the same bits).
    auto summarizer = [&](const Path& path) -> detail::Backend* {
      detail::Backend& backend = impl_->backend(path.method, path.device);
      return backend.unsupported_reason(batch).empty() && backend.can_summarize(batch, summary)
                 ? &backend
                 : nullptr;
    };
    const Path path = detail::summary_path(problem, options, problem.parameters.subjects());
    detail::Backend* backend = summarizer(path);
    if (backend == nullptr && options.device == Device::Auto && path.device == Device::Cuda)
      backend = summarizer(resolve_path(problem, options));
    if (backend != nullptr) {
      ResultBuilder::make(problem, batch, options, r, false);
      const double prep = seconds_since(t0);
      const auto t1 = std::chrono::steady_clock::now();
      double parts[3] = {};
      backend->summarize(batch, {&summary, options.precision, metric_compartment, last_dose_time,
                                 metrics, ResultBuilder::status(r), parts});
      const double scan = seconds_since(t1);
      ResultBuilder::finish(r, options, *backend, batch.threads, prep, scan, parts);
      return true;
    }
  }
  simulate_into(problem, options, r);
  summary.add(r, metric_compartment, last_dose_time, metrics);
  return false;
}

}  // namespace pkscan
