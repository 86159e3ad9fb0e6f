// Exact simulation of per-subject event lists (datasets).
//
// Numeric contract: between consecutive events the state moves by x <- K(d) x + G(d) r with
// K(d) = expm(A d), G(d) = integral_0^d expm(A u) du and r the summed rates of the running
// infusions. K and G come from an eigendecomposition of A, computed once per parameter set, when
// A has real eigenvalues and a well-conditioned eigenvector matrix (cond < 1e4: errors stay within
// a few hundred ulps); otherwise from the exponential of [[A, I], [0, 0]] d (Eigen,
// scaling and squaring). float64 throughout. Every CPU method calls the same per-subject
// function, so results are identical for any method and thread count. The propagator, the event
// order and the steady state are shared with the Predictor (detail/event_list.hpp).
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/events.hpp>
#include <queue>
#include <string>

#include "detail/event_list.hpp"
#include "detail/parallel.hpp"
#include "detail/transition.hpp"

namespace pkscan {

namespace {

using detail::Mat;
using detail::Vec;

using detail::before;
using detail::Event;
using detail::kBoundary;
using detail::kDose;
using detail::kObserve;
using detail::kReset;
using detail::kSteady;
using detail::kStop;
using detail::Propagator;
using detail::Running;

struct SubjectContext {
  const Dataset* data;
  const ModelInfo* model;
  ModelKind kind;
  const ParameterBatch* params;
  std::vector<int> column_of;  // dataset parameter column -> model parameter column
};

[[noreturn]] void fail_record(const SubjectContext& c, std::int64_t s, const DatasetRecord& r,
                              const std::string& msg) {
  throw DomainError("simulate_dataset: " + c.data->file + ":" + std::to_string(r.line) + ": ID \"" +
                    c.data->subjects[static_cast<std::size_t>(s)].id + "\" (subject " +
                    std::to_string(s + 1) + "): " + msg);
}

// Effective parameters of every record of subject s (subject values overridden by dataset cells).
// Effective parameters of the records of subject s: `rows` holds each new parameter row once
// (a record whose values equal the previous record's shares its row), `row_of[j]` the row of
// record j. Buffers are reused across subjects; a row is validated once.
void record_parameters(const SubjectContext& c, std::int64_t s, bool validate,
                       std::vector<double>& rows, std::vector<int>& row_of) {
  const auto& recs = c.data->subjects[static_cast<std::size_t>(s)].records;
  const std::size_t unp = static_cast<std::size_t>(c.params->parameters());
  rows.clear();
  row_of.assign(recs.size(), 0);
  std::vector<double>& out = rows;
  for (std::size_t j = 0; j < recs.size(); ++j) {
    if (j > 0 && c.column_of.empty()) continue;  // every record has the subject's values
    const std::size_t at = out.size();
    out.resize(at + unp);
    double* p = out.data() + at;
    std::memcpy(p, c.params->row(s), sizeof(double) * unp);
    for (std::size_t col = 0; col < c.column_of.size(); ++col) {
      const double v = recs[j].parameters[col];
      if (!std::isnan(v)) p[c.column_of[col]] = v;
    }
    const int row = static_cast<int>(at / unp);
    if (row > 0 && std::memcmp(p, p - unp, sizeof(double) * unp) == 0) {
      out.resize(at);  // same as the previous row
      row_of[j] = row - 1;
      continue;
    }
    row_of[j] = row;
    if (validate) {
      const std::string msg = check_parameters(*c.model, p);
      if (!msg.empty()) fail_record(c, s, recs[j], msg);
    }
  }
}

template <int N>
struct Solver {
  const SubjectContext& c;
  std::int64_t s = 0;
  const std::vector<DatasetRecord>* recs_ = nullptr;
  // Buffers reused across the subjects a thread simulates (no allocation once warm).
  std::vector<double> params;  // distinct parameter rows
  std::vector<int> row_of;     // per record: its row in `params`
  std::vector<Event> ev;
  std::vector<Running> running;
  std::vector<std::pair<double, double>> steady_runs;  // implied infusions of a steady state
  int np;
  Propagator<N> prop;
  int prop_row = -1;       // parameter row `prop` was built from
  std::size_t cursor = 0;  // first record at or after the current interval end

  explicit Solver(const SubjectContext& ctx) : c(ctx), np(ctx.params->parameters()) {}

  void start(std::int64_t subject) {
    s = subject;
    recs_ = &c.data->subjects[static_cast<std::size_t>(subject)].records;
    record_parameters(c, subject, false, params, row_of);
    prop_row = -1;
    cursor = 0;
    ev.clear();
    running.clear();
  }
  const std::vector<DatasetRecord>& recs() const { return *recs_; }

  const double* p(std::int64_t j) const {
    return params.data() + static_cast<std::size_t>(row_of[static_cast<std::size_t>(j)]) *
                               static_cast<std::size_t>(np);
  }

  // The propagator for the parameters of record j (re-decomposed only when its row changes).
  Propagator<N>& use(std::int64_t j) {
    const int row = row_of[static_cast<std::size_t>(j)];
    if (row == prop_row) return prop;
    Mat<N> a;
    rate_matrix(*c.model, p(j), a.data());
    prop.reset(a);
    prop_row = row;
    return prop;
  }

  // The record whose parameters govern the interval ending at t: the first at or after t.
  // Interval ends only increase within a subject, so a cursor replaces a search.
  std::int64_t governing(double t) {
    const std::vector<DatasetRecord>& rs = *recs_;
    while (cursor < rs.size() && rs[cursor].time < t) ++cursor;
    if (cursor == rs.size()) return static_cast<std::int64_t>(rs.size()) - 1;
    return static_cast<std::int64_t>(cursor);
  }

  // Simulates the subject; writes rows (N amounts each) for its observations into out.
  bool run(DatasetResult* out, std::int64_t first_row) {
    const std::vector<DatasetRecord>& recs = *recs_;
    std::int64_t next_id = 0;
    std::int64_t row = first_row;
    double last_obs = -std::numeric_limits<double>::infinity();
    const ModelInfo& m = *c.model;
    for (std::size_t j = 0; j < recs.size(); ++j) {
      const DatasetRecord& r = recs[j];
      const std::int64_t seq = static_cast<std::int64_t>(j);
      // Every record time bounds an interval (its parameters govern the interval ending there);
      // observations, doses and resets are events already, other records need a marker.
      if (r.evid == 2) ev.push_back({r.time, 2, seq, 0, kBoundary});
      if (r.evid == 0) {
        Event o{r.time, 2, seq, 3, kObserve};
        o.row = row++;
        ev.push_back(o);
        last_obs = r.time;
        continue;
      }
      if (r.evid == 3 || r.evid == 4) ev.push_back({r.time, 2, seq, 1, kReset});
      if (!r.is_dose()) continue;
      const int cmt = r.cmt > 0 ? r.cmt - 1 : m.default_dose_compartment;
      const double* pj = p(static_cast<std::int64_t>(j));
      const double f = pj[m.f_parameter[static_cast<std::size_t>(cmt)]];
      const double lag = pj[m.lag_parameter[static_cast<std::size_t>(cmt)]];
      // With a lag nothing happens at the record's own time, but its parameters still end an
      // interval there.
      if (lag != 0.0 && r.evid != 4) ev.push_back({r.time, 2, seq, 0, kBoundary});
      const double amount = f * r.amt;
      const bool infusion = r.rate > 0.0;
      // With a fixed RATE, F scales the amount and so the duration (NONMEM).
      const double duration = infusion ? amount / r.rate : 0.0;
      if (r.ss > 0) {  // the steady state, at the record's own time (with the record's values)
        Event st{r.time, 2, seq, 2, kSteady};
        st.cmt = cmt;
        st.amount = amount;
        st.rate = infusion ? r.rate : 0.0;
        st.duration = duration;
        st.ss = r.ss;
        st.ii = r.ii;
        ev.push_back(st);
        // A constant infusion at steady state (AMT 0, II 0) ends at the record's time (NONMEM).
        if (r.ii == 0.0) continue;
      }
      for (std::int64_t k = 0; k <= r.addl; ++k) {
        const double t = r.time + static_cast<double>(k) * r.ii + lag;
        Event d{t, (k == 0 && lag == 0.0) ? 2 : 1, seq, 3, kDose};
        d.cmt = cmt;
        d.amount = amount;
        d.rate = infusion ? r.rate : 0.0;
        d.duration = duration;
        d.ii = r.ii;
        if (infusion) {
          d.id = next_id++;
          if (amount > 0.0) {
            Event stop{t + duration, 0, seq, 0, kStop};
            stop.id = d.id;
            ev.push_back(stop);
          }
        }
        ev.push_back(d);
      }
    }
    std::sort(ev.begin(), ev.end(), before);

    Vec<N> x = Vec<N>::Zero();
    // Stops of infusions started by a steady state before the first event (min-heap on time).
    std::priority_queue<std::pair<double, std::int64_t>,
                        std::vector<std::pair<double, std::int64_t>>, std::greater<>>
        virtual_stops;
    double tc = ev.empty() ? 0.0 : ev.front().time;
    Mat<N> k, g;
    auto advance_to = [&](double t) {
      while (tc < t) {
        double tb = t;
        if (!virtual_stops.empty() && virtual_stops.top().first < tb)
          tb = std::max(tc, virtual_stops.top().first);
        if (tb > tc) {
          Propagator<N>& pr = use(governing(tb));
          pr.step(tb - tc, k, g);
          Vec<N> r = Vec<N>::Zero();
          for (const Running& q : running) r(q.cmt) += q.rate;
          const Vec<N> y = k * x + g * r;
          x = y;
          tc = tb;
        }
        while (!virtual_stops.empty() && virtual_stops.top().first <= tc) {
          const std::int64_t id = virtual_stops.top().second;
          virtual_stops.pop();
          running.erase(std::remove_if(running.begin(), running.end(),
                                       [&](const Running& q) { return q.id == id; }),
                        running.end());
        }
      }
    };
    bool finite = true;
    // A reset (EVID 3/4) or an SS=1 dose cancels the doses of earlier records still pending
    // (additional doses, lagged doses): NONMEM's "pending additional doses are cancelled".
    std::int64_t cancel_below = -1;
    for (const Event& e : ev) {
      if (e.time > last_obs) break;  // nothing after the last observation is reported
      advance_to(e.time);
      switch (e.kind) {
        case kStop:
          running.erase(std::remove_if(running.begin(), running.end(),
                                       [&](const Running& q) { return q.id == e.id; }),
                        running.end());
          break;
        case kReset:
          x.setZero();
          running.clear();
          cancel_below = std::max(cancel_below, e.seq);
          while (!virtual_stops.empty()) virtual_stops.pop();
          break;
        case kSteady: {
          if (e.ss == 1) cancel_below = std::max(cancel_below, e.seq);
          // The SS record's own parameter values (not those of other records at its time).
          Propagator<N>& pr = use(e.seq);
          const double lag = p(e.seq)[m.lag_parameter[static_cast<std::size_t>(e.cmt)]];
          steady_runs.clear();
          Vec<N> r_before;
          detail::NoSteadyStateHooks<N> hooks;
          const Vec<N> xs = detail::record_steady_state(pr, e, lag, steady_runs, r_before, hooks);
          if (e.ss == 1) {
            x = xs;
            running.clear();
            while (!virtual_stops.empty()) virtual_stops.pop();
          } else {
            x += xs;
          }
          for (const auto& run : steady_runs) {
            const std::int64_t id = next_id++;
            running.push_back({id, e.cmt, run.first});
            virtual_stops.emplace(run.second, id);
          }
          break;
        }
        case kDose: {
          if (e.seq < cancel_below) break;  // cancelled by a later reset or SS=1 record
          if (e.rate > 0.0) {
            if (e.amount > 0.0) running.push_back({e.id, e.cmt, e.rate});
          } else {
            x(e.cmt) += e.amount;
          }
          break;
        }
        case kObserve: {
          // The whole output row: amounts, concentrations with the volumes in force at this
          // record, the observed compartment's concentration, and the row's index columns.
          const std::size_t row_i = static_cast<std::size_t>(e.row);
          const DatasetRecord& rec = recs[static_cast<std::size_t>(e.seq)];
          const double* pr = p(e.seq);
          const int cmt = rec.cmt > 0 ? rec.cmt - 1 : m.default_observation_compartment;
          double* o = out->amounts.data() + row_i * N;
          double* co = out->concentrations.data() + row_i * N;
          for (int r = 0; r < N; ++r) {
            o[r] = x(r);
            co[r] = x(r) / pr[m.volume_parameter[static_cast<std::size_t>(r)]];
            finite = finite && std::isfinite(x(r));
          }
          out->prediction[row_i] = co[cmt];
          out->subject[row_i] = s;
          out->record[row_i] = e.seq;
          out->time[row_i] = rec.time;
          out->compartment[row_i] = cmt;
          break;
        }
        case kBoundary:
          break;
      }
    }
    return finite;
  }
};

template <int N>
void run_subjects(const SubjectContext& c, const std::vector<std::int64_t>& first_row, int threads,
                  DatasetResult* out, SubjectStatus* status) {
  const std::int64_t n = static_cast<std::int64_t>(c.data->subjects.size());
  // One solver per thread: it holds references and buffers reused across its subjects.
  detail::parallel_for(
      n, threads, 16, [&] { return Solver<N>(c); },
      [&](std::int64_t s, Solver<N>& solver) {
        solver.start(s);
        status[s] = solver.run(out, first_row[static_cast<std::size_t>(s)])
                        ? SubjectStatus::Ok
                        : SubjectStatus::NonFinite;
      });
}

}  // namespace

namespace {
SubjectContext make_context(const Dataset& data, ModelKind model, const ParameterBatch& parameters,
                            const SimulateOptions& options) {
  const ModelInfo& m = parameters.info();
  const std::int64_t subjects = static_cast<std::int64_t>(data.subjects.size());
  if (parameters.model() != model || parameters.subjects() != subjects)
    throw InvalidArgument(
        "simulate_dataset: the parameter batch has " + std::to_string(parameters.subjects()) +
        " subjects of model " + to_string(parameters.model()) + ", but must have " +
        std::to_string(subjects) + " (one per dataset subject) of model " + m.name);
  if (options.device == Device::Cuda)
    throw BackendUnavailable(
        "device 'cuda' has no path for datasets (event lists) yet; use device: cpu or auto");
  SubjectContext c{&data, &m, model, &parameters, {}};
  for (const std::string& name : data.parameter_columns) {
    const int col = parameter_index(m, name);
    if (col < 0)
      throw InvalidArgument("simulate_dataset: dataset column " + name + " is not a parameter of " +
                            m.name);
    c.column_of.push_back(col);
  }
  const int n = static_cast<int>(m.compartments.size());
  // Subjects are checked in parallel (on one thread for a small dataset); the error of the
  // first failing subject is thrown.
  struct Scratch {
    std::vector<double> buffer;
    std::vector<int> rows;
  };
  detail::parallel_for(
      subjects, subjects > 1000 ? resolve_threads(options.threads) : 1, 256,
      [] { return Scratch{}; },
      [&](std::int64_t s, Scratch& scratch) {
        record_parameters(c, s, true, scratch.buffer, scratch.rows);
        for (const DatasetRecord& r : data.subjects[static_cast<std::size_t>(s)].records)
          if (r.cmt > n)
            fail_record(c, s, r,
                        "CMT is " + std::to_string(r.cmt) + ", but the model has " +
                            std::to_string(n) + " compartments");
      });
  return c;
}
}  // namespace

void check_dataset(const Dataset& data, ModelKind model, const ParameterBatch& parameters,
                   const SimulateOptions& options) {
  make_context(data, model, parameters, options);
}

DatasetResult simulate_dataset(const Dataset& data, ModelKind model,
                               const ParameterBatch& parameters, const SimulateOptions& options) {
  DatasetResult res;
  simulate_dataset_into(data, model, parameters, options, res);
  return res;
}

void simulate_dataset_into(const Dataset& data, ModelKind model, const ParameterBatch& parameters,
                           const SimulateOptions& options, DatasetResult& res) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelInfo& m = parameters.info();
  const int n = static_cast<int>(m.compartments.size());
  const std::int64_t subjects = static_cast<std::int64_t>(data.subjects.size());
  const SubjectContext c = make_context(data, model, parameters, options);
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
  const int threads = method == Method::Scan ? 1 : resolve_threads(options.threads);
  const auto t1 = std::chrono::steady_clock::now();
  switch (n) {
    case 1:
      run_subjects<1>(c, first_row, threads, &res, res.status.data());
      break;
    case 2:
      run_subjects<2>(c, first_row, threads, &res, res.status.data());
      break;
    case 3:
      run_subjects<3>(c, first_row, threads, &res, res.status.data());
      break;
    case 4:
      run_subjects<4>(c, first_row, threads, &res, res.status.data());
      break;
    case 5:
      run_subjects<5>(c, first_row, threads, &res, res.status.data());
      break;
    default:
      run_subjects<6>(c, first_row, threads, &res, res.status.data());
      break;
  }
  const auto t2 = std::chrono::steady_clock::now();
  res.summary.method = method;
  res.summary.device = Device::Cpu;
  res.summary.threads = threads;
  res.summary.prepare_seconds = std::chrono::duration<double>(t1 - t0).count();
  res.summary.scan_seconds = std::chrono::duration<double>(t2 - t1).count();
  for (SubjectStatus st : res.status) res.summary.non_finite_subjects += st != SubjectStatus::Ok;
}

}  // namespace pkscan
