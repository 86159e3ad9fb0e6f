// Visual predictive checks (vpc.hpp): the observations binned once, each replicate's simulated
// observations summarised per bin as it arrives (a DesignSink), the intervals at the end.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <pkscan/error.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/threads.hpp>
#include <pkscan/vpc.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.hpp"

namespace pkscan {

namespace {

constexpr const char* kWho = "vpc";
constexpr int kDefaultBins = 10;
constexpr std::size_t kMaxDistinctTimesBinned = 20;

// The observations and their bins.
struct Layout {
  std::vector<VpcBin> bins;                     // edges, times and counts (no statistics yet)
  std::vector<std::vector<std::int64_t>> rows;  // per bin: its observation rows (result rows)
  std::vector<std::vector<double>> factor;      // per bin: the correction of each row, or empty
  std::vector<std::vector<double>> observed;    // per bin: its observed values (corrected)
  std::vector<std::int64_t> below;              // per bin: observations with DV < LLOQ
  std::vector<std::vector<double>> times;       // per bin: its observations' times
  std::vector<std::string> strata;
};

// Bin edges for the sorted times of one stratum (automatic binning, vpc.hpp).
std::vector<double> automatic_edges(const std::vector<double>& t, int bins) {
  std::vector<double> distinct;
  for (double x : t)
    if (distinct.empty() || x != distinct.back()) distinct.push_back(x);
  const std::size_t want = bins > 0 ? static_cast<std::size_t>(bins) : kDefaultBins;
  std::vector<double> edges{distinct.front()};
  auto mid = [&](std::size_t k) { return distinct[k - 1] + (distinct[k] - distinct[k - 1]) / 2; };
  if (distinct.size() <= std::max<std::size_t>(want, bins > 0 ? 0 : kMaxDistinctTimesBinned)) {
    for (std::size_t k = 1; k < distinct.size(); ++k) edges.push_back(mid(k));
  } else {
    // Boundaries between distinct times; the one nearest each k n / want observations.
    std::vector<std::size_t> before;  // observations before distinct[k]
    std::size_t count = 0;
    std::size_t j = 0;
    for (std::size_t k = 0; k < distinct.size(); ++k) {
      before.push_back(count);
      while (j < t.size() && t[j] == distinct[k]) ++j, ++count;
    }
    std::size_t last = 0;
    for (std::size_t b = 1; b < want; ++b) {
      const double target =
          static_cast<double>(b) * static_cast<double>(t.size()) / static_cast<double>(want);
      std::size_t best = 0;
      for (std::size_t k = 1; k < distinct.size(); ++k)
        if (best == 0 || std::fabs(static_cast<double>(before[k]) - target) <
                             std::fabs(static_cast<double>(before[best]) - target))
          best = k;
      if (best > last) {
        edges.push_back(mid(best));
        last = best;
      }
    }
  }
  edges.push_back(distinct.back());
  return edges;
}

void check_options(const VpcOptions& o) {
  if (o.percentiles.empty())
    throw InvalidArgument(std::string(kWho) + ": no percentiles", "percentiles", "", "");
  for (std::size_t i = 0; i < o.percentiles.size(); ++i) {
    const double p = o.percentiles[i];
    const std::string field = "percentiles[" + std::to_string(i) + "]";
    if (!(p >= 0.0 && p <= 100.0))
      throw DomainError(
          std::string(kWho) + ": percentile " + format_value(p) + " must be in [0, 100]", field,
          format_value(p), "in [0, 100]");
    if (i > 0 && !(p > o.percentiles[i - 1]))
      throw DomainError(std::string(kWho) + ": the percentiles must be ascending", field,
                        format_value(p), "greater than the one before");
  }
  if (!(o.interval > 0.0 && o.interval < 100.0))
    throw DomainError(std::string(kWho) + ": the interval is " + format_value(o.interval) +
                          ", but must be in (0, 100)",
                      "interval", format_value(o.interval), "in (0, 100)");
  if (o.bins < 0 || o.bins > 100000)
    throw DomainError(std::string(kWho) + ": bins is " + std::to_string(o.bins) +
                          ", but must be in [1, 100000] (0: automatic)",
                      "bins", std::to_string(o.bins), "in [1, 100000]");
  if (!o.bin_edges.empty() && o.bin_edges.size() < 2)
    throw InvalidArgument(std::string(kWho) + ": give at least two bin edges", "bin_edges", "", "");
  for (std::size_t i = 0; i < o.bin_edges.size(); ++i) {
    const double e = o.bin_edges[i];
    const std::string field = "bin_edges[" + std::to_string(i) + "]";
    if (!std::isfinite(e))
      throw DomainError(std::string(kWho) + ": bin edge " + format_value(e) + " is not finite",
                        field, format_value(e), "finite");
    if (i > 0 && !(e > o.bin_edges[i - 1]))
      throw DomainError(std::string(kWho) + ": the bin edges must be ascending", field,
                        format_value(e), "greater than the one before");
  }
}

// Observations, strata and bins (vpc.hpp), after the run and the options are checked.
Layout layout_of(const DesignRun& run, const VpcOptions& o) {
  const Dataset& data = *run.data;
  int stratum_slot = -1;
  if (!o.stratify.empty()) {
    stratum_slot = data.covariate_index(o.stratify);
    if (stratum_slot < 0)
      throw InvalidArgument(std::string(kWho) + ": the stratification column " + o.stratify +
                                " is not a column of the dataset " + data.file,
                            "stratify", o.stratify, "");
  }
  const int lloq_slot = run.lloq_column.empty() ? -1 : data.covariate_index(run.lloq_column);
  struct Obs {
    std::int64_t row;
    double time;
    double dv;
    double lloq;
    std::int64_t line;
  };
  std::vector<std::string> strata;
  std::vector<std::vector<Obs>> by_stratum;
  std::int64_t row = 0;
  for (const DatasetSubject& s : data.subjects)
    for (const DatasetRecord& r : s.records) {
      if (r.evid != 0) continue;
      const std::int64_t at = row++;
      if (r.mdv || std::isnan(r.dv)) continue;
      const std::string key =
          stratum_slot < 0 ? std::string() : r.covariates[static_cast<std::size_t>(stratum_slot)];
      auto it = std::find(strata.begin(), strata.end(), key);
      if (it == strata.end()) {
        strata.push_back(key);
        by_stratum.emplace_back();
        it = strata.end() - 1;
      }
      const double lloq =
          lloq_slot >= 0
              ? std::strtod(r.covariates[static_cast<std::size_t>(lloq_slot)].c_str(), nullptr)
              : run.lloq;
      by_stratum[static_cast<std::size_t>(it - strata.begin())].push_back(
          Obs{at, r.time, r.dv, lloq, r.line});
    }
  if (strata.empty())
    throw InvalidArgument(std::string(kWho) + ": the dataset " + data.file +
                              " has no observation with a DV (EVID 0, MDV 0)",
                          "data", "", "");
  Layout l;
  std::vector<std::vector<double>> bin_times_all;
  for (std::size_t k = 0; k < strata.size(); ++k) {
    std::vector<Obs>& obs = by_stratum[k];
    std::stable_sort(obs.begin(), obs.end(),
                     [](const Obs& a, const Obs& b) { return a.time < b.time; });
    std::vector<double> times;
    for (const Obs& x : obs) times.push_back(x.time);
    std::vector<double> edges = o.bin_edges;
    if (edges.empty()) {
      edges = automatic_edges(times, o.bins);
    } else if (times.front() < edges.front() || times.back() > edges.back()) {
      const Obs& out = times.front() < edges.front() ? obs.front() : obs.back();
      throw DomainError(std::string(kWho) + ": " + data.file + ":" + std::to_string(out.line) +
                            ": the observation at time " + format_value(out.time) +
                            " lies outside the bin edges [" + format_value(edges.front()) + ", " +
                            format_value(edges.back()) +
                            "]; give edges that cover every "
                            "observation time",
                        "bin_edges", format_value(out.time), "");
    }
    // Bin b holds [edges[b], edges[b + 1]), the last also its upper edge.
    const std::size_t nb = edges.size() < 2 ? 1 : edges.size() - 1;
    std::size_t first = l.bins.size();
    std::vector<std::vector<double>> bin_times(nb);
    for (std::size_t b = 0; b < nb; ++b) {
      VpcBin bin;
      bin.stratum = strata[k];
      bin.lower = edges[b];
      bin.upper = edges.size() < 2 ? edges[0] : edges[b + 1];
      l.bins.push_back(bin);
      l.rows.emplace_back();
      l.observed.emplace_back();
      l.below.push_back(0);
    }
    for (const Obs& x : obs) {
      std::size_t b = static_cast<std::size_t>(
          std::upper_bound(edges.begin(), edges.end(), x.time) - edges.begin());
      b = b == 0 ? 0 : std::min(b - 1, nb - 1);
      l.rows[first + b].push_back(x.row);
      l.observed[first + b].push_back(x.dv);
      l.below[first + b] += x.dv < x.lloq;
      bin_times[b].push_back(x.time);  // ascending: obs are sorted by time
    }
    for (std::size_t b = 0; b < nb; ++b) {
      l.bins[first + b].observations = static_cast<std::int64_t>(bin_times[b].size());
      if (!bin_times[b].empty()) l.bins[first + b].time = sorted_percentile(bin_times[b], 50.0);
      bin_times_all.push_back(std::move(bin_times[b]));
    }
  }
  // Bins without observations have nothing to compare: dropped.
  Layout kept;
  kept.strata = strata;
  for (std::size_t b = 0; b < l.bins.size(); ++b) {
    if (l.rows[b].empty()) continue;
    kept.times.push_back(bin_times_all[b]);
    kept.bins.push_back(std::move(l.bins[b]));
    kept.rows.push_back(std::move(l.rows[b]));
    kept.observed.push_back(std::move(l.observed[b]));
    kept.below.push_back(l.below[b]);
  }
  return kept;
}

// The percentiles of `v` (sorted in place) into out[0 .. p.size()).
void percentiles_of(std::vector<double>& v, const std::vector<double>& p, double* out) {
  std::sort(v.begin(), v.end());
  for (std::size_t i = 0; i < p.size(); ++i) out[i] = sorted_percentile(v, p[i]);
}

// Each replicate's percentiles and BLQ fraction per bin, as replicates arrive.
class VpcSink final : public DesignSink {
 public:
  VpcSink(const Layout& l, const VpcOptions& o, std::int64_t replicates, bool blq, int threads)
      : l_(l), o_(o), blq_(blq), threads_(threads) {
    const std::size_t nb = l.bins.size();
    values_.resize(static_cast<std::size_t>(replicates) * nb * o.percentiles.size());
    if (blq) fractions_.resize(static_cast<std::size_t>(replicates) * nb);
  }
  void write(const DesignChunk& c) override {
    const std::size_t nb = l_.bins.size();
    const std::size_t np = o_.percentiles.size();
    detail::parallel_for(
        static_cast<std::int64_t>(nb), threads_, 1, [] { return std::vector<double>(); },
        [&](std::int64_t bi, std::vector<double>& v) {
          const std::size_t b = static_cast<std::size_t>(bi);
          const std::vector<std::int64_t>& rows = l_.rows[b];
          v.resize(rows.size());
          std::int64_t below = 0;
          for (std::size_t i = 0; i < rows.size(); ++i) {
            const std::size_t r = static_cast<std::size_t>(rows[i]);
            v[i] = l_.factor.empty() ? c.dv[r] : c.dv[r] * l_.factor[b][i];
            if (blq_) below += c.blq[r];
          }
          const std::size_t at = static_cast<std::size_t>(c.replicate) * nb + b;
          percentiles_of(v, o_.percentiles, values_.data() + at * np);
          if (blq_) fractions_[at] = static_cast<double>(below) / static_cast<double>(rows.size());
        });
  }
  void commit() override {}
  const std::vector<double>& values() const noexcept { return values_; }
  const std::vector<double>& fractions() const noexcept { return fractions_; }

 private:
  const Layout& l_;
  const VpcOptions& o_;
  bool blq_;
  int threads_;
  std::vector<double> values_;     // replicate x bin x percentile
  std::vector<double> fractions_;  // replicate x bin
};

void check_run(const DesignRun& run) {
  if (run.count > 0)
    throw InvalidArgument(std::string(kWho) +
                              ": count resamples the dataset's subjects, but a VPC replicates the "
                              "observed design; remove count",
                          "count", std::to_string(run.count), "");
  if (!run.residual)
    throw InvalidArgument(std::string(kWho) +
                              ": a VPC compares observations with simulated observations, so the "
                              "run needs a residual error",
                          "residual", "", "");
  if (run.replicates < 2)
    throw DomainError(std::string(kWho) + ": replicates is " + std::to_string(run.replicates) +
                          ", but a VPC's prediction intervals need at least 2 (100 or more is "
                          "usual)",
                      "replicates", std::to_string(run.replicates), ">= 2");
}

}  // namespace

void check_vpc(const DesignRun& run, const VpcOptions& options) {
  check_options(options);
  check_run(run);
  check_design_run(run);
  layout_of(run, options);
}

VpcTable run_vpc(const DesignRun& run, const VpcOptions& options,
                 const DesignProgressFn& progress) {
  check_options(options);
  check_run(run);
  Layout l = layout_of(run, options);
  if (options.prediction_corrected) {
    const std::vector<double> pred = design_population_predictions(run);
    // Each record's line, for messages.
    std::vector<std::int64_t> line;
    for (const DatasetSubject& s : run.data->subjects)
      for (const DatasetRecord& r : s.records)
        if (r.evid == 0) line.push_back(r.line);
    l.factor.resize(l.bins.size());
    for (std::size_t b = 0; b < l.bins.size(); ++b) {
      std::vector<double> p;
      for (std::int64_t r : l.rows[b]) p.push_back(pred[static_cast<std::size_t>(r)]);
      std::vector<double> sorted = p;
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted_percentile(sorted, 50.0);
      for (std::size_t i = 0; i < p.size(); ++i) {
        double f = 1.0;
        if (p[i] != 0.0) {
          f = median / p[i];
        } else if (median != 0.0) {
          const std::int64_t at = line[static_cast<std::size_t>(l.rows[b][i])];
          throw DomainError(std::string(kWho) + ": " + run.data->file + ":" + std::to_string(at) +
                                ": the population prediction of this observation is 0, but the "
                                "median of its bin is " +
                                format_value(median) +
                                ", so it cannot be prediction-corrected; bin it apart (bin "
                                "edges) or leave it out of the dataset",
                            "prediction_corrected", "", "");
        }
        l.factor[b].push_back(f);
        l.observed[b][i] *= f;
      }
    }
  }
  DesignRun sim = run;
  sim.parameter_table = false;
  const bool blq = !std::isnan(run.lloq) || !run.lloq_column.empty();
  std::int64_t compared = 0;
  for (const auto& rows : l.rows) compared += static_cast<std::int64_t>(rows.size());
  // The bins of a replicate are summarised in parallel when there are enough observations.
  VpcSink sink(l, options, run.replicates, blq,
               detail::threads_for_work(resolve_threads(run.options.threads),
                                        static_cast<double>(compared), 20000.0));
  run_design(sim, sink, progress);

  VpcTable t;
  t.percentiles = options.percentiles;
  t.interval = options.interval;
  t.replicates = run.replicates;
  t.prediction_corrected = options.prediction_corrected;
  t.blq = blq;
  t.stratify = options.stratify;
  const double lo = (100.0 - options.interval) / 2.0;
  const std::vector<double> band = {lo, 50.0, 100.0 - lo};
  const std::size_t nb = l.bins.size();
  const std::size_t np = options.percentiles.size();
  const auto reps = static_cast<std::size_t>(run.replicates);
  std::vector<double> v(reps);
  t.strata = l.strata;
  for (std::size_t b = 0; b < nb; ++b) {
    const int stratum = static_cast<int>(
        std::find(l.strata.begin(), l.strata.end(), l.bins[b].stratum) - l.strata.begin());
    for (std::size_t i = 0; i < l.rows[b].size(); ++i) {
      t.observation_time.push_back(l.times[b][i]);
      t.observation_value.push_back(l.observed[b][i]);
      t.observation_stratum.push_back(stratum);
    }
    VpcBin bin = l.bins[b];
    bin.observed.resize(np);
    percentiles_of(l.observed[b], options.percentiles, bin.observed.data());
    bin.simulated.resize(np * 3);
    for (std::size_t p = 0; p < np; ++p) {
      for (std::size_t r = 0; r < reps; ++r) v[r] = sink.values()[(r * nb + b) * np + p];
      percentiles_of(v, band, bin.simulated.data() + p * 3);
    }
    if (blq) {
      bin.observed_blq = static_cast<double>(l.below[b]) / static_cast<double>(l.rows[b].size());
      for (std::size_t r = 0; r < reps; ++r) v[r] = sink.fractions()[r * nb + b];
      percentiles_of(v, band, bin.simulated_blq);
    }
    t.bins.push_back(std::move(bin));
  }
  return t;
}

}  // namespace pkscan
