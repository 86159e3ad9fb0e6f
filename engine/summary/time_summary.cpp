// TimeSummary: the streaming per-time means and percentiles of population runs, fed with
// simulated chunks (add) and read out by finish(). The numeric contract of the sums, the sketch
// and the metrics is stated in summary/summary_state.hpp. The threads of add() own disjoint
// ranges of output times, so no counter or sum is shared.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/summary.hpp>

#include "core/block.hpp"
#include "core/parallel.hpp"
#include "core/validate.hpp"
#include "summary/summary_state.hpp"

namespace pkscan {

using namespace detail;

namespace {

constexpr std::int64_t kUnit = 64;             // output indices per thread unit and metric block
constexpr std::int64_t kSubTile = 8;           // output times per add() sub-tile
constexpr std::int64_t kPrefetchSubjects = 8;  // how far ahead add() prefetches
constexpr int kBatchValues = 1536;             // values per increment batch of add()

// ---- The add() kernel -----------------------------------------------------------------------

struct AddJob {
  const Source* src;
  const unsigned char* inc;  // per subject: included so far
  const double* inv;         // per subject: kSubTile * C reciprocal volumes (Scale only)
  std::int64_t S;
  std::int64_t g0;      // global index of the chunk's first subject
  std::int64_t ta, tb;  // output indices owned by this thread
  double* part;         // 8 lanes of partial sums, lane l at part + l * lane_stride
  std::int64_t lane_stride;
  double* total;
  std::int64_t total_stride;  // 0; rows when capturing (block b's sums at total + b * rows)
  Sketch* h;
  unsigned char* bad;  // per subject: found non-finite (this thread's flags)
};

// For each sub-tile of kSubTile output times (a few dozen rows, whose counters stay in the
// first-level cache), the subjects of the chunk in order, in batches:
//  1. a vector pass adds each value to its row's partial sum and computes the index of its
//     counter, or of a dummy counter when the value needs the slow path (outside the window,
//     <= 0, or not finite);
//  2. a branch-free loop increments the counters;
//  3. the rare slow-path values are then added one by one (the sketch's final state does not
//     depend on the order of the values, see Sketch).
// Each line of the chunk is read once, prefetched a few subjects ahead (consecutive subjects
// are a whole row apart, too far for the hardware prefetcher).
template <class Real, bool Scale>
PKSCAN_INLINE void add_body(const AddJob& a, const Real* data) {
  Sketch& h = *a.h;
  const int C = a.src->compartments;
  const std::int64_t R = a.src->per_subject;
  const int wmax = static_cast<int>(kSubTile) * C;
  const int batch = std::max(1, kBatchValues / wmax);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(batch * wmax));
  std::vector<double> values(static_cast<std::size_t>(batch * wmax));
  std::vector<std::int64_t> who(static_cast<std::size_t>(batch));
  std::vector<std::int64_t> rowoff(static_cast<std::size_t>(wmax));
  const std::int64_t dummy = h.dummy;
  const v8i mask = v8i{} + h.mask;
  const std::int64_t top = h.width - 1;
  for (std::int64_t t0 = a.ta; t0 < a.tb; t0 += kSubTile) {
    const std::int64_t t1 = std::min(t0 + kSubTile, a.tb);
    const int w = static_cast<int>((t1 - t0) * C);
    const int wv = w / 8 * 8;  // values on the vector path per subject
    const std::int64_t r0 = t0 * C;
    for (int j = 0; j < w; ++j) rowoff[static_cast<std::size_t>(j)] = (r0 + j) * h.stride;
    const int last_byte = w * static_cast<int>(sizeof(Real)) - 1;
    for (std::int64_t s0 = 0; s0 < a.S; s0 += batch) {
      const std::int64_t s1 = std::min(a.S, s0 + batch);
      int n = 0;     // values in slots
      int nsub = 0;  // included subjects in this batch
      v8i slow{};
      for (std::int64_t s = s0; s < s1; ++s) {
        if (s + kPrefetchSubjects < a.S) {
          const char* ahead =
              reinterpret_cast<const char*>(data + (s + kPrefetchSubjects) * R + r0);
          for (int byte = 0; byte < last_byte; byte += 64) __builtin_prefetch(ahead + byte);
          __builtin_prefetch(ahead + last_byte);
        }
        if (a.inc[s]) {
          const Real* x = data + s * R + r0;
          const double* iv = a.inv + s * wmax;
          double* part = a.part + ((a.g0 + s) & 7) * a.lane_stride;
          who[static_cast<std::size_t>(nsub++)] = s;
          for (int j = 0; j < wv; j += 8) {
            v8d v = load8(x + j);
            if (Scale) v = v * load8(iv + j);
            store8(part + r0 + j, load8(part + r0 + j) + v);
            // No 64-bit integer vector comparisons (GCC 12 scalarises them): a value is on the
            // fast path <=> 1 <= bits <= bits(DBL_MAX) and 0 <= idx <= top <=> `out` >= 0.
            const v8i b = vcast<v8i>(v);
            const v8i key = b >> kKeyShift;
            const v8i idx = key - load8(h.lo.data() + r0 + j);
            const v8i out =
                (b - 1) | (static_cast<std::int64_t>(kPosFiniteMax) - b) | idx | (top - idx);
            const v8i m = out >> 63;  // -1 on the slow path
            slow |= m;
            const v8i slot = ((load8(rowoff.data() + j) + (key & mask)) & ~m) | (m & dummy);
            std::memcpy(slots.data() + n, &slot, sizeof slot);
            store8(values.data() + n, v);
            n += 8;
          }
          for (int j = wv; j < w; ++j) {  // the scalar tail (when 8 does not divide w)
            const double v = Scale ? static_cast<double>(x[j]) * iv[j] : static_cast<double>(x[j]);
            part[r0 + j] += v;
            if (!add_one(h, r0 + j, v)) a.bad[s] = 1;
          }
        }
        if ((a.g0 + s + 1) % kSubjectBlock == 0)
          close_block(a.part, a.lane_stride,
                      a.total + ((a.g0 + s) / kSubjectBlock) * a.total_stride, r0, r0 + w);
      }
      for (int i = 0; i < n; ++i) ++h.counts[slots[static_cast<std::size_t>(i)]];
      std::int64_t any = 0;
      for (int l = 0; l < 8; ++l) any |= slow[l];
      if (any && wv > 0)
        for (int i = 0; i < n; ++i)
          if (slots[static_cast<std::size_t>(i)] == dummy &&
              !add_one(h, r0 + i % wv, values[static_cast<std::size_t>(i)]))
            a.bad[who[static_cast<std::size_t>(i / wv)]] = 1;
    }
  }
}

PKSCAN_CLONES void add_f64(const AddJob& a, const double* d) { add_body<double, false>(a, d); }
PKSCAN_CLONES void add_f64_scaled(const AddJob& a, const double* d) {
  add_body<double, true>(a, d);
}
PKSCAN_CLONES void add_f32(const AddJob& a, const float* d) { add_body<float, false>(a, d); }
PKSCAN_CLONES void add_f32_scaled(const AddJob& a, const float* d) { add_body<float, true>(a, d); }

}  // namespace

double sorted_percentile(const std::vector<double>& sorted, double p) noexcept {
  const auto n = static_cast<std::int64_t>(sorted.size());
  std::int64_t k = 0;
  double g = 0.0;
  rank_of(n, p, k, g);
  const double a = sorted[static_cast<std::size_t>(k)];
  const double b = sorted[static_cast<std::size_t>(std::min(k + 1, n - 1))];
  return lerp7(a, b, g);
}

TimeSummary::TimeSummary(std::vector<double> times, int compartments, TimeSummaryOptions options)
    : impl_(std::make_unique<Impl>()) {
  const char* where = "TimeSummary";
  if (times.empty()) detail::throw_invalid(where, "number of output times", "0", ">= 1");
  if (compartments < 1 || compartments > 64)
    detail::throw_invalid(where, "compartments", std::to_string(compartments), "in [1, 64]");
  detail::check_percentiles(where, options.percentiles, false);
  if (options.exact_values < 0)
    detail::throw_invalid(where, "exact_values", std::to_string(options.exact_values), ">= 0");
  if (options.window_binades < 1 || options.window_binades > 1024)
    detail::throw_invalid(where, "window_binades", std::to_string(options.window_binades),
                          "in [1, 1024]");
  if (options.threads < 0)
    detail::throw_invalid(where, "threads", std::to_string(options.threads), ">= 0");
  Impl& m = *impl_;
  m.times = std::move(times);
  m.compartments = compartments;
  m.rows = static_cast<std::int64_t>(m.times.size()) * compartments;
  m.opt = std::move(options);
  const std::size_t R = static_cast<std::size_t>(m.rows);
  m.lane_stride = m.rows + 8;
  m.part.assign(8 * (R + 8), 0.0);
  m.total.assign(R + 8, 0.0);
  init_sketch(m.sk, m.rows, m.opt.window_binades, true);
}

TimeSummary::~TimeSummary() = default;
TimeSummary::TimeSummary(TimeSummary&&) noexcept = default;
TimeSummary& TimeSummary::operator=(TimeSummary&&) noexcept = default;

std::int64_t TimeSummary::subjects() const noexcept { return impl_->subjects; }
std::int64_t TimeSummary::excluded() const noexcept { return impl_->excluded; }
bool TimeSummary::exact() const noexcept {
  return impl_->exact || (impl_->refine && impl_->refine->complete);
}
std::size_t TimeSummary::state_bytes() const noexcept {
  const Impl& m = *impl_;
  const std::size_t per_sketch =
      static_cast<std::size_t>(m.rows) *
      (static_cast<std::size_t>(m.sk.stride) * sizeof(std::uint32_t) + 4 * sizeof(std::int64_t));
  return per_sketch * (1 + m.local.size() + (m.device ? 1 : 0) + (m.device_spare ? 1 : 0)) +
         (m.part.size() + m.total.size() + m.kept.capacity()) * sizeof(double);
}

std::size_t TimeSummary::state_bytes_for(std::int64_t times, int compartments,
                                         const TimeSummaryOptions& options) noexcept {
  const auto rows = static_cast<std::size_t>(times) * static_cast<std::size_t>(compartments);
  std::size_t ring = 1;
  while (ring < static_cast<std::size_t>(options.window_binades) * 128) ring *= 2;
  // As state_bytes(): the counters and four per-row words of one sketch, the lane and block sums.
  return rows * ((ring + 16) * sizeof(std::uint32_t) + 4 * sizeof(std::int64_t)) +
         (8 * (rows + 8) + rows + 8) * sizeof(double);
}

void TimeSummary::add(const SimulationResult& chunk, int metric_compartment, double last_dose_time,
                      double* metrics) {
  if (metric_compartment < 0 || metric_compartment >= impl_->compartments)
    detail::throw_invalid("TimeSummary::add", "metric compartment",
                          std::to_string(metric_compartment),
                          "in [0, " + std::to_string(impl_->compartments) + ")");
  const bool pass = in_pass();  // a pass adds the percentiles' values only
  add(chunk);
  if (!pass)
    subject_metrics(chunk, metric_compartment, last_dose_time, metrics, impl_->opt.threads);
}

void TimeSummary::add(const SimulationResult& chunk) {
  Impl& m = *impl_;
  const char* where = "TimeSummary::add";
  if (chunk.times() != static_cast<std::int64_t>(m.times.size()))
    detail::throw_invalid(where, "chunk output times", std::to_string(chunk.times()),
                          std::to_string(m.times.size()) + " (the summary's)");
  if (chunk.compartments() != m.compartments)
    detail::throw_invalid(where, "chunk compartments", std::to_string(chunk.compartments()),
                          std::to_string(m.compartments) + " (the summary's)");
  for (std::size_t i = 0; i < m.times.size(); ++i)
    if (chunk.output_times()[i] != m.times[i])
      detail::throw_invalid(where, "chunk output time " + std::to_string(i),
                            format_value(chunk.output_times()[i]),
                            format_value(m.times[i]) + " (the summary's)");
  const std::int64_t S = chunk.subjects();
  if (S == 0) return;
  if (in_pass()) {
    add_to_pass(chunk);
    return;
  }
  if (m.subjects + S > static_cast<std::int64_t>(0xFFFFFFFFll))
    detail::throw_domain(where, "number of subjects", std::to_string(m.subjects + S),
                         "<= 4294967295");
  const Source src = source_of(chunk);
  // Every subject's finite values go into the sketch; those of subjects found non-finite (or
  // with a non-Ok status) are taken out again below. So the sketch's window depends on the
  // values of every subject passed, whichever path added them (see the fused kernel).
  std::vector<unsigned char> inc(static_cast<std::size_t>(S), 1);
  // Reciprocal volumes of each subject laid out along one sub-tile's rows.
  std::vector<double> inv;
  const int C = m.compartments;
  if (src.scale) {
    const std::size_t w = static_cast<std::size_t>(kSubTile * C);
    inv.resize(static_cast<std::size_t>(S) * w);
    for (std::int64_t s = 0; s < S; ++s)
      for (std::size_t j = 0; j < w; ++j)
        inv[static_cast<std::size_t>(s) * w + j] =
            inverse_volume(src, s, static_cast<int>(j % static_cast<std::size_t>(C)));
  }
  const std::vector<double> snap_part = m.part;
  const std::vector<double> snap_total = m.total;
  if (m.capture) m.captured.assign(static_cast<std::size_t>(S / kSubjectBlock * m.rows), 0.0);
  double* const total = m.capture ? m.captured.data() : m.total.data();
  const std::int64_t total_stride = m.capture ? m.rows : 0;

  const std::int64_t T = static_cast<std::int64_t>(m.times.size());
  const std::int64_t units = (T + kUnit - 1) / kUnit;
  const int nt = static_cast<int>(std::min<std::int64_t>(resolve_threads(m.opt.threads), units));
  std::vector<unsigned char> bad(static_cast<std::size_t>(nt) * static_cast<std::size_t>(S), 0);
  detail::RegionError error;

  // Each thread owns a contiguous range of output times (whole 64-index units), so every row
  // sees the subjects in order and no counter or sum is shared.
#pragma omp parallel num_threads(nt)
  {
    int tid = 0, n = 1;
#if defined(_OPENMP)
    tid = omp_get_thread_num();
    n = omp_get_num_threads();
#endif
    AddJob a{};
    a.src = &src;
    a.inc = inc.data();
    a.inv = inv.data();
    a.S = S;
    a.g0 = m.subjects;
    a.ta = std::min(T, units * tid / n * kUnit);
    a.tb = std::min(T, units * (tid + 1) / n * kUnit);
    a.part = m.part.data();
    a.lane_stride = m.lane_stride;
    a.total = total;
    a.total_stride = total_stride;
    a.h = &m.sk;
    a.bad = bad.data() + static_cast<std::size_t>(tid) * static_cast<std::size_t>(S);
    error.guard([&] {
      if (src.f64)
        (src.scale ? add_f64_scaled : add_f64)(a, src.f64);
      else
        (src.scale ? add_f32_scaled : add_f32)(a, src.f32);
    });
  }
  error.rethrow();

  bool any_bad = false;
  for (std::int64_t s = 0; s < S; ++s) {
    if (chunk.status()[static_cast<std::size_t>(s)] != SubjectStatus::Ok)
      bad[static_cast<std::size_t>(s)] = 1;
    for (int t = 0; t < nt; ++t)
      if (bad[static_cast<std::size_t>(t) * static_cast<std::size_t>(S) +
              static_cast<std::size_t>(s)]) {
        // Rare: an included subject has a non-finite concentration (amount / volume
        // overflowed). Exclude it: take its values out of the sketch.
        inc[static_cast<std::size_t>(s)] = 0;
        any_bad = true;
        for (std::int64_t r = 0; r < m.rows; ++r) remove_one(m.sk, r, value_at(src, s, r));
        break;
      }
  }
  if (any_bad) {
    // Redo the chunk's sums without the excluded subjects, in the same order.
    m.part = snap_part;
    m.total = snap_total;
    std::fill(m.captured.begin(), m.captured.end(), 0.0);
    for (std::int64_t s = 0; s < S; ++s) {
      double* part = m.part.data() + ((m.subjects + s) & 7) * m.lane_stride;
      if (inc[static_cast<std::size_t>(s)])
        for (std::int64_t r = 0; r < m.rows; ++r) part[r] += value_at(src, s, r);
      if ((m.subjects + s + 1) % kSubjectBlock == 0)
        close_block(m.part.data(), m.lane_stride,
                    total + ((m.subjects + s) / kSubjectBlock) * total_stride, 0, m.rows);
    }
  }

  std::int64_t n_inc = 0;
  for (unsigned char v : inc) n_inc += v;
  m.subjects += S;
  m.included += n_inc;
  m.excluded += S - n_inc;

  if (m.exact) {
    if (static_cast<double>(m.subjects) * static_cast<double>(m.rows) <=
        static_cast<double>(m.opt.exact_values)) {
      const std::size_t at = m.kept.size();
      m.kept.resize(at + static_cast<std::size_t>(n_inc * m.rows));
      double* out = m.kept.data() + at;
      for (std::int64_t s = 0; s < S; ++s) {
        if (!inc[static_cast<std::size_t>(s)]) continue;
        for (std::int64_t r = 0; r < m.rows; ++r) out[r] = value_at(src, s, r);
        out += m.rows;
      }
      m.kept_subjects += n_inc;
    } else {
      m.exact = false;
      std::vector<double>().swap(m.kept);
      m.kept_subjects = 0;
    }
  }
}

TimeSummaryTable TimeSummary::finish() const {
  const Impl& m = *impl_;
  TimeSummaryTable t;
  t.times = m.times;
  t.percentiles = m.opt.percentiles;
  t.compartments = m.compartments;
  t.count = m.included;
  t.excluded = m.excluded;
  const bool refined = m.refine && m.refine->complete;
  t.exact = m.exact || refined;
  const std::size_t R = static_cast<std::size_t>(m.rows);
  const std::size_t P = m.opt.percentiles.size();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  t.mean.assign(R, nan);
  t.quantiles.assign(R * P, nan);
  const std::int64_t n = m.included;
  if (n == 0) return t;
  for (std::size_t r = 0; r < R; ++r)
    t.mean[r] = (m.total[r] + lane_tree(m.part.data() + r, m.lane_stride)) / static_cast<double>(n);
  if (P == 0) return t;
  if (refined) {  // every order statistic found by the passes
    for (std::size_t r = 0; r < R; ++r) {
      const double* x = m.refine->stat.data() + r * 2 * P;
      for (std::size_t p = 0; p < P; ++p) {
        std::int64_t k = 0;
        double g = 0.0;
        rank_of(n, m.opt.percentiles[p], k, g);
        t.quantiles[r * P + p] = k + 1 < n ? lerp7(x[2 * p], x[2 * p + 1], g) : x[2 * p];
      }
    }
    return t;
  }

  // The order statistics needed: k and k + 1 of each percentile.
  std::vector<std::int64_t> ks(P);
  std::vector<double> gs(P);
  for (std::size_t p = 0; p < P; ++p) rank_of(n, m.opt.percentiles[p], ks[p], gs[p]);
  const std::vector<const Sketch*> sketches = m.sketches();
  const int nt = resolve_threads(m.opt.threads);
  static_cast<void>(nt);  // read by the OpenMP pragma only
  detail::RegionError error;
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> v;
    std::vector<std::pair<std::int64_t, std::size_t>> want;  // (rank, slot)
    std::vector<double> got;
    error.guard([&] {
      if (m.exact) v.resize(static_cast<std::size_t>(n));
      want.reserve(2 * P);
      got.resize(2 * P);
    });
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(R); ++r) {
      if (error.failed()) continue;
      double* q = t.quantiles.data() + static_cast<std::size_t>(r) * P;
      if (m.exact) {
        for (std::int64_t s = 0; s < n; ++s)
          v[static_cast<std::size_t>(s)] = m.kept[static_cast<std::size_t>(s * m.rows + r)];
        std::sort(v.begin(), v.end());
        for (std::size_t p = 0; p < P; ++p) {
          const std::int64_t k = ks[p];
          const double a = v[static_cast<std::size_t>(k)];
          q[p] = k + 1 < n ? lerp7(a, v[static_cast<std::size_t>(k + 1)], gs[p]) : a;
        }
        continue;
      }
      // Sketch: walk the zero bucket, the values below the window and the window in order.
      want.clear();
      for (std::size_t p = 0; p < P; ++p) {
        want.emplace_back(ks[p], 2 * p);
        want.emplace_back(std::min(ks[p] + 1, n - 1), 2 * p + 1);
      }
      std::sort(want.begin(), want.end());
      const MergedRow mr = merge_row(sketches, r);
      const std::int64_t lo = mr.lo, mx = mr.mx;
      auto count_of = [&](std::int64_t key) { return merged_count(sketches, r, key); };
      std::size_t wi = 0;
      std::int64_t below = static_cast<std::int64_t>(mr.zero);  // values ranked below
      while (wi < want.size() && want[wi].first < below) got[want[wi++].second] = 0.0;
      // Values below the window lie in (0, edge): estimated by edge / 2.
      const double edge =
          lo > 0 ? 0.5 * from_bits(static_cast<std::uint64_t>(lo) << kKeyShift) : 0.0;
      below += static_cast<std::int64_t>(mr.under);
      while (wi < want.size() && want[wi].first < below) got[want[wi++].second] = edge;
      for (std::int64_t key = std::max<std::int64_t>(lo, 0); key <= mx && wi < want.size(); ++key) {
        const std::uint64_t c = count_of(key);
        if (!c) continue;
        below += c;
        const double mid = bucket_mid(key);
        while (wi < want.size() && want[wi].first < below) got[want[wi++].second] = mid;
      }
      for (std::size_t p = 0; p < P; ++p)
        q[p] = ks[p] + 1 < n ? lerp7(got[2 * p], got[2 * p + 1], gs[p]) : got[2 * p];
    }
  }
  error.rethrow();
  return t;
}

}  // namespace pkscan
