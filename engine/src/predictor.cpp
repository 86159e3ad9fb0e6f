// Predictor: a dataset prepared once, then predictions at its observation records, the
// log-likelihood and their exact gradients, evaluated many times.
//
// Numeric contract: predictions run the same event order and the same per-interval
// propagation as simulate_dataset() (the shared detail/event_list.hpp: K(d) = expm(A d),
// G(d) = integral_0^d expm(A u) du, steady states in closed form), so they agree with its
// `prediction` to rounding (the tests ask 1e-12 relative). Deterministic: the same inputs give
// the same bits for any thread count.
//
// Gradients are forward sensitivities s_k = dx/dp_k of x' = A(p) x + r(t; p), exact up to
// rounding. Over an interval of length d with constant A and infusion rates r,
//   s_k(t + d) = K s_k(t) + dK_k x(t) + dG_k r,
// with dK_k = L(A d, E_k d) the Frechet derivative of expm in the direction E_k = dA/dp_k and
// dG_k the same for G. When A = V diag(l) V^-1 is well conditioned (the propagator's fast path)
// the sensitivities are held in the eigenbasis (s~ = V^-1 s) where K is diagonal and
// (Daleckii-Krein) V^-1 dK_k V = Phi o E~_k, V^-1 dG_k V = Psi o E~_k with E~_k = V^-1 E_k V,
// Phi_ij = divided difference of exp(. d) at l_i, l_j and Psi_ij that of (exp(. d) - 1) / .,
// both evaluated without cancellation (series or expm1 for close eigenvalues). Otherwise dK_k and
// dG_k are blocks of the exponential of [[A, 0, I], [E_k, A, 0], [0, 0, 0]] d (Eigen).
// Events whose time moves with a parameter (a lagged arrival: d tau / d lag = 1; the end of a
// fixed-RATE infusion: d tau / d f = AMT / RATE) add (Gamma_x xdot- - xdot+) d tau / dp, where
// Gamma_x is the event's state map (I, or 0 for an SS=1 dose) and xdot = A x + r just before and
// after, both with the A of the interval that starts at the event: the derivative for the event
// moving later, the only one at lag 0, where a dose arrives exactly at its record's time and so
// at a change of the parameter row. Steady states are differentiated in closed form.
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/predictor.hpp>
#include <string>
#include <unsupported/Eigen/MatrixFunctions>
#include <utility>
#include <vector>

#include "detail/event_list.hpp"
#include "detail/parallel.hpp"
#include "detail/rate_structure.hpp"
#include "detail/transition.hpp"

namespace pkscan {

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

using detail::analyse_rates;
using detail::before;
using detail::Event;
using detail::kBoundary;
using detail::kDose;
using detail::kObserve;
using detail::kReset;
using detail::kSteady;
using detail::kStop;
using detail::Mat;
using detail::Propagator;
using detail::RateStructure;
using detail::Running;
using detail::Vec;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kMaxColumns = 64;  // parameter columns (a bit mask per row); linear models have <= 54

// A dataset event before the parameters are known: its time without lag (for stops, without
// lag and duration), the dose number within its record.
struct EventTemplate {
  Event e;
  std::int64_t addl_k = 0;
};

// The parameter row of a run of records: the subject's row with these dataset cells written in.
struct RowTemplate {
  std::int64_t first_record = 0;                  // for messages
  std::vector<std::pair<int, double>> overrides;  // model column, value
  std::uint64_t overridden = 0;                   // bit c: column c comes from the dataset
};

struct SubjectPlan {
  std::vector<EventTemplate> events;  // sorted for lag 0 and f 1 (nearly sorted for others)
  std::vector<int> row_of;            // per record: index into rows
  std::vector<RowTemplate> rows;
  std::int64_t infusion_ids = 0;  // ids 0.. are the infusion doses; steady-state runs follow
  double last_obs = -std::numeric_limits<double>::infinity();
  std::int64_t obs_offset = 0;
  std::int64_t obs_count = 0;
  std::vector<int> ll_obs;     // observations (0-based within the subject) in the likelihood
  std::vector<double> ll_dv;   // their DV
  std::vector<int> ll_line;    // their dataset lines (messages)
  std::uint64_t dosed = 0;     // bit c: compartment c receives doses
  std::uint64_t observed = 0;  // bit c: compartment c is observed
};

[[noreturn]] void throw_invalid(const std::string& msg) { throw InvalidArgument(msg); }
[[noreturn]] void throw_domain(const std::string& msg) { throw DomainError(msg); }

// ---- Divided differences of exp, accurate for close arguments. ----

// d * exp[l_i d, l_j d] = (e_i - e_j) / (l_i - l_j) (d e_i when equal).
inline double phi_pair(double li, double lj, double ei, double ej, double d, double inv) {
  const double delta = li - lj;
  if (std::fabs(delta) * d >= 0.01) return (ei - ej) * inv;  // cancellation costs <= 200 ulp
  if (delta == 0.0) return d * ej;
  return ej * std::expm1(delta * d) / delta;
}

// d^2 * exp[a, b, 0] with a = l_i d, b = l_j d: the divided difference of
// g(l) = (exp(l d) - 1) / l at l_i, l_j. phi = phi_pair(i, j); si, sj = g(l_i), g(l_j).
inline double psi_pair(double li, double lj, double d, double phi, double si, double sj) {
  const double a = li * d, b = lj * d;
  const double hi = std::max({a, b, 0.0}), lo = std::min({a, b, 0.0});
  if (hi - lo < 0.02) {
    // exp[a, b, 0] = exp(mu) sum_m h_m(a - mu, b - mu, -mu) / (m + 2)!, h_m the complete
    // homogeneous symmetric polynomials; |a - mu| etc. <= 0.01, so 9 terms reach rounding.
    const double mu = 0.5 * (hi + lo);
    const double u = a - mu, v = b - mu, w = -mu;
    double p1 = 1.0, h2 = 1.0, h3 = 1.0, sum = 0.5, fact = 2.0;
    for (int m = 1; m <= 9; ++m) {
      p1 *= u;
      h2 = p1 + v * h2;
      h3 = h2 + w * h3;
      fact *= static_cast<double>(m + 2);
      sum += h3 / fact;
    }
    return d * d * std::exp(mu) * sum;
  }
  // f[x, y, z] = (f[x, y] - f[y, z]) / (x - z) with x, z the extreme points: no cancellation
  // beyond a factor 2 / (x - z) <= 100.
  const double fab = phi / d, fa0 = si / d, fb0 = sj / d;
  double r;
  if ((a >= 0.0 && b <= 0.0) || (a <= 0.0 && b >= 0.0))  // 0 in the middle
    r = (fa0 - fb0) / (a - b);
  else if ((b <= a && a <= 0.0) || (0.0 <= a && a <= b))  // a in the middle
    r = (fab - fa0) / b;
  else  // b in the middle
    r = (fab - fb0) / a;
  return d * d * r;
}

// dK and dG of the direction E over tau: blocks of the exponential of
// [[A, 0, I], [E, A, 0], [0, 0, 0]] tau (z = [x; s; r], z' = [A x + r; E x + A s; 0]). One
// instantiation of Eigen's scaling and squaring serves every model size; its matrices are
// bounded (at most 18 x 18), so they live on the stack: no allocation.
// a, e, dk, dg: n x n row-major.
void block_frechet_dynamic(Eigen::Index n, const double* a, const double* e, double tau, double* dk,
                           double* dg) {
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Block = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, 0, 18, 18>;
  const Eigen::Map<const RowMajor> am(a, n, n), em(e, n, n);
  Block m = Block::Zero(3 * n, 3 * n);
  m.block(0, 0, n, n) = am * tau;
  m.block(0, 2 * n, n, n).setIdentity();
  m.block(0, 2 * n, n, n) *= tau;
  m.block(n, 0, n, n) = em * tau;
  m.block(n, n, n, n) = am * tau;
  const Block x = m.exp();
  Eigen::Map<RowMajor>(dk, n, n) = x.block(n, 0, n, n);
  Eigen::Map<RowMajor>(dg, n, n) = x.block(n, 2 * n, n, n);
}

}  // namespace

// ---- Prepared data. ----

// What a Predictor holds (immutable after prepare()).
struct Prepared {
  Dataset data;
  std::shared_ptr<const ModelInfo> model;
  int n = 0;
  int np = 0;
  std::vector<int> column_of;  // dataset parameter column -> model column
  std::vector<char> is_dataset_column;
  RateStructure rates;
  std::vector<SubjectPlan> plans;
  std::int64_t total_obs = 0;
  std::size_t max_events = 0, max_obs = 0, max_rows = 0;

  void prepare();
  [[noreturn]] void fail_record(std::int64_t s, std::int64_t record, const std::string& msg) const;
  void check_subject(std::int64_t s) const {
    if (s < 0 || s >= static_cast<std::int64_t>(plans.size()))
      throw_invalid("Predictor: subject index is " + std::to_string(s) + ", but must be in 0.." +
                    std::to_string(static_cast<std::int64_t>(plans.size()) - 1) + " (0-based)");
  }
};

void Prepared::fail_record(std::int64_t s, std::int64_t record, const std::string& msg) const {
  const DatasetSubject& sub = data.subjects[static_cast<std::size_t>(s)];
  throw DomainError("Predictor: " + data.file + ":" +
                    std::to_string(sub.records[static_cast<std::size_t>(record)].line) + ": ID \"" +
                    sub.id + "\" (subject " + std::to_string(s + 1) + "): " + msg);
}

void Prepared::prepare() {
  const ModelInfo& m = *model;
  if (m.kind == ModelKind::Linear && m.compartments.empty())
    throw_invalid(
        "Predictor: the linear model has no compartments; build it with "
        "make_linear_model()");
  n = static_cast<int>(m.compartments.size());
  np = static_cast<int>(m.parameters.size());
  if (n < 1 || n > 6) throw_invalid("Predictor: model " + m.name + " has an unsupported size");
  if (np > kMaxColumns)
    throw_invalid("Predictor: model " + m.name + " has " + std::to_string(np) +
                  " parameters, but at most " + std::to_string(kMaxColumns) + " are supported");
  is_dataset_column.assign(static_cast<std::size_t>(np), 0);
  for (const std::string& name : data.parameter_columns) {
    const int col = parameter_index(m, name);
    if (col < 0)
      throw_invalid("Predictor: dataset column " + name + " is not a parameter of " + m.name);
    column_of.push_back(col);
    is_dataset_column[static_cast<std::size_t>(col)] = 1;
  }
  rates = analyse_rates(m);
  plans.resize(data.subjects.size());
  for (std::size_t s = 0; s < data.subjects.size(); ++s) {
    const std::vector<DatasetRecord>& recs = data.subjects[s].records;
    SubjectPlan& plan = plans[s];
    plan.obs_offset = total_obs;
    plan.row_of.assign(recs.size(), 0);
    std::int64_t next_id = 0;
    std::int64_t obs = 0;
    for (std::size_t j = 0; j < recs.size(); ++j) {
      const DatasetRecord& r = recs[j];
      const std::int64_t seq = static_cast<std::int64_t>(j);
      if (r.parameters.size() != column_of.size())
        throw_invalid("Predictor: " + data.file + ":" + std::to_string(r.line) +
                      ": the record has " + std::to_string(r.parameters.size()) +
                      " parameter values, but the dataset has " + std::to_string(column_of.size()) +
                      " parameter columns");
      if (r.cmt > n)
        throw_invalid("Predictor: " + data.file + ":" + std::to_string(r.line) + ": ID \"" +
                      data.subjects[s].id + "\" (subject " + std::to_string(s + 1) + "): CMT is " +
                      std::to_string(r.cmt) + ", but the model " + m.name + " has " +
                      std::to_string(n) + " compartments");
      // The row: the dataset cells of this record (a run of equal records shares one).
      RowTemplate row;
      row.first_record = seq;
      for (std::size_t c = 0; c < column_of.size(); ++c) {
        const double v = r.parameters[c];
        if (std::isnan(v)) continue;
        row.overrides.emplace_back(column_of[c], v);
        row.overridden |= std::uint64_t{1} << column_of[c];
      }
      if (!plan.rows.empty() && plan.rows.back().overrides == row.overrides) {
        plan.row_of[j] = static_cast<int>(plan.rows.size()) - 1;
      } else {
        plan.rows.push_back(std::move(row));
        plan.row_of[j] = static_cast<int>(plan.rows.size()) - 1;
      }
      // Events, as simulate_dataset() builds them; the set does not depend on the parameters
      // (a dose record always bounds an interval at its own time and an infusion always has a
      // stop: with lag 0 or F 0 these coincide with other events and change nothing).
      if (r.evid == 2) plan.events.push_back({{r.time, 2, seq, 0, kBoundary}, 0});
      if (r.evid == 0) {
        Event o{r.time, 2, seq, 3, kObserve};
        o.row = obs;
        plan.events.push_back({o, 0});
        if (!r.mdv && !std::isnan(r.dv)) {
          plan.ll_obs.push_back(static_cast<int>(obs));
          plan.ll_dv.push_back(r.dv);
          plan.ll_line.push_back(static_cast<int>(r.line));
        }
        const int cmt = r.cmt > 0 ? r.cmt - 1 : m.default_observation_compartment;
        plan.observed |= std::uint64_t{1} << cmt;
        ++obs;
        plan.last_obs = r.time;
        continue;
      }
      if (r.evid == 3 || r.evid == 4) plan.events.push_back({{r.time, 2, seq, 1, kReset}, 0});
      if (!r.is_dose()) continue;
      const int cmt = r.cmt > 0 ? r.cmt - 1 : m.default_dose_compartment;
      plan.dosed |= std::uint64_t{1} << cmt;
      if (r.evid != 4) plan.events.push_back({{r.time, 2, seq, 0, kBoundary}, 0});
      const bool infusion = r.rate > 0.0;
      if (r.ss > 0) {  // the steady state at the record's own time (amount and duration: F)
        Event st{r.time, 2, seq, 2, kSteady};
        st.cmt = cmt;
        st.amount = r.amt;
        st.rate = infusion ? r.rate : 0.0;
        st.duration = infusion ? r.amt / r.rate : 0.0;
        st.ss = r.ss;
        st.ii = r.ii;
        plan.events.push_back({st, 0});
        // A constant infusion at steady state (AMT 0, II 0) ends at the record's time (NONMEM).
        if (r.ii == 0.0) continue;
      }
      for (std::int64_t k = 0; k <= r.addl; ++k) {
        const double t = r.time + static_cast<double>(k) * r.ii;
        Event d{t, k == 0 ? 2 : 1, seq, 3, kDose};
        d.cmt = cmt;
        d.amount = r.amt;
        d.rate = infusion ? r.rate : 0.0;
        d.duration = infusion ? r.amt / r.rate : 0.0;
        d.ii = r.ii;
        if (infusion) {
          d.id = next_id++;
          Event stop{t + d.duration, 0, seq, 0, kStop};
          stop.id = d.id;
          stop.cmt = cmt;
          stop.rate = r.rate;
          plan.events.push_back({stop, k});
        }
        plan.events.push_back({d, k});
      }
    }
    std::sort(plan.events.begin(), plan.events.end(),
              [](const EventTemplate& a, const EventTemplate& b) { return before(a.e, b.e); });
    plan.infusion_ids = next_id;
    plan.obs_count = obs;
    total_obs += obs;
    max_events = std::max(max_events, plan.events.size());
    max_obs = std::max(max_obs, static_cast<std::size_t>(obs));
    max_rows = std::max(max_rows, plan.rows.size());
  }
}

namespace {

// ---- The per-subject solver (one per workspace, for the model's compartment count). ----

class SolverBase {
 public:
  virtual ~SolverBase() = default;
  // Predictions of subject s into out (obs_count values); with jac (obs_count x np, row-major)
  // also the Jacobian.
  virtual void run(const Prepared& impl, std::int64_t s, const double* params, double* out,
                   double* jac) = 0;
};

struct VirtualStop {
  double time;
  std::int64_t id;
  int cmt;
  double rate;
  std::int64_t seq;     // the steady-state dose record
  bool moves_with_lag;  // its time moves with the record's lag (lag < II)
};

template <int N>
class Solver final : public SolverBase {
 public:
  explicit Solver(const Prepared& impl) {
    const std::size_t np = static_cast<std::size_t>(impl.np);
    rows_.reserve(impl.max_rows * np);
    ev_.reserve(impl.max_events);
    running_.reserve(impl.max_events);
    vstops_.reserve(16);
    runs_.reserve(16);
    s_.resize(np);
    da_.resize(np);
    et_.resize(np);
    dir_col_.resize(np);
    dir_of_.resize(np);
    tmp_.resize(np);
    tmp2_.resize(np);
    dy_.resize(np);
    saved_.resize(np);
  }

  void run(const Prepared& impl, std::int64_t s, const double* params, double* out,
           double* jac) override {
    if (jac != nullptr)
      simulate<true>(impl, s, params, out, jac);
    else
      simulate<false>(impl, s, params, out, nullptr);
  }

 private:
  using Square = Eigen::Matrix<double, N, N>;

  // ---- State of one evaluation. ----
  const Prepared* impl_ = nullptr;
  const SubjectPlan* plan_ = nullptr;
  const std::vector<DatasetRecord>* recs_ = nullptr;
  int np_ = 0;
  std::vector<double> rows_;  // the subject's parameter rows
  std::vector<Event> ev_;
  std::vector<Running> running_;
  std::vector<VirtualStop> vstops_;  // ascending (time, id)
  std::vector<std::pair<double, double>> runs_;
  Propagator<N> prop_;
  int prop_row_ = -1;
  std::size_t cursor_ = 0;
  Vec<N> x_;

  // ---- Sensitivities. Directions: [0, pa_) move A, [pa_, ps_) only the inputs (f_, lag_),
  // [ps_, p_) only the concentrations (volumes of observed compartments). ----
  int pa_ = 0, ps_ = 0, p_ = 0;
  std::vector<int> dir_col_;             // per direction: model column
  std::vector<int> dir_of_;              // per column: direction or -1
  std::vector<Vec<N>> s_;                // per state direction: dx/dp (eigenbasis when basis_fast_)
  bool basis_fast_ = false;              // s_ holds V^-1 s of the current propagator
  std::vector<Mat<N>> da_;               // per A direction: dA/dp (original coordinates)
  std::vector<Square> et_;               // per A direction: V^-1 dA/dp V (fast path)
  Square inv_;                           // 1 / (l_i - l_j) (fast path)
  std::vector<Vec<N>> tmp_, tmp2_, dy_;  // per direction scratch
  std::vector<Vec<N>> saved_;            // the sensitivities before an SS=2 steady state
  // Fallback path: dK_k, dG_k per interval length (for the current row).
  std::vector<double> fb_d_;
  std::vector<Mat<N>> fb_mats_;  // per cached length: 2 * pa_ matrices (dK_k, dG_k)

  const double* row_ptr(int row) const {
    return rows_.data() + static_cast<std::size_t>(row) * static_cast<std::size_t>(np_);
  }
  const double* p(std::int64_t j) const {
    return row_ptr(plan_->row_of[static_cast<std::size_t>(j)]);
  }
  bool free_in(std::int64_t j, int col) const {
    const RowTemplate& rt =
        plan_->rows[static_cast<std::size_t>(plan_->row_of[static_cast<std::size_t>(j)])];
    return ((rt.overridden >> col) & 1u) == 0;
  }

  std::int64_t governing(double t) {
    const std::vector<DatasetRecord>& rs = *recs_;
    while (cursor_ < rs.size() && rs[cursor_].time < t) ++cursor_;
    if (cursor_ == rs.size()) return static_cast<std::int64_t>(rs.size()) - 1;
    return static_cast<std::int64_t>(cursor_);
  }

  // The propagator for the parameters of record j; with sensitivities, also dA/dp of that row and
  // the sensitivities moved into its basis.
  template <bool G>
  Propagator<N>& use(std::int64_t j) {
    const int row = plan_->row_of[static_cast<std::size_t>(j)];
    if (row == prop_row_) return prop_;
    if (G && basis_fast_)
      for (int k = 0; k < ps_; ++k) s_[k] = prop_.v() * s_[k];
    Mat<N> a;
    rate_matrix(*impl_->model, row_ptr(row), a.data());
    prop_.reset(a);
    prop_row_ = row;
    if (G) setup_row(row);
    return prop_;
  }

  // dA/dp_k of row `row` for the A directions, their eigenbasis forms, and the basis change.
  void setup_row(int row) {
    const double* pr = row_ptr(row);
    const std::uint64_t overridden = plan_->rows[static_cast<std::size_t>(row)].overridden;
    auto dir_if_free = [&](int col) -> int {
      if (col < 0 || ((overridden >> col) & 1u)) return -1;
      const int k = dir_of_[static_cast<std::size_t>(col)];
      return k < pa_ ? k : -1;
    };
    for (int k = 0; k < pa_; ++k) da_[k].setZero();
    const RateStructure& rs = impl_->rates;
    for (std::size_t i = 0; i < rs.micro.size(); ++i) {
      const Eigen::Map<const Mat<N>> b(rs.b[i].data());
      const int mc = rs.micro[i];
      if (!std::isnan(pr[mc])) {
        const int k = dir_if_free(mc);
        if (k >= 0) da_[k] += b;
        continue;
      }
      const int c = rs.clearance[i], v = rs.volume[i];
      if (c < 0 || std::isnan(pr[c])) continue;
      const int kc = dir_if_free(c), kv = dir_if_free(v);
      if (kc >= 0) da_[kc] += b / pr[v];
      if (kv >= 0) da_[kv] -= b * (pr[c] / (pr[v] * pr[v]));
    }
    fb_d_.clear();
    fb_mats_.clear();
    basis_fast_ = prop_.fast();
    if (!basis_fast_) return;
    const Square& v = prop_.v();
    const Square& vi = prop_.vinv();
    for (int k = 0; k < pa_; ++k) et_[k].noalias() = vi * (da_[k] * v);
    const Vec<N>& l = prop_.lambda();
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) inv_(i, j) = l(i) != l(j) ? 1.0 / (l(i) - l(j)) : 0.0;
    for (int k = 0; k < ps_; ++k) s_[k] = vi * s_[k];
  }

  // Adds `v` (original coordinates) times `scale` to the sensitivity of direction k.
  void add_to(int k, const Vec<N>& v, double scale) {
    if (basis_fast_)
      s_[k].noalias() += prop_.vinv() * (v * scale);
    else
      s_[k] += v * scale;
  }
  // Adds scale * e_cmt.
  void add_unit(int k, int cmt, double scale) {
    if (basis_fast_)
      s_[k] += prop_.vinv().col(cmt) * scale;
    else
      s_[k](cmt) += scale;
  }
  // Sensitivity of direction k in original coordinates.
  Vec<N> orig(int k) const {
    if (basis_fast_) return prop_.v() * s_[k];
    return s_[k];
  }
  // Sets the sensitivity of direction k from original coordinates.
  void set_orig(int k, const Vec<N>& v) {
    if (basis_fast_)
      s_[k].noalias() = prop_.vinv() * v;
    else
      s_[k] = v;
  }

  // Phi (and Psi) of interval length d in the current (fast) propagator.
  void divided_differences(double d, const Vec<N>& e, const Vec<N>& sg, bool want_psi, Square& phi,
                           Square& psi) const {
    const Vec<N>& l = prop_.lambda();
    for (int i = 0; i < N; ++i) {
      phi(i, i) = d * e(i);
      for (int j = 0; j < i; ++j) {
        const double v = phi_pair(l(i), l(j), e(i), e(j), d, inv_(i, j));
        phi(i, j) = v;
        phi(j, i) = v;
      }
    }
    if (!want_psi) return;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j <= i; ++j) {
        const double v = psi_pair(l(i), l(j), d, phi(i, j), sg(i), sg(j));
        psi(i, j) = v;
        psi(j, i) = v;
      }
  }

  // dK_k(tau) y + dG_k(tau) r for every A direction, in original coordinates, into tmp_.
  void frechet(double tau, const Vec<N>& y, const Vec<N>& r) {
    for (int k = 0; k < pa_; ++k) tmp_[k].setZero();
    if (tau == 0.0 || pa_ == 0) return;
    const bool has_r = !r.isZero(0.0);
    if (prop_.fast()) {
      Vec<N> e, sg;
      prop_.eigen_terms(tau, e, sg);
      Square phi, psi;
      divided_differences(tau, e, sg, has_r, phi, psi);
      const Vec<N> yt = prop_.vinv() * y;
      Square w = phi * yt.asDiagonal();
      if (has_r) {
        const Vec<N> rt = prop_.vinv() * r;
        w += psi * rt.asDiagonal();
      }
      for (int k = 0; k < pa_; ++k) {
        const Vec<N> u = et_[k].cwiseProduct(w).rowwise().sum();
        tmp_[k].noalias() = prop_.v() * u;
      }
      return;
    }
    for (int k = 0; k < pa_; ++k) {
      Mat<N> dk, dg;
      block_frechet(da_[k], tau, dk, dg);
      tmp_[k].noalias() = dk * y;
      if (has_r) tmp_[k].noalias() += dg * r;
    }
  }

  // dK and dG of direction E over tau (fallback path).
  void block_frechet(const Mat<N>& e, double tau, Mat<N>& dk, Mat<N>& dg) const {
    block_frechet_dynamic(N, prop_.a().data(), e.data(), tau, dk.data(), dg.data());
  }

  // Moves the sensitivities over an interval of length d (x_old: the state at its start).
  // e, sg: the eigenvalue terms of the step (fast path).
  void propagate(double d, const Mat<N>& k, const Vec<N>& x_old, const Vec<N>& r, bool has_r,
                 const Vec<N>& e, const Vec<N>& sg) {
    if (basis_fast_) {
      if (pa_ > 0) {
        Square phi, psi;
        divided_differences(d, e, sg, has_r, phi, psi);
        const Vec<N> xt = prop_.vinv() * x_old;
        Square w = phi * xt.asDiagonal();
        if (has_r) {
          const Vec<N> rt = prop_.vinv() * r;
          w += psi * rt.asDiagonal();
        }
        for (int q = 0; q < pa_; ++q) {
          Vec<N>& sq = s_[q];
          const Square& eq = et_[q];
          for (int i = 0; i < N; ++i) {
            double acc = e(i) * sq(i);
            for (int j = 0; j < N; ++j) acc += eq(i, j) * w(i, j);
            sq(i) = acc;
          }
        }
      }
      for (int q = pa_; q < ps_; ++q) s_[q] = s_[q].cwiseProduct(e);
      return;
    }
    // Fallback: dK_k, dG_k from block exponentials, cached per length for this row.
    std::size_t at = fb_d_.size();
    for (std::size_t i = 0; i < fb_d_.size(); ++i)
      if (fb_d_[i] == d) at = i;
    const std::size_t stride = 2 * static_cast<std::size_t>(pa_);
    if (at == fb_d_.size()) {
      if (fb_d_.size() >= 64) {  // full: reuse the last slot
        at = fb_d_.size() - 1;
        fb_d_[at] = d;
      } else {
        fb_d_.push_back(d);
        fb_mats_.resize(fb_d_.size() * stride);
      }
      for (int q = 0; q < pa_; ++q)
        block_frechet(da_[q], d, fb_mats_[at * stride + 2 * static_cast<std::size_t>(q)],
                      fb_mats_[at * stride + 2 * static_cast<std::size_t>(q) + 1]);
    }
    for (int q = 0; q < pa_; ++q) {
      Vec<N> y = k * s_[q];
      y.noalias() += fb_mats_[at * stride + 2 * static_cast<std::size_t>(q)] * x_old;
      if (has_r) y.noalias() += fb_mats_[at * stride + 2 * static_cast<std::size_t>(q) + 1] * r;
      s_[q] = y;
    }
    for (int q = pa_; q < ps_; ++q) s_[q] = k * s_[q];
  }

  Vec<N> rates() const {
    Vec<N> r = Vec<N>::Zero();
    for (const Running& q : running_) r(q.cmt) += q.rate;
    return r;
  }

  // Directions of this evaluation: the columns whose derivative can be non-zero.
  void setup_directions(const double* params) {
    const ModelInfo& m = *impl_->model;
    const RateStructure& rs = impl_->rates;
    std::fill(dir_of_.begin(), dir_of_.end(), -1);
    p_ = 0;
    auto add = [&](int col) {
      if (col < 0 || std::isnan(params[col]) || dir_of_[static_cast<std::size_t>(col)] >= 0) return;
      dir_of_[static_cast<std::size_t>(col)] = p_;
      dir_col_[static_cast<std::size_t>(p_)] = col;
      ++p_;
    };
    for (std::size_t i = 0; i < rs.micro.size(); ++i) {
      add(rs.micro[i]);
      const int c = rs.clearance[i];
      if (c >= 0 &&
          (!std::isnan(params[c]) || impl_->is_dataset_column[static_cast<std::size_t>(c)])) {
        add(c);
        add(rs.volume[i]);
      }
    }
    pa_ = p_;
    for (int c = 0; c < N; ++c)
      if ((plan_->dosed >> c) & 1u) {
        add(m.f_parameter[static_cast<std::size_t>(c)]);
        add(m.lag_parameter[static_cast<std::size_t>(c)]);
      }
    ps_ = p_;
    for (int c = 0; c < N; ++c)
      if ((plan_->observed >> c) & 1u) add(m.volume_parameter[static_cast<std::size_t>(c)]);
    for (int k = 0; k < ps_; ++k) s_[k].setZero();
    basis_fast_ = false;
  }

  // Parameter rows of the subject (validated) and its events in processing order.
  void prepare_subject(const Prepared& impl, std::int64_t s, const double* params) {
    impl_ = &impl;
    plan_ = &impl.plans[static_cast<std::size_t>(s)];
    recs_ = &impl.data.subjects[static_cast<std::size_t>(s)].records;
    np_ = impl.np;
    const std::size_t np = static_cast<std::size_t>(np_);
    rows_.resize(plan_->rows.size() * np);
    for (std::size_t t = 0; t < plan_->rows.size(); ++t) {
      double* row = rows_.data() + t * np;
      std::memcpy(row, params, sizeof(double) * np);
      for (const auto& [col, v] : plan_->rows[t].overrides) row[col] = v;
      const std::string msg = check_parameters(*impl.model, row);
      if (!msg.empty()) impl.fail_record(s, plan_->rows[t].first_record, msg);
    }
    const ModelInfo& m = *impl.model;
    ev_.resize(plan_->events.size());
    for (std::size_t i = 0; i < ev_.size(); ++i) {
      const EventTemplate& t = plan_->events[i];
      Event e = t.e;
      if (e.kind == kDose || e.kind == kStop || e.kind == kSteady) {
        const double* pj = p(e.seq);
        const double f = pj[m.f_parameter[static_cast<std::size_t>(e.cmt)]];
        const double lag = pj[m.lag_parameter[static_cast<std::size_t>(e.cmt)]];
        const double amt = (*recs_)[static_cast<std::size_t>(e.seq)].amt;
        const double amount = f * amt;
        const double duration = e.rate > 0.0 ? amount / e.rate : 0.0;
        if (e.kind == kSteady) {  // at the record's own time
          e.amount = amount;
          e.duration = duration;
        } else if (e.kind == kDose) {
          e.time = t.e.time + lag;
          e.cls = (t.addl_k == 0 && lag == 0.0) ? 2 : 1;
          e.amount = amount;
          e.duration = duration;
        } else {  // the arrival of its dose plus the duration, added as simulate_dataset does
          const DatasetRecord& r = (*recs_)[static_cast<std::size_t>(e.seq)];
          e.time = r.time + static_cast<double>(t.addl_k) * r.ii + lag + duration;
        }
      }
      // Insertion sort: the template order is the order for lag 0 and F 1, so few moves.
      std::size_t j = i;
      while (j > 0 && before(e, ev_[j - 1])) {
        ev_[j] = ev_[j - 1];
        --j;
      }
      ev_[j] = e;
    }
    running_.clear();
    vstops_.clear();
    prop_row_ = -1;
    cursor_ = 0;
    x_.setZero();
  }

  // The rate matrix of the interval that starts at t (the one an event at t moves into when it
  // moves later): that of the first record after t. Call after governing(t).
  void jump_matrix(double t, Mat<N>& a) const {
    const std::vector<DatasetRecord>& rs = *recs_;
    std::size_t j = cursor_;
    while (j < rs.size() && rs[j].time <= t) ++j;
    if (j == rs.size()) j = rs.size() - 1;
    const int row = plan_->row_of[j];
    if (row == prop_row_)
      a = prop_.a();
    else
      rate_matrix(*impl_->model, row_ptr(row), a.data());
  }

  // Removes the running infusion `id`; returns its rate (0 when it was not running).
  bool stop_infusion(std::int64_t id) {
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (running_[i].id == id) {
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    return false;
  }

  // Jump of an infusion stop of rate R into cmt at a time that moves with the dose's lag
  // (d tau = 1, when `with_lag`) and F (d tau = AMT / R): s += R e_cmt d tau.
  void stop_jump(std::int64_t seq, int cmt, double rate, bool with_lag = true) {
    const ModelInfo& m = *impl_->model;
    const int lag_col = m.lag_parameter[static_cast<std::size_t>(cmt)];
    const int f_col = m.f_parameter[static_cast<std::size_t>(cmt)];
    const int kl = dir_of_[static_cast<std::size_t>(lag_col)];
    const int kf = dir_of_[static_cast<std::size_t>(f_col)];
    if (with_lag && kl >= 0 && free_in(seq, lag_col)) add_unit(kl, cmt, rate);
    if (kf >= 0 && free_in(seq, f_col))
      add_unit(kf, cmt, (*recs_)[static_cast<std::size_t>(seq)].amt);
  }

  // The sensitivities through record_steady_state() (the steady state of an SS record): set
  // from the closed form's derivative at the last implied arrival, moved over the phase with the
  // record's A, with the jumps of the bolus and of implied infusions ending (their ends move
  // with F; the phase's dependence on the lag is added by the caller).
  struct SteadyHooks {
    Solver& sv;
    void arrival(const Event& a, const Vec<N>& x) {
      sv.steady_state_derivative(a, x);
      for (int q = 0; q < sv.ps_; ++q) sv.set_orig(q, sv.tmp2_[q]);
    }
    // The bolus F AMT: d/dF = AMT into its compartment (the F part of stop_jump).
    void bolus(const Event& a) { sv.stop_jump(a.seq, a.cmt, 0.0, false); }
    void step(double dt, const Mat<N>& k, const Vec<N>& x_old, const Vec<N>& r, const Vec<N>& e,
              const Vec<N>& sg) {
      sv.propagate(dt, k, x_old, r, !r.isZero(0.0), e, sg);
    }
    void stop(const Event& d, double rate) { sv.stop_jump(d.seq, d.cmt, rate, false); }
  };

  template <bool G>
  void advance_to(double t, Mat<N>& k, Mat<N>& g) {
    while (x_time_ < t) {
      double tb = t;
      if (!vstops_.empty() && vstops_.front().time < tb)
        tb = std::max(x_time_, vstops_.front().time);
      if (tb > x_time_) {
        Propagator<N>& pr = use<G>(governing(tb));
        const double d = tb - x_time_;
        Vec<N> e = Vec<N>::Zero(), sg = Vec<N>::Zero();
        if (G)
          pr.step(d, k, g, e, sg);
        else
          pr.step(d, k, g);
        const Vec<N> r = rates();
        if (G) propagate(d, k, x_, r, !running_.empty(), e, sg);
        const Vec<N> y = k * x_ + g * r;
        x_ = y;
        x_time_ = tb;
      }
      while (!vstops_.empty() && vstops_.front().time <= x_time_) {
        const VirtualStop vs = vstops_.front();
        vstops_.erase(vstops_.begin());
        if (stop_infusion(vs.id) && G) stop_jump(vs.seq, vs.cmt, vs.rate, vs.moves_with_lag);
      }
    }
  }
  double x_time_ = 0.0;

  // Derivatives of the steady state xs of dose e (original coordinates) into tmp2_ for every
  // state direction. `pr` is the propagator of its parameters.
  void steady_state_derivative(const Event& e, const Vec<N>& xs) {
    const ModelInfo& m = *impl_->model;
    for (int k = 0; k < ps_; ++k) tmp2_[k].setZero();
    if (!xs.allFinite()) {
      for (int k = 0; k < ps_; ++k) tmp2_[k].setConstant(kNaN);
      return;
    }
    const DatasetRecord& rec = (*recs_)[static_cast<std::size_t>(e.seq)];
    const int f_col = m.f_parameter[static_cast<std::size_t>(e.cmt)];
    const int kf = free_in(e.seq, f_col) ? dir_of_[static_cast<std::size_t>(f_col)] : -1;
    const Mat<N>& a = prop_.a();
    if (e.ii == 0.0) {  // constant infusion: A xs + r = 0, dxs = -A^-1 dA xs
      const auto lu = a.fullPivLu();
      for (int k = 0; k < pa_; ++k) tmp2_[k] = -lu.solve(Vec<N>(da_[k] * xs));
      return;
    }
    Mat<N> kii, gii;
    prop_.step(e.ii, kii, gii);
    const Square i_minus_k = Square::Identity() - kii;
    const auto lu = i_minus_k.fullPivLu();
    const Vec<N> zero = Vec<N>::Zero();
    if (e.rate <= 0.0) {  // bolus: y = (I - K)^-1 b, xs = K y
      Vec<N> b = Vec<N>::Zero();
      b(e.cmt) = e.amount;
      const Vec<N> y = lu.solve(b);
      frechet(e.ii, y, zero);  // dK y
      for (int k = 0; k < ps_; ++k) {
        Vec<N> rhs = k < pa_ ? tmp_[k] : zero;
        if (k == kf) rhs(e.cmt) += rec.amt;
        const Vec<N> dy = lu.solve(rhs);
        tmp2_[k] = (k < pa_ ? tmp_[k] : zero) + kii * dy;
      }
      return;
    }
    // Infusion of duration D: xs = sum_{k<k0} G(k ii) r + K(k0 ii - D) y, y = (I-K)^-1 G(D) r.
    Vec<N> r = Vec<N>::Zero();
    r(e.cmt) = e.rate;
    const double dur = e.duration;
    const double d_dur = rec.amt / e.rate;  // dD/dF
    const std::int64_t k0 = detail::steady_state_k0(dur, e.ii);
    for (std::int64_t q = 1; q < k0; ++q) {
      frechet(static_cast<double>(q) * e.ii, zero, r);
      for (int k = 0; k < pa_; ++k) tmp2_[k] += tmp_[k];
    }
    Mat<N> kd, gd, kt, gt;
    prop_.step(dur, kd, gd);
    const double tau2 = static_cast<double>(k0) * e.ii - dur;
    prop_.step(tau2, kt, gt);
    const Vec<N> y = lu.solve(Vec<N>(gd * r));
    // dy = (I - K)^-1 (dK(ii) y + dG(D) r + K(D) r dD)
    frechet(e.ii, y, zero);
    for (int k = 0; k < pa_; ++k) dy_[k] = tmp_[k];
    frechet(dur, zero, r);
    for (int k = 0; k < pa_; ++k) dy_[k] += tmp_[k];
    for (int k = pa_; k < ps_; ++k) dy_[k].setZero();
    if (kf >= 0) dy_[kf] += kd * r * d_dur;
    for (int k = 0; k < ps_; ++k) dy_[k] = lu.solve(dy_[k]);
    // dxs += dK(tau2) y + K(tau2) dy - A K(tau2) y dD
    frechet(tau2, y, zero);
    for (int k = 0; k < ps_; ++k) {
      if (k < pa_) tmp2_[k] += tmp_[k];
      tmp2_[k] += kt * dy_[k];
    }
    if (kf >= 0) tmp2_[kf] -= a * (kt * y) * d_dur;
  }

  template <bool G>
  void simulate(const Prepared& impl, std::int64_t s, const double* params, double* out,
                double* jac) {
    prepare_subject(impl, s, params);
    const ModelInfo& m = *impl.model;
    const std::vector<DatasetRecord>& recs = *recs_;
    const std::size_t np = static_cast<std::size_t>(np_);
    if (G) {
      setup_directions(params);
      std::fill(jac, jac + static_cast<std::size_t>(plan_->obs_count) * np, 0.0);
    }
    std::int64_t next_id = plan_->infusion_ids;
    x_time_ = ev_.empty() ? 0.0 : ev_.front().time;
    Mat<N> k, g;
    std::int64_t cancel_below = -1;
    Vec<N> xdot_before = Vec<N>::Zero();
    Mat<N> a_jump = Mat<N>::Zero();
    for (const Event& e : ev_) {
      if (e.time > plan_->last_obs) break;  // nothing after the last observation is reported
      advance_to<G>(e.time, k, g);
      switch (e.kind) {
        case kStop:
          if (stop_infusion(e.id) && G) stop_jump(e.seq, e.cmt, e.rate);
          break;
        case kReset:
          x_.setZero();
          running_.clear();
          cancel_below = std::max(cancel_below, e.seq);
          vstops_.clear();
          if (G)
            for (int q = 0; q < ps_; ++q) s_[q].setZero();
          break;
        case kSteady: {
          if (e.ss == 1) cancel_below = std::max(cancel_below, e.seq);
          // The SS record's own parameter values (not those of other records at its time).
          Propagator<N>& pr = use<G>(e.seq);
          const double lag = p(e.seq)[m.lag_parameter[static_cast<std::size_t>(e.cmt)]];
          if (G && e.ss == 2)
            for (int q = 0; q < ps_; ++q) saved_[q] = s_[q];
          runs_.clear();
          Vec<N> r_before;
          Vec<N> xs;
          if (G) {
            SteadyHooks hooks{*this};
            xs = detail::record_steady_state(pr, e, lag, runs_, r_before, hooks);
            // The phase ii - lag moves back as the lag grows: d xs / d lag = -(A xs + r).
            const int lag_col = m.lag_parameter[static_cast<std::size_t>(e.cmt)];
            const int kl =
                free_in(e.seq, lag_col) ? dir_of_[static_cast<std::size_t>(lag_col)] : -1;
            if (kl >= 0 && e.ii > 0.0 && lag < e.ii)
              add_to(kl, Vec<N>(-(pr.a() * xs + r_before)), 1.0);
            if (e.ss == 2)
              for (int q = 0; q < ps_; ++q) s_[q] += saved_[q];
          } else {
            detail::NoSteadyStateHooks<N> hooks;
            xs = detail::record_steady_state(pr, e, lag, runs_, r_before, hooks);
          }
          if (e.ss == 1) {
            x_ = xs;
            running_.clear();
            vstops_.clear();
          } else {
            x_ += xs;
          }
          for (const auto& run : runs_) {
            const std::int64_t id = next_id++;
            running_.push_back({id, e.cmt, run.first});
            VirtualStop vs{run.second, id, e.cmt, run.first, e.seq, e.ii > 0.0 && lag < e.ii};
            auto it = vstops_.begin();
            while (it != vstops_.end() &&
                   (it->time < vs.time || (it->time == vs.time && it->id < vs.id)))
              ++it;
            vstops_.insert(it, vs);
          }
          break;
        }
        case kDose: {
          if (e.seq < cancel_below) break;  // cancelled by a later reset or SS=1 record
          const int lag_col = m.lag_parameter[static_cast<std::size_t>(e.cmt)];
          const int f_col = m.f_parameter[static_cast<std::size_t>(e.cmt)];
          int kl = -1, kf = -1;
          if (G) {
            // The A of the interval ending here (also the steady state's parameters).
            use<G>(governing(e.time));
            kl = free_in(e.seq, lag_col) ? dir_of_[static_cast<std::size_t>(lag_col)] : -1;
            kf = free_in(e.seq, f_col) ? dir_of_[static_cast<std::size_t>(f_col)] : -1;
            if (kl >= 0) {
              jump_matrix(e.time, a_jump);
              xdot_before = a_jump * x_ + rates();
            }
          }
          if (e.rate > 0.0) {
            if (e.amount > 0.0) running_.push_back({e.id, e.cmt, e.rate});
          } else {
            x_(e.cmt) += e.amount;
            if (G && kf >= 0) add_unit(kf, e.cmt, recs[static_cast<std::size_t>(e.seq)].amt);
          }
          if (G && kl >= 0) {
            // s += xdot- - xdot+ (d tau / d lag = 1).
            const Vec<N> jump = xdot_before - (a_jump * x_ + rates());
            add_to(kl, jump, 1.0);
          }
          break;
        }
        case kObserve: {
          const DatasetRecord& rec = recs[static_cast<std::size_t>(e.seq)];
          const double* pr = p(e.seq);
          const int cmt = rec.cmt > 0 ? rec.cmt - 1 : m.default_observation_compartment;
          const int vcol = m.volume_parameter[static_cast<std::size_t>(cmt)];
          const double v = pr[vcol];
          const double c = x_(cmt) / v;
          out[e.row] = c;
          if (G) {
            double* jr = jac + static_cast<std::size_t>(e.row) * np;
            for (int q = 0; q < ps_; ++q) {
              const double sc = basis_fast_ ? prop_.v().row(cmt).dot(s_[q]) : s_[q](cmt);
              jr[dir_col_[static_cast<std::size_t>(q)]] = sc / v;
            }
            const int kv = dir_of_[static_cast<std::size_t>(vcol)];
            if (kv >= 0 && free_in(e.seq, vcol)) jr[vcol] -= c / v;
          }
          break;
        }
        case kBoundary:
          break;
      }
    }
  }
};

std::unique_ptr<SolverBase> make_solver(const Prepared& impl) {
  switch (impl.n) {
    case 1:
      return std::make_unique<Solver<1>>(impl);
    case 2:
      return std::make_unique<Solver<2>>(impl);
    case 3:
      return std::make_unique<Solver<3>>(impl);
    case 4:
      return std::make_unique<Solver<4>>(impl);
    case 5:
      return std::make_unique<Solver<5>>(impl);
    default:
      return std::make_unique<Solver<6>>(impl);
  }
}

}  // namespace

// ---- Workspace. ----

struct Predictor::Impl : Prepared {};

struct Predictor::Workspace::State {
  explicit State(const Prepared& impl)
      : owner(&impl),
        solver(make_solver(impl)),
        pred(impl.max_obs),
        jac(impl.max_obs * static_cast<std::size_t>(impl.np)) {}
  const Prepared* owner;
  std::unique_ptr<SolverBase> solver;
  std::vector<double> pred, jac;  // log_likelihood's predictions and Jacobian
};

Predictor::Workspace::Workspace(std::unique_ptr<State> state) : state_(std::move(state)) {}
Predictor::Workspace::~Workspace() = default;

// ---- Predictor. ----

Predictor::Predictor(Dataset data, std::shared_ptr<const ModelInfo> model)
    : impl_(std::make_unique<Impl>()) {
  if (!model) throw_invalid("Predictor: the model is null");
  impl_->data = std::move(data);
  impl_->model = std::move(model);
  impl_->prepare();
}

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

const ModelInfo& Predictor::model() const noexcept { return *impl_->model; }
const Dataset& Predictor::dataset() const noexcept { return impl_->data; }
std::int64_t Predictor::subjects() const noexcept {
  return static_cast<std::int64_t>(impl_->plans.size());
}
int Predictor::parameters() const noexcept { return impl_->np; }
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
  ws.state_->solver->run(*impl_, s, params, out, nullptr);
}

void Predictor::predict_gradient(std::int64_t s, const double* params, double* out,
                                 double* jacobian, Workspace& ws) const {
  impl_->check_subject(s);
  check_call(*impl_, ws.state_->owner, params, "predict_gradient");
  if ((out == nullptr || jacobian == nullptr) && observations(s) > 0)
    throw_invalid("Predictor::predict_gradient: out or jacobian is null");
  ws.state_->solver->run(*impl_, s, params, out, jacobian);
}

namespace {
void check_error_model(const ErrorModel& error, const double* sigma) {
  if (sigma == nullptr) throw_invalid("Predictor::log_likelihood: sigma is null");
  if (error.log_scale && error.kind != ErrorModelKind::Additive)
    throw_invalid(
        "Predictor::log_likelihood: error model on the log scale is proportional or combined, but "
        "must be additive (log(DV) = log(IPRED) + eps, sd = sigma_add)");
  for (int i = 0; i < error.parameter_count(); ++i)
    if (!(std::isfinite(sigma[i]) && sigma[i] > 0.0))
      throw_domain(
          "Predictor::log_likelihood: " + error.parameter_names()[static_cast<std::size_t>(i)] +
          " is " + format_value(sigma[i]) + ", but must be finite and > 0");
}
}  // namespace

double Predictor::log_likelihood(std::int64_t s, const double* params, const ErrorModel& error,
                                 const double* sigma, double* gradient, double* sigma_gradient,
                                 Workspace& ws) const {
  impl_->check_subject(s);
  check_call(*impl_, ws.state_->owner, params, "log_likelihood");
  check_error_model(error, sigma);
  const SubjectPlan& plan = impl_->plans[static_cast<std::size_t>(s)];
  const std::size_t np = static_cast<std::size_t>(impl_->np);
  double* pred = ws.state_->pred.data();
  double* jac = ws.state_->jac.data();
  ws.state_->solver->run(*impl_, s, params, pred, gradient != nullptr ? jac : nullptr);
  constexpr double kHalfLog2Pi = 0.91893853320467274178;
  const int ns = error.parameter_count();
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
      if (!(dv > 0.0) || !(f > 0.0)) {
        const DatasetSubject& sub = impl_->data.subjects[static_cast<std::size_t>(s)];
        throw_domain("Predictor::log_likelihood: " + impl_->data.file + ":" +
                     std::to_string(plan.ll_line[i]) + ": ID \"" + sub.id + "\" (subject " +
                     std::to_string(s + 1) + "): " + (dv > 0.0 ? "the prediction" : "DV") + " is " +
                     format_value(dv > 0.0 ? f : dv) + ", but must be > 0 on the log scale");
      }
      const double res = std::log(dv) - std::log(f);
      ll += -kHalfLog2Pi - std::log(sa) - std::log(dv) - 0.5 * res * res / (sa * sa);
      dll_df = res / (sa * sa) / f;
      dll_dsa = -1.0 / sa + res * res / (sa * sa * sa);
    } else {
      const double res = dv - f;
      const double af = std::fabs(f);
      const double sd = error.kind == ErrorModelKind::Additive       ? sa
                        : error.kind == ErrorModelKind::Proportional ? sp * af
                                                                     : std::hypot(sa, sp * f);
      if (!(sd > 0.0)) {  // proportional error at a prediction of 0: no density
        ll = -std::numeric_limits<double>::infinity();
        if (gradient != nullptr) std::fill(gradient, gradient + np, kNaN);
        if (sigma_gradient != nullptr) std::fill(sigma_gradient, sigma_gradient + ns, kNaN);
        return ll;
      }
      ll += -kHalfLog2Pi - std::log(sd) - 0.5 * res * res / (sd * sd);
      const double dll_dsd = -1.0 / sd + res * res / (sd * sd * sd);
      double dsd_df = 0.0;
      if (error.kind == ErrorModelKind::Proportional) {
        dsd_df = f >= 0.0 ? sp : -sp;
        dll_dsp = dll_dsd * af;
      } else if (error.kind == ErrorModelKind::Combined) {
        dsd_df = sp * sp * f / sd;
        dll_dsa = dll_dsd * sa / sd;
        dll_dsp = dll_dsd * sp * f * f / sd;
      } else {
        dll_dsa = dll_dsd;
      }
      dll_df = res / (sd * sd) + dll_dsd * dsd_df;
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

void Predictor::predict_all(const double* params, double* out, int threads) const {
  if (params == nullptr || (out == nullptr && observations() > 0))
    throw_invalid("Predictor::predict_all: params or out is null");
  const std::size_t np = static_cast<std::size_t>(impl_->np);
  for_subjects(*this, threads, [&](std::int64_t s, Workspace& ws) {
    predict(s, params + static_cast<std::size_t>(s) * np, out + observation_offset(s), ws);
  });
}

void Predictor::predict_gradient_all(const double* params, double* out, double* jacobian,
                                     int threads) const {
  if (params == nullptr || ((out == nullptr || jacobian == nullptr) && observations() > 0))
    throw_invalid("Predictor::predict_gradient_all: params, out or jacobian is null");
  const std::size_t np = static_cast<std::size_t>(impl_->np);
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
  const std::size_t np = static_cast<std::size_t>(impl_->np);
  const std::size_t n = static_cast<std::size_t>(subjects());
  const std::size_t ns = static_cast<std::size_t>(error.parameter_count());
  std::vector<double> lls(n);
  std::vector<double> sg(sigma_gradient != nullptr ? n * ns : 0);
  for_subjects(*this, threads, [&](std::int64_t s, Workspace& ws) {
    const std::size_t i = static_cast<std::size_t>(s);
    lls[i] = log_likelihood(s, params + i * np, error, sigma,
                            gradient != nullptr ? gradient + i * np : nullptr,
                            sigma_gradient != nullptr ? sg.data() + i * ns : nullptr, ws);
  });
  // Sums in subject order: the same bits for any thread count.
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += lls[i];
  if (per_subject != nullptr) std::copy(lls.begin(), lls.end(), per_subject);
  if (sigma_gradient != nullptr) {
    std::fill(sigma_gradient, sigma_gradient + ns, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < ns; ++j) sigma_gradient[j] += sg[i * ns + j];
  }
  return total;
}

}  // namespace pkscan
