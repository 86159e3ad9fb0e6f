// Exact simulation of per-subject event lists (datasets): simulate_dataset().
//
// Numeric contract: the event solver of the Predictor (solver.hpp, which states the arithmetic),
// run without sensitivities, so simulate_dataset()'s `prediction` and Predictor::predict() are
// the same numbers by construction. Every CPU method calls the same per-subject function, so
// results are identical for any method and thread count.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/error.hpp>
#include <pkscan/events.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "device/device.hpp"
#include "events/plan.hpp"
#include "events/solver.hpp"

namespace pkscan {

namespace {

// The setup of a call, after the checks that need no subject.
detail::DatasetSetup make_setup(const Dataset& data, const ParameterBatch& parameters,
                                const SimulateOptions& options) {
  const ModelInfo& m = parameters.info();
  const std::int64_t subjects = static_cast<std::int64_t>(data.subjects.size());
  if (parameters.subjects() != subjects)
    throw InvalidArgument("simulate_dataset: the parameter batch has " +
                          std::to_string(parameters.subjects()) + " subjects, but must have " +
                          std::to_string(subjects) + " (one per dataset subject)");
  std::string why;
  if (options.device == Device::Cuda && !is_backend_available(options.method, Device::Cuda, &why))
    throw BackendUnavailable("simulate_dataset: " + why);
  // The batch outlives the call: share its model without ownership.
  detail::DatasetSetup setup(data, std::shared_ptr<const ModelInfo>(std::shared_ptr<void>(), &m),
                             "simulate_dataset", false);
  setup.set_memory_limit(options);
  return setup;
}

}  // namespace

void check_dataset(const Dataset& data, const ParameterBatch& parameters,
                   const SimulateOptions& options) {
  const detail::DatasetSetup setup = make_setup(data, parameters, options);
  // Subjects are checked in parallel (on one thread for a small dataset); the error of the
  // first failing subject is thrown.
  struct Scratch {
    detail::SubjectPlan plan;
    std::vector<double> rows;
  };
  const std::int64_t subjects = static_cast<std::int64_t>(data.subjects.size());
  detail::parallel_for(
      subjects, subjects > 1000 ? resolve_threads(options.threads) : 1, 256,
      [] { return Scratch{}; },
      [&](std::int64_t s, Scratch& scratch) {
        setup.plan_records(s, scratch.plan);  // the events add no check
        setup.fill_rows(scratch.plan, s, parameters.row(s), scratch.rows);
      });
}

DatasetResult simulate_dataset(const Dataset& data, const ParameterBatch& parameters,
                               const SimulateOptions& options) {
  DatasetResult res;
  simulate_dataset_into(data, parameters, options, res);
  return res;
}

void simulate_dataset_into(const Dataset& data, const ParameterBatch& parameters,
                           const SimulateOptions& options, DatasetResult& res) {
  const auto t0 = std::chrono::steady_clock::now();
  const detail::DatasetSetup setup = make_setup(data, parameters, options);
  const int n = setup.n;
  const std::int64_t subjects = static_cast<std::int64_t>(data.subjects.size());
  res.compartments = n;
  res.summary = RunSummary{};
  // Rows: one per observation record; each subject's first row, then the subjects fill their
  // own rows in parallel.
  std::vector<std::int64_t> first_row(static_cast<std::size_t>(subjects));
  std::int64_t rows_total = 0;
  for (std::int64_t s = 0; s < subjects; ++s) {
    first_row[static_cast<std::size_t>(s)] = rows_total;
    for (const DatasetRecord& r : data.subjects[static_cast<std::size_t>(s)].records)
      rows_total += r.evid == 0;
  }
  const std::size_t rows = static_cast<std::size_t>(rows_total);
  res.subject.resize(rows);
  res.record.resize(rows);
  res.time.resize(rows);
  res.compartment.resize(rows);
  res.amounts.resize(rows * static_cast<std::size_t>(n));  // every row is written once
  res.concentrations.resize(rows * static_cast<std::size_t>(n));
  res.prediction.resize(rows);
  res.status.assign(static_cast<std::size_t>(subjects), SubjectStatus::Ok);
  const Method method = options.method == Method::Auto ? Method::Batched : options.method;
  const bool on_device = options.device == Device::Cuda;
  // The threads that run (parallel_for's team: no more than the subjects).
  const int threads =
      method == Method::Scan && !on_device
          ? 1
          : static_cast<int>(std::min<std::int64_t>(resolve_threads(options.threads),
                                                    std::max<std::int64_t>(1, subjects)));
  const auto t1 = std::chrono::steady_clock::now();
  if (on_device) {
    detail::simulate_dataset_on_device(setup, parameters, first_row, threads, res);
  } else {
    // One solver and one plan per thread, reused across its subjects.
    struct Worker {
      detail::SubjectPlan plan;
      std::unique_ptr<detail::EventSolver> solver;
    };
    detail::parallel_for(
        subjects, threads, 16,
        [&] {
          return Worker{{}, detail::make_event_solver(setup)};
        },
        [&](std::int64_t s, Worker& w) {
          setup.build_plan(s, w.plan);
          const bool finite = w.solver->simulate_rows(w.plan, s, parameters.row(s), res,
                                                      first_row[static_cast<std::size_t>(s)]);
          res.status[static_cast<std::size_t>(s)] =
              finite ? SubjectStatus::Ok : SubjectStatus::NonFinite;
        });
  }
  const auto t2 = std::chrono::steady_clock::now();
  res.summary.method = method;
  res.summary.device = on_device ? Device::Cuda : Device::Cpu;
  res.summary.threads = threads;
  res.summary.prepare_seconds = std::chrono::duration<double>(t1 - t0).count();
  res.summary.scan_seconds = std::chrono::duration<double>(t2 - t1).count();
  for (SubjectStatus st : res.status) res.summary.non_finite_subjects += st != SubjectStatus::Ok;
}

}  // namespace pkscan
