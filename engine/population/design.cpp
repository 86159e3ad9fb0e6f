// Design simulations (design.hpp): a dataset's records with parameters drawn per replicate.
//
// On the CPU, the event solver runs the design's dataset itself: each dataset subject's event
// plan is made once (the events do not depend on the parameters) and each replicate writes the
// drawn parameters as its parameter rows (design_parts.hpp, set_rows). A subject whose records
// all carry the same values gets one parameter row, so constant covariates cost what a dataset
// run costs. The device runs a copy of the dataset with a parameter column per drawn parameter.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <pkscan/design.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/threads.hpp>
#include <pkscan/vpc.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.hpp"
#include "events/plan.hpp"
#include "events/solver.hpp"
#include "population/design_parts.hpp"
#include "population/exchange.hpp"
#include "population/residual.hpp"

namespace pkscan {

using detail::check_prepared;
using detail::Design;
using detail::design_setup;
using detail::drawn_values;
using detail::Plans;
using detail::prepare;
using detail::set_rows;
using detail::typical_batch;
using detail::write_values;

std::int64_t design_rows(const DesignRun& run) noexcept {
  if (!run.data) return 0;
  if (run.count <= 0 || run.data->subjects.empty()) return run.data->observation_count();
  const long double mean = static_cast<long double>(run.data->observation_count()) /
                           static_cast<long double>(run.data->subjects.size());
  return static_cast<std::int64_t>(std::llround(mean * static_cast<long double>(run.count)));
}

DesignLayout design_layout(const DesignRun& run) {
  DesignLayout l;
  l.model = run.population.model;
  l.data = run.data;
  l.replicates = run.replicates;
  l.observations = run.residual.has_value();
  l.blq = run.residual.has_value() && (!std::isnan(run.lloq) || !run.lloq_column.empty());
  if (run.parameter_table && l.model) {
    for (std::size_t c = 0; c < l.model->parameters.size(); ++c)
      if (!std::isnan(run.population.typical[c])) l.parameter_table.push_back(static_cast<int>(c));
    for (int c : run.population.iiv)
      l.eta_columns.push_back("eta_" + l.model->parameters[static_cast<std::size_t>(c)].name);
    for (int c : run.population.iov)
      l.iov_columns.push_back("iov_" + l.model->parameters[static_cast<std::size_t>(c)].name);
    l.occasions = !run.population.iov.empty();
  }
  l.resampled = run.count > 0;
  return l;
}

void check_design_run(const DesignRun& run) {
  Design d = prepare(run);
  const detail::DatasetSetup setup = design_setup(d, run.options);
  check_prepared(d, run, &setup, nullptr);
}

std::vector<double> design_population_predictions(const DesignRun& run) {
  Design d = prepare(run);
  check_prepared(d, run, nullptr, nullptr);  // fills the copy at eta = 0 and kappa = 0
  DatasetResult result;
  simulate_dataset_into(d.data, typical_batch(d, static_cast<std::int64_t>(d.data.subjects.size())),
                        run.options, result);
  return std::move(result.prediction);
}

namespace {

// run_design's replicates, those of this rank when split over processes (`ex`: replicate r is
// rank r mod size's; rank 0 writes every replicate, the others send theirs to it).
RunSummary run_replicates(const DesignRun& run, DesignSink& sink, const DesignProgressFn& progress,
                          RunExchange* ex) {
  const auto t_start = std::chrono::steady_clock::now();
  Design d = prepare(run);
  const bool on_device = run.options.device == Device::Cuda;
  // On the CPU, the solver runs the dataset itself: each subject's plan (kept across
  // replicates where it fits) gets the drawn values as its rows. The device runs the copy with
  // the drawn values written in.
  const detail::DatasetSetup setup = design_setup(d, run.options);
  Plans plans;
  check_prepared(d, run, on_device ? nullptr : &setup, &plans);
  const DesignLayout layout = design_layout(run);
  const PopulationSampler& smp = *d.sampler;
  const std::int64_t n = static_cast<std::int64_t>(d.src->subjects.size());
  const bool resampled = run.count > 0;
  const std::int64_t subjects = resampled ? run.count : n;  // per replicate
  const int m = smp.etas();
  const int np = smp.parameters();
  const int nk = smp.kappas();
  // A replicate's parallel regions wake only the threads its work needs: a small design runs on
  // one thread (waking a pool for a few microseconds of work, many times per replicate, costs
  // more than it saves, and much more on a busy machine).
  const double records = static_cast<double>(d.record0.back()) * static_cast<double>(subjects) /
                         static_cast<double>(n);
  const int threads = detail::threads_for_work(resolve_threads(run.options.threads), records,
                                               detail::kRecordsPerThread);
  SimulateOptions sim_options = run.options;
  sim_options.threads = threads;
  const ParameterBatch batch = typical_batch(d, 1);  // every subject's row: the typical values
  const double* typical = batch.row(0);
  std::vector<double> etas(static_cast<std::size_t>(subjects * m));
  // The device's dataset: the copy, or with count the virtual subjects (each replicate copies
  // its sources' records in).
  Dataset virtual_data;
  if (resampled && on_device) {
    virtual_data.file = d.data.file;
    virtual_data.columns = d.data.columns;
    virtual_data.parameter_columns = d.data.parameter_columns;
    virtual_data.covariate_columns = d.data.covariate_columns;
    virtual_data.subjects.resize(static_cast<std::size_t>(subjects));
  }
  Dataset& sim = resampled ? virtual_data : d.data;
  // Per subject of a replicate: its source, its first observation row and first table row.
  std::vector<std::int64_t> source(static_cast<std::size_t>(subjects));
  std::vector<std::int64_t> obs0 = d.obs0, table0 = d.table0;
  std::vector<std::int64_t> table_subject = d.table_subject;
  std::vector<double> table_occasion = d.table_occasion;
  for (std::int64_t s = 0; s < subjects; ++s) source[static_cast<std::size_t>(s)] = s;
  std::vector<double> dv;
  std::vector<std::int8_t> blq;
  std::vector<double> tparams, tetas, tkappas;
  const std::size_t nd = d.drawn.size();
  DatasetResult result;
  RunSummary total;
  const Method method = run.options.method == Method::Auto ? Method::Batched : run.options.method;
  const int solver_threads =
      method == Method::Scan
          ? 1
          : static_cast<int>(std::min<std::int64_t>(threads, std::max<std::int64_t>(1, subjects)));
  // Per subject, on one thread: its records' parameters, its table rows, and on the CPU its
  // events solved and its residual errors drawn. One per thread, kept across replicates.
  struct Worker {
    std::vector<double> kappa, row, z, vals;
    detail::SubjectPlan plan;
    std::vector<detail::EventTemplate> events;  // build_plan's scratch
    std::unique_ptr<detail::EventSolver> solver;
  };
  std::vector<Worker> workers(static_cast<std::size_t>(std::max(threads, solver_threads)));
  for (Worker& w : workers) {
    w.kappa.resize(static_cast<std::size_t>(nk) + 1);
    w.row.resize(static_cast<std::size_t>(np));
  }
  total.prepare_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const int size = ex ? ex->size() : 1;
  const int rank = ex ? ex->rank() : 0;
  detail::DesignUnit unit;  // rank 0: a replicate of another rank
  std::vector<char> message;
  // The rows' index columns (subject, record, time, compartment) are the same in every replicate
  // of the dataset's own subjects: written by the first this process simulates.
  bool indexed = false;
  for (std::int64_t rep = 0; rep < run.replicates; ++rep) {
    const int owner = static_cast<int>(rep % size);
    if (owner != rank) {
      if (rank != 0) continue;
      ex->receive(owner, message);
      if (detail::unpack_design_unit(message, owner, np, m, nk, unit) != rep)
        throw Error("rank " + std::to_string(owner) + " sent another replicate than " +
                    std::to_string(rep + 1));
      total.method = unit.result.summary.method;
      total.device = unit.result.summary.device;
      total.threads = unit.result.summary.threads;
      total.non_finite_subjects += unit.result.summary.non_finite_subjects;
      if (unit.formatted)
        sink.write_formatted(rep, unit.rows, unit.bytes);
      else
        sink.write(unit.chunk);
      if (progress) progress(rep + 1, run.replicates);
      continue;
    }
    if (ex) ex->before_unit(rep);
    const auto t0 = std::chrono::steady_clock::now();
    if (resampled) {
      obs0.assign(1, 0);
      table0.assign(1, 0);
      table_subject.clear();
      table_occasion.clear();
      for (std::int64_t j = 0; j < subjects; ++j) {
        const std::int64_t src = resampled_subject(smp.spec().seed, rep, j, n);
        const std::size_t us = static_cast<std::size_t>(src);
        source[static_cast<std::size_t>(j)] = src;
        obs0.push_back(obs0.back() + d.obs0[us + 1] - d.obs0[us]);
        table0.push_back(table0.back() + d.table0[us + 1] - d.table0[us]);
        for (std::int64_t t = d.table0[us]; t < d.table0[us + 1]; ++t) {
          table_subject.push_back(j);
          if (d.iov) table_occasion.push_back(d.table_occasion[static_cast<std::size_t>(t)]);
        }
      }
    }
    const std::int64_t obs = obs0.back();
    const std::int64_t trows = table0.back();
    if (layout.observations) dv.resize(static_cast<std::size_t>(obs));
    if (layout.blq) blq.resize(static_cast<std::size_t>(obs));
    if (run.parameter_table) {
      tparams.resize(static_cast<std::size_t>(trows * np));
      tetas.resize(static_cast<std::size_t>(trows * m));
      tkappas.resize(static_cast<std::size_t>(trows * nk));
    }
    if (!on_device) {
      // The rows of every subject (simulate_dataset_into's), filled by the subjects themselves.
      const std::size_t rows = static_cast<std::size_t>(obs);
      const std::size_t nc = d.model->compartments.size();
      result.compartments = static_cast<int>(nc);
      result.subject.resize(rows);
      result.record.resize(rows);
      result.time.resize(rows);
      result.compartment.resize(rows);
      result.amounts.resize(rows * nc);
      result.concentrations.resize(rows * nc);
      result.prediction.resize(rows);
      result.status.assign(static_cast<std::size_t>(subjects), SubjectStatus::Ok);
    }
    const auto residuals = [&](std::int64_t s, std::vector<double>& z) {
      const ResidualError& e = *run.residual;
      const std::size_t us = static_cast<std::size_t>(s);
      const std::int64_t a = obs0[us];
      const std::int64_t k = obs0[us + 1] - a;
      const std::int64_t a_src = d.obs0[static_cast<std::size_t>(source[us])];
      z.resize(static_cast<std::size_t>(2 * k));
      residual_normals(smp.spec().seed, rep, s, 2 * k, z.data());
      for (std::int64_t i = 0; i < k; ++i) {
        const std::size_t at = static_cast<std::size_t>(a + i);
        const double y =
            detail::observation(e, result.prediction[at], z[static_cast<std::size_t>(2 * i)],
                                z[static_cast<std::size_t>(2 * i + 1)]);
        dv[at] = y;
        if (layout.blq)
          blq[at] =
              y < (d.lloq.empty() ? run.lloq : d.lloq[static_cast<std::size_t>(a_src + i)]) ? 1 : 0;
      }
    };
    const bool index_columns = resampled || !indexed;
    const auto subject = [&](std::int64_t s, Worker* wp) {
      Worker& w = *wp;
      const std::size_t us = static_cast<std::size_t>(s);
      const std::int64_t src = source[us];
      const std::size_t usrc = static_cast<std::size_t>(src);
      double* eta = etas.data() + s * m;
      smp.subject_etas(rep, s, eta);
      const bool uniform = drawn_values(d, src, s, rep, eta, w.kappa, w.row, w.vals);
      if (run.parameter_table) {
        for (std::int64_t t = d.table0[usrc]; t < d.table0[usrc + 1]; ++t) {
          const std::size_t ut = static_cast<std::size_t>(t);
          const std::int64_t to = table0[us] + (t - d.table0[usrc]);  // the replicate's row
          const std::size_t rec = static_cast<std::size_t>(d.table_record[ut]);
          const DatasetRecord& r = d.src->subjects[usrc].records[rec];
          // The record's full row: the typical values, its dataset cells, then the drawn ones.
          double* out = tparams.data() + to * np;
          std::copy(typical, typical + np, out);
          for (std::size_t c = 0; c < d.column_of.size(); ++c)
            if (d.column_of[c] >= 0 && !std::isnan(r.parameters[c]))
              out[d.column_of[c]] = r.parameters[c];
          for (std::size_t k = 0; k < nd; ++k)
            if (!std::isnan(w.vals[rec * nd + k])) out[d.drawn[k]] = w.vals[rec * nd + k];
          std::copy(eta, eta + m, tetas.data() + to * m);
          if (d.iov)
            smp.occasion(rep, s, static_cast<std::int64_t>(d.table_occasion[ut]),
                         tkappas.data() + to * nk);
        }
      }
      if (on_device) {
        DatasetSubject& subj = sim.subjects[us];
        if (resampled) {
          subj.id = d.data.subjects[usrc].id;
          subj.records = d.data.subjects[usrc].records;
        }
        write_values(d, w.vals, subj);
        return;
      }
      // The source's plan, its rows this subject's: in place, or a copy where the source may
      // be simulated by another thread at once (resampled).
      detail::SubjectPlan* plan = &w.plan;
      if (plans.plan.empty())
        setup.build_plan(src, w.plan, &w.events);
      else if (resampled)
        w.plan = plans.plan[usrc];
      else
        plan = &plans.plan[usrc];
      set_rows(d, src, w.vals.data(), uniform, *plan);
      const bool finite =
          w.solver->simulate_rows(*plan, src, typical, result, obs0[us], index_columns);
      if (src != s) std::fill_n(result.subject.begin() + obs0[us], obs0[us + 1] - obs0[us], s);
      result.status[us] = finite ? SubjectStatus::Ok : SubjectStatus::NonFinite;
      if (run.residual) residuals(s, w.z);
    };
    try {
      detail::parallel_for(
          subjects, on_device ? threads : solver_threads, 16,
          [&] {
            Worker& w = workers[static_cast<std::size_t>(detail::thread_index())];
            if (!on_device && !w.solver) w.solver = detail::make_event_solver(setup);
            return &w;
          },
          subject);
      if (on_device) simulate_dataset_into(sim, typical_batch(d, subjects), sim_options, result);
    } catch (const DomainError& e) {
      throw DomainError(std::string(e.what()) + " (replicate " + std::to_string(rep + 1) + ")",
                        e.field(), e.value(), e.rule());
    }
    if (on_device) {
      if (run.residual)
        detail::parallel_for(
            subjects, threads, 64, [] { return std::vector<double>(); }, residuals);
      total.prepare_seconds += result.summary.prepare_seconds;
      total.scan_seconds += result.summary.scan_seconds;
      total.threads = result.summary.threads;
    } else {
      indexed = true;
      total.scan_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      total.threads = solver_threads;
      result.summary = RunSummary{};
      result.summary.method = method;
      result.summary.device = Device::Cpu;
      result.summary.threads = solver_threads;
      for (SubjectStatus st : result.status)
        result.summary.non_finite_subjects += st != SubjectStatus::Ok;
    }
    total.method = result.summary.method;
    total.device = on_device ? Device::Cuda : Device::Cpu;
    total.non_finite_subjects += result.summary.non_finite_subjects;
    DesignChunk c;
    c.replicate = rep;
    c.result = &result;
    if (layout.observations) c.dv = dv.data();
    if (layout.blq) c.blq = blq.data();
    if (resampled) c.source = source.data();
    if (run.parameter_table) {
      c.table_rows = trows;
      c.table_subject = table_subject.data();
      c.table_occasion = d.iov ? table_occasion.data() : nullptr;
      c.table_parameters = tparams.data();
      c.table_etas = tetas.data();
      c.table_kappas = tkappas.data();
    }
    if (rank != 0) {
      // Rows formatted here when the sink can (CSV): rank 0 then only appends them.
      const bool formatted = sink.format(c, unit.bytes);
      detail::pack_design_unit(c, np, m, nk, formatted ? &unit.bytes : nullptr, message);
      ex->send(message);
      continue;
    }
    sink.write(c);
    if (progress) progress(rep + 1, run.replicates);
  }
  return total;
}

}  // namespace

void DesignSink::write_formatted(std::int64_t /*replicate*/, std::int64_t /*rows*/,
                                 const std::vector<char>& /*bytes*/) {
  throw InvalidArgument(
      "DesignSink::write_formatted: this sink does not take formatted replicates");
}

RunSummary run_design(const DesignRun& run, DesignSink& sink, const DesignProgressFn& progress,
                      RunExchange* exchange) {
  RunExchange* const ex = exchange && exchange->size() > 1 ? exchange : nullptr;
  if (!ex) {
    const RunSummary total = run_replicates(run, sink, progress, nullptr);
    sink.commit();
    return total;
  }
  return detail::run_split(
      *ex,
      [&] {
        return run_replicates(run, sink, ex->rank() == 0 ? progress : DesignProgressFn{}, ex);
      },
      [&] { sink.commit(); });
}

}  // namespace pkscan
