// Exact simulation of per-subject event lists (datasets).
//
// Numeric contract: between consecutive events the state moves by x <- K(d) x + G(d) r with
// K(d) = expm(A d), G(d) = integral_0^d expm(A u) du and r the summed rates of the running
// infusions. K and G come from an eigendecomposition of A, computed once per parameter set, when
// A has real eigenvalues and a well-conditioned eigenvector matrix (cond < 1e4: errors stay within
// a few hundred ulps); otherwise from the exponential of [[A, I], [0, 0]] d (Eigen,
// scaling and squaring). float64 throughout. Every CPU method calls the same per-subject
// function, so results are identical for any method and thread count.
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
#include <thread>

#include "detail/parallel.hpp"
#include "detail/transition.hpp"

namespace pkscan {

namespace {

using detail::Mat;
using detail::Vec;

// K(d) and G(d) for one parameter set.
template <int N>
class Propagator {
 public:
  void reset(const Mat<N>& a) {
    a_ = a;
    cache_d_.clear();
    cache_k_.clear();
    cache_g_.clear();
    fast_ = false;
    // Structural zeros: expm(A d)[i][j] (and G) can be non-zero only where compartment i is
    // reachable from j through the flows of A (transitive closure). The eigendecomposition does
    // not keep those zeros exactly (an eigenvector entry of 1e-17 instead of 0 leaks amount into
    // a depot that should be decaying alone), so K and G are masked with this pattern.
    mask_.setZero();
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) mask_(i, j) = (i == j || a_(i, j) != 0.0) ? 1.0 : 0.0;
    for (int via = 0; via < N; ++via)
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j)
          if (mask_(i, via) != 0.0 && mask_(via, j) != 0.0) mask_(i, j) = 1.0;
    Eigen::EigenSolver<Eigen::Matrix<double, N, N>> es(a_);
    if (es.info() != Eigen::Success) return;
    const double scale = std::max(1.0, a_.cwiseAbs().maxCoeff());
    if (es.eigenvalues().imag().cwiseAbs().maxCoeff() > 1e-12 * scale) return;
    v_ = es.eigenvectors().real();
    lambda_ = es.eigenvalues().real();
    const auto lu = v_.fullPivLu();
    if (!lu.isInvertible()) return;
    vinv_ = lu.inverse();
    // 1-norm condition number of the eigenvector matrix.
    const double cond =
        v_.cwiseAbs().colwise().sum().maxCoeff() * vinv_.cwiseAbs().colwise().sum().maxCoeff();
    if (!(cond < 1e4)) return;
    // Reconstruction check: A = V diag(lambda) V^-1 to near rounding.
    const Eigen::Matrix<double, N, N> back = v_ * lambda_.asDiagonal() * vinv_;
    if ((back - a_).cwiseAbs().maxCoeff() > 1e-12 * scale) return;
    fast_ = true;
  }

  void step(double d, Mat<N>& k, Mat<N>& g) {
    if (d == 0.0) {
      k.setIdentity();
      g.setZero();
      return;
    }
    if (fast_) {
      Vec<N> e, s;
      for (int i = 0; i < N; ++i) {
        const double l = lambda_(i);
        const double x = l * d;
        e(i) = std::exp(x);
        // exp(x) - 1 is accurate to ~1e-14 relative for |x| >= 0.01; expm1 below that.
        s(i) = l == 0.0 ? d : (std::fabs(x) < 0.01 ? std::expm1(x) : e(i) - 1.0) / l;
      }
      k = (v_ * e.asDiagonal() * vinv_).cwiseProduct(mask_);
      g = (v_ * s.asDiagonal() * vinv_).cwiseProduct(mask_);
      return;
    }
    for (std::size_t i = 0; i < cache_d_.size(); ++i)
      if (cache_d_[i] == d) {
        k = cache_k_[i];
        g = cache_g_[i];
        return;
      }
    detail::exact_transition<N>(a_, d, k, g);
    if (cache_d_.size() < 64) {
      cache_d_.push_back(d);
      cache_k_.push_back(k);
      cache_g_.push_back(g);
    }
  }

  const Mat<N>& a() const { return a_; }

 private:
  Mat<N> a_;
  bool fast_ = false;
  Eigen::Matrix<double, N, N> v_, vinv_, mask_;
  Eigen::Matrix<double, N, 1> lambda_;
  std::vector<double> cache_d_;
  std::vector<Mat<N>> cache_k_, cache_g_;
};

enum Kind : int { kStop = 0, kReset = 1, kDose = 2, kObserve = 3, kBoundary = 4 };

struct Event {
  double time;
  int cls;           // at equal times: 0 infusion stops, 1 generated arrivals, 2 records
  std::int64_t seq;  // record index (file order)
  int sub;           // order within a record (reset before dose)
  Kind kind;
  int cmt = 0;
  double amount = 0.0;  // after F
  double rate = 0.0;    // > 0: infusion
  double duration = 0.0;
  int ss = 0;
  double ii = 0.0;
  std::int64_t id = -1;   // infusion id
  std::int64_t row = -1;  // output row (observations)
};

bool before(const Event& a, const Event& b) {
  if (a.time != b.time) return a.time < b.time;
  if (a.cls != b.cls) return a.cls < b.cls;
  if (a.seq != b.seq) return a.seq < b.seq;
  return a.sub < b.sub;
}

struct Running {
  std::int64_t id;
  int cmt;
  double rate;
};

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

  // Steady state just before a dose given every ii (the dose at this time not included).
  // Appends the infusions of earlier doses still running at t to `virtual_runs` (rate, ends at).
  Vec<N> steady_state(Propagator<N>& pr, const Event& d,
                      std::vector<std::pair<double, double>>& runs) {
    Mat<N> kii, gii;
    Vec<N> x = Vec<N>::Zero();
    if (d.ii == 0.0) {  // constant infusion at steady state: 0 = A x + r
      Vec<N> r = Vec<N>::Zero();
      r(d.cmt) = d.rate;
      const auto lu_a = pr.a().fullPivLu();
      // No equilibrium without elimination (A singular): the steady state does not exist.
      if (!lu_a.isInvertible()) return Vec<N>::Constant(std::numeric_limits<double>::quiet_NaN());
      x = lu_a.solve(-r);
      return x;
    }
    pr.step(d.ii, kii, gii);
    const Eigen::Matrix<double, N, N> i_minus_k = Eigen::Matrix<double, N, N>::Identity() - kii;
    const auto lu = i_minus_k.fullPivLu();
    // Without elimination I - K(ii) is singular and the doses accumulate without bound.
    if (!lu.isInvertible()) return Vec<N>::Constant(std::numeric_limits<double>::quiet_NaN());
    if (d.rate <= 0.0) {  // bolus: sum_{k>=1} K(k ii) b = K(ii) (I - K(ii))^-1 b
      Vec<N> b = Vec<N>::Zero();
      b(d.cmt) = d.amount;
      const Vec<N> y = lu.solve(b);
      return kii * y;
    }
    // Infusion of duration D every ii: infusions started k*ii ago with k*ii < D are running
    // (contributing G(k ii) r), the others finished (sum over k >= k0 of K(k ii - D) G(D) r).
    Vec<N> r = Vec<N>::Zero();
    r(d.cmt) = d.rate;
    const double dur = d.duration;
    std::int64_t k0 = static_cast<std::int64_t>(std::ceil(dur / d.ii - 1e-12));
    if (k0 < 1) k0 = 1;
    Mat<N> kk, gg;
    for (std::int64_t k = 1; k < k0; ++k) {
      pr.step(static_cast<double>(k) * d.ii, kk, gg);
      x += gg * r;
      runs.emplace_back(d.rate, d.time - static_cast<double>(k) * d.ii + dur);
    }
    Mat<N> kd, gd;
    pr.step(dur, kd, gd);
    pr.step(static_cast<double>(k0) * d.ii - dur, kk, gg);
    const Vec<N> y = lu.solve(Vec<N>(gd * r));
    x += kk * y;
    return x;
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
      for (std::int64_t k = 0; k <= r.addl; ++k) {
        const double t = r.time + static_cast<double>(k) * r.ii + lag;
        Event d{t, (k == 0 && lag == 0.0) ? 2 : 1, seq, 2, kDose};
        d.cmt = cmt;
        d.amount = amount;
        d.rate = infusion ? r.rate : 0.0;
        d.duration = duration;
        d.ss = k == 0 ? r.ss : 0;
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
        case kDose: {
          if (e.seq < cancel_below) break;  // cancelled by a later reset or SS=1 record
          if (e.ss == 1) cancel_below = std::max(cancel_below, e.seq);
          if (e.ss > 0) {
            std::vector<std::pair<double, double>> runs;
            Propagator<N>& pr = use(governing(e.time));
            const Vec<N> xs = steady_state(pr, e, runs);
            if (e.ss == 1) {
              x = xs;
              running.clear();
              while (!virtual_stops.empty()) virtual_stops.pop();
            } else {
              x += xs;
            }
            for (const auto& run : runs) {
              const std::int64_t id = next_id++;
              running.push_back({id, e.cmt, run.first});
              virtual_stops.emplace(run.second, id);
            }
          }
          if (e.rate > 0.0) {
            if (e.amount > 0.0 || (e.ss > 0 && e.ii == 0.0))
              running.push_back({e.id, e.cmt, e.rate});
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
  detail::RegionError err;  // no exception may leave the region (see detail/parallel.hpp)
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    Solver<N> solver(c);  // holds references and empty buffers: does not throw
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t s = 0; s < n; ++s)
      if (!err.failed())
        err.guard([&] {
          solver.start(s);
          status[s] = solver.run(out, first_row[static_cast<std::size_t>(s)])
                          ? SubjectStatus::Ok
                          : SubjectStatus::NonFinite;
        });
  }
  err.rethrow();
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
  // Subjects are checked in parallel; the error of the first failing subject is thrown.
  std::int64_t first_bad = subjects;
  std::exception_ptr first_error;
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#pragma omp parallel num_threads(threads) if (threads > 1 && subjects > 1000)
  {
    std::vector<double> buffer;
    std::vector<int> rows;
#pragma omp for schedule(dynamic, 256)
    for (std::int64_t s = 0; s < subjects; ++s) {
      try {
        record_parameters(c, s, true, buffer, rows);
        for (const DatasetRecord& r : data.subjects[static_cast<std::size_t>(s)].records)
          if (r.cmt > n)
            fail_record(c, s, r,
                        "CMT is " + std::to_string(r.cmt) + ", but the model has " +
                            std::to_string(n) + " compartments");
      } catch (...) {  // no exception may leave an OpenMP region
#pragma omp critical(pkscan_dataset_check)
        if (s < first_bad) {
          first_bad = s;
          first_error = std::current_exception();
        }
      }
    }
  }
  if (first_error) std::rethrow_exception(first_error);
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
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const Method method = options.method == Method::Auto ? Method::Batched : options.method;
  const int threads = method == Method::Scan ? 1 : (options.threads > 0 ? options.threads : hw);
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
