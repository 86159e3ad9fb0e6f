// The passes that make a TimeSummary's percentiles exact at any size (summary/refine.hpp):
// TimeSummary::begin_pass, end_pass and the add() of a pass.
#include "summary/refine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/summary.hpp>
#include <type_traits>

#include "core/parallel.hpp"
#include "core/simd.hpp"
#include "core/validate.hpp"
#include "summary/summary_state.hpp"

namespace pkscan {

using namespace detail;

namespace detail {

namespace {

constexpr std::uint64_t kPositive = 0x8000000000000000ull;  // ordered key of +0
constexpr std::int64_t kMinBudget = 1 << 16;                // values a pass may always collect

// Needed ranks of one row with their slots, ascending: (rank, slot).
using Want = std::vector<std::pair<std::int64_t, std::uint32_t>>;

// Appends to `out` the targets of the ranks of `want` that lie in the cell [a, b] holding
// `count` values with `below` ranked before it; `wi` advances past them. A cell of one key
// resolves its ranks at once.
void take_cell(Refinement& f, std::int64_t row, const Want& want, std::size_t& wi, std::uint64_t a,
               std::uint64_t b, std::int64_t below, std::int64_t count,
               std::vector<RefineTarget>& out) {
  if (count <= 0 || wi >= want.size() || want[wi].first >= below + count) return;
  RefineTarget t;
  t.a = a;
  t.b = b;
  t.below = below;
  t.count = count;
  for (; wi < want.size() && want[wi].first < below + count; ++wi)
    t.slots.push_back(want[wi].second);
  if (a == b) {
    for (std::uint32_t s : t.slots)
      f.stat[static_cast<std::size_t>(row) * static_cast<std::size_t>(f.slots_per_row) + s] =
          from_ordered_key(a);
    return;
  }
  // A cell right after the last target (no value between them: x_k and x_{k+1} of a
  // percentile in neighbouring cells) extends it: fewer targets to test each value against.
  if (!out.empty() && out.back().below + out.back().count == below) {
    RefineTarget& last = out.back();
    last.b = b;
    last.count += count;
    last.slots.insert(last.slots.end(), t.slots.begin(), t.slots.end());
    return;
  }
  out.push_back(std::move(t));
}

// Rank-sorted slots of a target.
Want ranks_of(const Refinement& f, const RefineTarget& t) {
  Want w;
  for (std::uint32_t s : t.slots) w.emplace_back(f.rank[s], s);
  std::sort(w.begin(), w.end());
  return w;
}

}  // namespace

std::int64_t Refinement::open() const {
  std::int64_t n = 0;
  for (const auto& row : targets) n += static_cast<std::int64_t>(row.size());
  return n;
}

void plan_pass(Refinement& f) {
  std::vector<RefineTarget*> all;
  for (auto& row : f.targets)
    for (RefineTarget& t : row) all.push_back(&t);
  std::sort(all.begin(), all.end(), [](const RefineTarget* x, const RefineTarget* y) {
    return x->count != y->count ? x->count < y->count : x < y;
  });
  std::int64_t collected = 0;
  // Twice the exact phase's values (freed by now): one further pass for most runs.
  const std::int64_t budget = std::max(2 * f.budget, kMinBudget);
  for (RefineTarget* t : all) {
    t->values.clear();
    if (collected + t->count <= budget) {
      t->shift = -1;
      collected += t->count;
      t->values.reserve(static_cast<std::size_t>(t->count));
      continue;
    }
    // Count in sub-intervals, about 8 values each (at least 256, at most 4096: 16 KiB).
    int sub_bits = 0;  // log2 of the sub-intervals
    while (sub_bits < 12 && (std::int64_t{8} << sub_bits) < t->count) ++sub_bits;
    sub_bits = std::max(sub_bits, 8);
    const int width_bits = 64 - __builtin_clzll(t->b - t->a);  // a < b
    t->shift = std::max(0, width_bits - sub_bits);
  }
  lay_out_pass(f);
}

void lay_out_pass(Refinement& f) {
  const std::size_t rows = f.targets.size();
  for (auto& row : f.targets)
    for (RefineTarget& t : row) {
      t.seen = 0;
      t.lo_seen = ~0ull;
      t.hi_seen = 0;
      if (t.shift >= 0)
        t.hist.assign(static_cast<std::size_t>(((t.b - t.a) >> t.shift) + 1), 0);
      else
        t.hist.clear();
      t.values.clear();
    }
  f.flat.clear();
  f.lo.clear();
  f.width.clear();
  f.row_first.assign(rows + 1, 0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (RefineTarget& t : f.targets[r]) {
      f.flat.push_back(&t);
      f.lo.push_back(t.a);
      f.width.push_back(t.b - t.a);
    }
    f.row_first[r + 1] = static_cast<std::uint32_t>(f.flat.size());
  }
  // The same bounds by slot: slot j of every row, rows contiguous, padded with [0, 0].
  f.per_row = 0;
  for (std::size_t r = 0; r < rows; ++r)
    f.per_row = std::max(f.per_row, static_cast<int>(f.row_first[r + 1] - f.row_first[r]));
  f.lo_by_slot.assign(rows * static_cast<std::size_t>(f.per_row), 0);
  f.width_by_slot.assign(rows * static_cast<std::size_t>(f.per_row), 0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::uint32_t k = f.row_first[r]; k < f.row_first[r + 1]; ++k) {
      const std::size_t at = (k - f.row_first[r]) * rows + r;
      f.lo_by_slot[at] = static_cast<std::uint32_t>(f.lo[k] >> 32);
      f.width_by_slot[at] =
          static_cast<std::uint32_t>((f.lo[k] + f.width[k]) >> 32) - f.lo_by_slot[at];
    }
  f.subjects = 0;
  f.included = 0;
}

bool close_pass(Refinement& f, int threads) {
  const auto P2 = static_cast<std::size_t>(f.slots_per_row);
  const auto rows = static_cast<std::int64_t>(f.targets.size());
  bool same = true;            // every target saw the count of the pass before
  static_cast<void>(threads);  // read by the OpenMP pragma only
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16) reduction(&& : same)
  for (std::int64_t ri = 0; ri < rows; ++ri) {
    const auto r = static_cast<std::size_t>(ri);
    std::vector<RefineTarget> next;
    double* stat = f.stat.data() + r * P2;
    for (RefineTarget& t : f.targets[r]) {
      if (t.seen != t.count) {
        same = false;
        break;
      }
      if (t.lo_seen == t.hi_seen) {  // all equal
        for (std::uint32_t s : t.slots) stat[s] = from_ordered_key(t.lo_seen);
        continue;
      }
      if (t.shift < 0) {  // the needed order statistics of the values, in rank order
        auto from = t.values.begin();
        for (const auto& [rank, s] : ranks_of(f, t)) {
          const auto at = t.values.begin() + static_cast<std::ptrdiff_t>(rank - t.below);
          std::nth_element(from, at, t.values.end());
          stat[s] = *at;
          from = at;
        }
        continue;
      }
      // Locate each rank in its sub-interval, narrowed to the keys seen.
      const Want want = ranks_of(f, t);
      std::size_t wi = 0;
      std::int64_t below = t.below;
      for (std::size_t j = 0; j < t.hist.size() && wi < want.size(); ++j) {
        const auto c = static_cast<std::int64_t>(t.hist[j]);
        const std::uint64_t a = t.a + (static_cast<std::uint64_t>(j) << t.shift);
        const std::uint64_t b = std::min(t.b, a + ((std::uint64_t{1} << t.shift) - 1));
        take_cell(f, static_cast<std::int64_t>(r), want, wi, std::max(a, t.lo_seen),
                  std::min(b, t.hi_seen), below, c, next);
        below += c;
      }
    }
    if (same) f.targets[r] = std::move(next);
  }
  return same;
}

}  // namespace detail

namespace {

// Whether every value of a subject (R = times x compartments, compartment fastest), times its
// inverse volume with Scale, is finite: the value add() computes (value_at), without its
// division per value.
template <class Real>
PKSCAN_INLINE bool all_within_body(const Real* x, std::int64_t n, double bound) {
  bool ok = true;
  for (std::int64_t i = 0; i < n; ++i) ok &= std::fabs(static_cast<double>(x[i])) <= bound;
  return ok;
}
PKSCAN_CLONES bool all_within(const double* x, std::int64_t n, double bound) {
  return all_within_body(x, n, bound);
}
PKSCAN_CLONES bool all_within(const float* x, std::int64_t n, double bound) {
  return all_within_body(x, n, bound);
}

template <class Real, bool Scale>
bool all_finite(const Real* x, std::int64_t R, int C, const double* iv) {
  // At once when every |x| is small enough for no product to overflow (the product of values
  // <= bound and factors <= m stays <= max), else value by value.
  constexpr double kMax = std::numeric_limits<double>::max();
  double m = 1.0;
  if (Scale)
    for (int c = 0; c < C; ++c) m = std::max(m, std::fabs(iv[c]));
  if (m <= kMax && all_within(x, R, (kMax / m) * (1.0 - 0x1p-50))) return true;
  bool ok = true;
  for (std::int64_t r0 = 0; r0 < R; r0 += C)
    for (int c = 0; c < C; ++c) {
      double v = static_cast<double>(x[r0 + c]);
      if (Scale) v = v * iv[c];
      ok &= std::fabs(v) <= std::numeric_limits<double>::max();  // false for NaN and inf
    }
  return ok;
}

// hit[i] = 1 when key[i] (the upper half of an ordered key) lies in one of the row's targets'
// upper halves: bounds j of row r0 + i are lo[j * rows + r0 + i] and width[...].
PKSCAN_CLONES void mark_hits(const std::uint32_t* key, std::int64_t n, const std::uint32_t* lo,
                             const std::uint32_t* width, int per_row, std::int64_t rows,
                             unsigned char* hit) {
  for (std::int64_t i = 0; i < n; ++i) hit[i] = 0;
  for (int j = 0; j < per_row; ++j) {
    const std::uint32_t* a = lo + j * rows;
    const std::uint32_t* w = width + j * rows;
    for (std::int64_t i = 0; i < n; ++i)
      hit[i] |= static_cast<unsigned char>(key[i] - a[i] <= w[i]);
  }
}

// The value of x (times its inverse volume with Scale), as add() computes it.
template <class Real, bool Scale>
PKSCAN_INLINE double value_of(Real x, double iv) {
  const double y = static_cast<double>(x);
  return Scale ? y * iv : y;
}

// The upper halves of the values' ordered keys.
template <class Real, bool Scale>
PKSCAN_INLINE void keys_body(const Real* x, const double* ivr, std::int64_t n, std::uint32_t* key) {
  for (std::int64_t i = 0; i < n; ++i) {
    key[i] = static_cast<std::uint32_t>(ordered_key(value_of<Real, Scale>(x[i], ivr[i])) >> 32);
  }
}
PKSCAN_CLONES void keys_f64(const double* x, const double* ivr, std::int64_t n, std::uint32_t* k) {
  keys_body<double, false>(x, ivr, n, k);
}
PKSCAN_CLONES void keys_f64_scaled(const double* x, const double* ivr, std::int64_t n,
                                   std::uint32_t* k) {
  keys_body<double, true>(x, ivr, n, k);
}
PKSCAN_CLONES void keys_f32(const float* x, const double* ivr, std::int64_t n, std::uint32_t* k) {
  keys_body<float, false>(x, ivr, n, k);
}
PKSCAN_CLONES void keys_f32_scaled(const float* x, const double* ivr, std::int64_t n,
                                   std::uint32_t* k) {
  keys_body<float, true>(x, ivr, n, k);
}
template <class Real, bool Scale>
void keys_of(const Real* x, const double* ivr, std::int64_t n, std::uint32_t* k) {
  if constexpr (std::is_same_v<Real, double>)
    (Scale ? keys_f64_scaled : keys_f64)(x, ivr, n, k);
  else
    (Scale ? keys_f32_scaled : keys_f32)(x, ivr, n, k);
}

// The values of rows [r0, r1) (whole output times) of the included subjects into the rows'
// targets: subject by subject, every value's key tested against its row's few targets at once
// (most values lie in none), then the hits placed.
template <class Real, bool Scale>
void refine_rows(Refinement& f, const Source& src, const Real* data, const unsigned char* inc,
                 const double* inv, std::int64_t S, std::int64_t r0, std::int64_t r1) {
  const std::int64_t R = src.per_subject, L = r1 - r0;
  const int C = src.compartments;
  if (L <= 0) return;
  const auto rows = static_cast<std::int64_t>(f.targets.size());
  const std::uint32_t* lo = f.lo_by_slot.data() + r0;
  const std::uint32_t* width = f.width_by_slot.data() + r0;
  std::vector<double> ivr(static_cast<std::size_t>(L), 1.0);
  std::vector<std::uint32_t> key(static_cast<std::size_t>(L));
  std::vector<unsigned char> hit(static_cast<std::size_t>(L));
  for (std::int64_t s = 0; s < S; ++s) {
    if (!inc[s]) continue;
    if (Scale) {  // r0 is a whole output time: row r0 + i is compartment i % C
      std::copy_n(inv + s * C, std::min<std::int64_t>(C, L), ivr.data());
      for (std::int64_t have = C; have < L; have *= 2)  // the pattern, doubled
        std::copy_n(ivr.data(), std::min(have, L - have), ivr.data() + have);
    }
    const Real* x = data + s * R + r0;
    keys_of<Real, Scale>(x, ivr.data(), L, key.data());
    mark_hits(key.data(), L, lo, width, f.per_row, rows, hit.data());
    // A candidate: its exact key in one of its row's targets, or in none.
    const auto place = [&](std::int64_t i) {
      const double v = value_of<Real, Scale>(x[i], ivr[static_cast<std::size_t>(i)]);
      const std::uint64_t o = ordered_key(v);
      const std::uint32_t end = f.row_first[static_cast<std::size_t>(r0 + i + 1)];
      std::uint32_t k = f.row_first[static_cast<std::size_t>(r0 + i)];
      while (k < end && o - f.lo[k] > f.width[k]) ++k;
      if (k == end) return;
      RefineTarget& t = *f.flat[k];
      ++t.seen;
      t.lo_seen = std::min(t.lo_seen, o);
      t.hi_seen = std::max(t.hi_seen, o);
      if (t.shift < 0)
        t.values.push_back(v);
      else
        ++t.hist[static_cast<std::size_t>((o - t.a) >> t.shift)];
    };
    // The hits, eight flags a word: each word's set bytes in turn.
    std::int64_t i = 0;
    for (; i + 8 <= L; i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, hit.data() + i, sizeof w);
      for (; w != 0; w &= w - 1) place(i + __builtin_ctzll(w) / 8);
    }
    for (; i < L; ++i)
      if (hit[static_cast<std::size_t>(i)]) place(i);
  }
}

}  // namespace

bool TimeSummary::needs_pass() const noexcept {
  const Impl& m = *impl_;
  if (m.exact || m.opt.percentiles.empty() || m.included == 0) return false;
  return !m.refine || (!m.refine->complete && !m.refine->failed);
}

bool TimeSummary::in_pass() const noexcept { return impl_->refine && impl_->refine->active; }

int TimeSummary::passes() const noexcept { return impl_->refine ? impl_->refine->passes : 0; }

bool TimeSummary::begin_pass() {
  Impl& m = *impl_;
  if (in_pass())
    throw InvalidArgument("TimeSummary::begin_pass: a pass is already open (call end_pass)");
  if (!needs_pass()) return false;
  if (!m.refine) {
    // The first pass: every needed order statistic's cell of the merged sketch.
    auto f = std::make_unique<Refinement>();
    const std::size_t P = m.opt.percentiles.size();
    f->slots_per_row = static_cast<int>(2 * P);
    f->rank.resize(2 * P);
    for (std::size_t p = 0; p < P; ++p) {
      double g = 0.0;
      rank_of(m.included, m.opt.percentiles[p], f->rank[2 * p], g);
      f->rank[2 * p + 1] = std::min(f->rank[2 * p] + 1, m.included - 1);
    }
    f->stat.assign(static_cast<std::size_t>(m.rows) * 2 * P, 0.0);
    f->targets.resize(static_cast<std::size_t>(m.rows));
    f->budget = m.opt.exact_values;
    const std::vector<const Sketch*> sketches = m.sketches();
    Want want;
    for (std::size_t s = 0; s < 2 * P; ++s) want.emplace_back(f->rank[s], s);
    std::sort(want.begin(), want.end());
    // Rows are independent (a row's targets and order statistics only).
    const int nt = resolve_threads(m.opt.threads);
    static_cast<void>(nt);  // read by the OpenMP pragma only
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
    for (std::int64_t r = 0; r < m.rows; ++r) {
      const MergedRow mr = merge_row(sketches, r);
      auto& out = f->targets[static_cast<std::size_t>(r)];
      std::size_t wi = 0;
      std::int64_t below = 0;
      const auto zero = static_cast<std::int64_t>(mr.zero);
      take_cell(*f, r, want, wi, ordered_key(-kDblMax), kPositive, below, zero, out);
      below += zero;
      const auto under = static_cast<std::int64_t>(mr.under);
      if (mr.lo > 0)
        take_cell(*f, r, want, wi, kPositive + 1,
                  kPositive | ((static_cast<std::uint64_t>(mr.lo) << kKeyShift) - 1), below, under,
                  out);
      below += under;
      // The values of one time span a few binades at the top of the window: the lowest key
      // needed is found walking down from the top (the window's count is the rest of the
      // included values), and the cells are taken upwards from there.
      const std::int64_t bottom = std::max<std::int64_t>(mr.lo, 0);
      std::int64_t start = bottom;
      if (wi < want.size() && mr.mx >= bottom) {
        std::int64_t above = 0;
        const std::int64_t in_window = m.included - below;
        for (std::int64_t key = mr.mx; key > bottom; --key) {
          above += static_cast<std::int64_t>(merged_count(sketches, r, key));
          if (below + in_window - above <= want[wi].first) {
            start = key;
            below += in_window - above;
            break;
          }
        }
      }
      for (std::int64_t key = start; key <= mr.mx && wi < want.size(); ++key) {
        const auto c = static_cast<std::int64_t>(merged_count(sketches, r, key));
        if (!c) continue;
        const std::uint64_t a = kPositive | (static_cast<std::uint64_t>(key) << kKeyShift);
        take_cell(*f, r, want, wi, a, a + ((std::uint64_t{1} << kKeyShift) - 1), below, c, out);
        below += c;
      }
    }
    m.refine = std::move(f);
    if (m.refine->open() == 0) {
      m.refine->complete = true;
      return false;
    }
  }
  plan_pass(*m.refine);
  m.refine->active = true;
  ++m.refine->passes;
  return true;
}

void TimeSummary::end_pass() {
  Impl& m = *impl_;
  if (!in_pass()) throw InvalidArgument("TimeSummary::end_pass: no pass is open (begin_pass)");
  Refinement& f = *m.refine;
  f.active = false;
  if (f.subjects != m.subjects || f.included != m.included)
    throw InvalidArgument("TimeSummary::end_pass: the pass added " + std::to_string(f.subjects) +
                          " subjects (" + std::to_string(f.included) + " included), the summary " +
                          std::to_string(m.subjects) + " (" + std::to_string(m.included) +
                          "): a pass adds the same subjects again");
  if (!close_pass(f, resolve_threads(m.opt.threads))) {
    f.failed = true;  // other values than the first pass's: the estimates stay
    f.targets.clear();
    return;
  }
  if (f.open() == 0) f.complete = true;
}

// add() within a pass: the chunk's included subjects' values into the targets.
void TimeSummary::add_to_pass(const SimulationResult& chunk) {
  Impl& m = *impl_;
  Refinement& f = *m.refine;
  const Source src = source_of(chunk);
  const std::int64_t S = chunk.subjects();
  const int C = m.compartments;
  std::vector<unsigned char> inc(static_cast<std::size_t>(S), 0);
  std::vector<double> inv(static_cast<std::size_t>(S * C), 1.0);
  const std::int64_t T = static_cast<std::int64_t>(m.times.size());
  const int threads = static_cast<int>(std::min<std::int64_t>(resolve_threads(m.opt.threads), T));
  detail::RegionError error;
  // One parallel region per chunk: the subjects' inclusion, then each thread's own contiguous
  // range of output times (no target is shared).
#pragma omp parallel num_threads(threads)
  {
    // Included: status Ok and every concentration finite (as add() decides).
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < S; ++s) {
      for (int c = 0; c < C; ++c)
        inv[static_cast<std::size_t>(s * C + c)] = inverse_volume(src, s, c);
      const double* iv = inv.data() + s * C;
      bool ok = chunk.status()[static_cast<std::size_t>(s)] == SubjectStatus::Ok;
      if (ok)
        ok = src.f64 ? (src.scale ? all_finite<double, true>(src.f64 + s * m.rows, m.rows, C, iv)
                                  : all_finite<double, false>(src.f64 + s * m.rows, m.rows, C, iv))
                     : (src.scale ? all_finite<float, true>(src.f32 + s * m.rows, m.rows, C, iv)
                                  : all_finite<float, false>(src.f32 + s * m.rows, m.rows, C, iv));
      inc[static_cast<std::size_t>(s)] = ok ? 1 : 0;
    }
    int tid = 0, n = 1;
#if defined(_OPENMP)
    tid = omp_get_thread_num();
    n = omp_get_num_threads();
#endif
    const std::int64_t r0 = T * tid / n * C, r1 = T * (tid + 1) / n * C;
    error.guard([&] {
      if (src.f64)
        (src.scale ? refine_rows<double, true> : refine_rows<double, false>)(f, src, src.f64,
                                                                             inc.data(), inv.data(),
                                                                             S, r0, r1);
      else
        (src.scale ? refine_rows<float, true>
                   : refine_rows<float, false>)(f, src, src.f32, inc.data(), inv.data(), S, r0, r1);
    });
  }
  error.rethrow();
  f.subjects += S;
  for (unsigned char v : inc) f.included += v;
}

}  // namespace pkscan
