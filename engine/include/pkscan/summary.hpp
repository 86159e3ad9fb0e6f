#pragma once
/// @file summary.hpp
/// Streaming summaries of population runs: per output time, the mean and percentiles of each
/// compartment's concentration across subjects; per subject, exposure metrics.
///
/// A run is simulated in chunks of consecutive subjects; each chunk is handed to
/// TimeSummary::add() (and to subject_metrics()) and may then be discarded, so memory does not
/// grow with the number of subjects.
///
/// Concentrations: a chunk's concentration arrays when they are filled, otherwise
/// amount * (1 / volume) in double (within one rounding of amount / volume; float32 amounts
/// are widened to double first).
///
/// Percentiles are type 7 (numpy.percentile's default): for n values sorted x_0 <= ... <=
/// x_{n-1} and percentile p, h = (n - 1) p / 100, k = floor(h), value = x_k + (h - k)
/// (x_{k+1} - x_k). They are exact while the run holds few values (see
/// TimeSummaryOptions::exact_values); beyond that each (time, compartment) keeps a histogram
/// sketch and x_k is replaced by an estimate:
///  - positive values fall in logarithmic buckets given by the top 7 bits of the mantissa and
///    the exponent of the double (bucket [2^e (1 + j/128), 2^e (1 + (j+1)/128))); x_k is
///    estimated by the midpoint of its bucket, so the relative error of x_k, and therefore of
///    the interpolated percentile, is at most 2^-8 (0.39%) for normal numbers;
///  - zero and negative values (rounding noise: amounts are >= 0 in exact arithmetic) share
///    one bucket and are estimated as 0;
///  - the buckets kept span a window of `window_binades` binary orders of magnitude below the
///    largest value seen at that time (32 by default: 2^32, about 4.3e9); positive values below
///    the window are counted and estimated by half the window's lower edge e (they lie in
///    (0, e), and e <= max * 2^-window_binades * (1 + 2^-7)), so their error is at most
///    max * 2^-window_binades.
/// Each order statistic x_k is thus estimated within 2^-8 x_k when it lies in the window
/// (exactly when it is 0; negative values are reported as 0) and within max * 2^-window_binades
/// when it lies below; the interpolated percentile's error is at most
/// (1 - g) err_k + g err_{k+1} (g = h - k), no more than the larger of the two. In short: 2^-8
/// (0.39%) relative for every percentile whose neighbouring order statistics are within
/// 2^window_binades of the largest value at that time.
///
/// Determinism: finish() gives bit-identical results whatever the chunk sizes and thread
/// counts. Means are sums over fixed blocks of 1024 consecutive subjects (global subject
/// index g, block g / 1024, counted over every subject passed to add(), excluded or not); within
/// a block, subject g goes to lane g mod 8, each lane sums its subjects in order, the 8 lanes
/// are combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), and the block sums are
/// added in block order, then divided by the number of included subjects. A block may span
/// several chunks (its lanes are carried over), so any split gives the same sums. Histogram
/// counts are integers and the sketch's window depends only on the largest finite value of any
/// subject passed (the values of excluded subjects are added, then taken out), so its state
/// does not depend on the order of the values either. Engine::summarize_into adds subjects
/// with the same arithmetic while it simulates them (fused; one sketch per thread, merged by
/// finish()). Results
/// are bit-identical on one machine: a code path compiled for AVX-512, AVX2 or baseline x86-64
/// is picked for the CPU at run time (the same one for every call), and another CPU may give
/// results that differ in the last bits.
///
/// Memory: the sketch state is times x compartments rows of 2^ceil(log2(128 window_binades))
/// + 16 32-bit counters (16.1 KiB per row by default: 47 MiB for 1000 times x 3
/// compartments), zero pages mapped lazily (on Linux in transparent huge pages, so a touched
/// 2 MiB region becomes resident as a whole), plus 48 bytes per row; the exact phase keeps at
/// most exact_values doubles (32 MB by default), freed when the sketch takes over. The fused
/// path of Engine::summarize_into keeps one more sketch per thread it ran on, in 4 KiB pages
/// (47 MiB reserved each in the example, of which only the pages holding counters of values
/// seen become resident: a few MiB), and the Engine keeps about 1.4 MiB of scratch per thread
/// between calls (freed with the Engine). Summarised on device `cuda`, the summary keeps two
/// more (the device's state, and a spare each call copies it back into), resident in full once
/// used, and the device holds a copy of one while a call runs. Nothing grows with the number of
/// subjects.

#include <array>
#include <cstdint>
#include <memory>
#include <pkscan/result.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pkscan {

namespace detail {
struct FusedSummary;
}

/// Per output time and compartment: the mean and percentiles of the concentration across all
/// subjects of a run.
struct TimeSummaryTable {
  std::vector<double> times;        ///< output times
  std::vector<double> percentiles;  ///< e.g. {5, 50, 95}
  int compartments = 0;             ///< number of compartments
  std::vector<double> mean;         ///< times x compartments, row-major
  std::vector<double> quantiles;    ///< times x compartments x percentiles, row-major
  std::int64_t count = 0;           ///< subjects summarised
  std::int64_t excluded = 0;        ///< subjects left out because a value was NaN or infinite
  bool exact = true;                ///< true: exact percentiles; false: the sketch's estimates
  /// The group these subjects form in a run summarised by group: its values of the run's
  /// grouping columns (RunLayout::summary_columns: replicate number 1-based, swept values);
  /// empty when the whole run is one group.
  std::vector<double> group;
};

/// Options of a TimeSummary.
struct TimeSummaryOptions {
  /// Percentiles to report, each in [0, 100].
  std::vector<double> percentiles{5.0, 50.0, 95.0};
  /// Percentiles are exact while subjects passed x times x compartments <= exact_values
  /// (the values are kept); beyond that the sketch is used. >= 0.
  std::int64_t exact_values = 4'000'000;
  /// Width of the sketch's window in binary orders of magnitude, in [1, 1024].
  int window_binades = 32;
  /// OpenMP threads for add() and finish(), 0 = the default (pkscan/threads.hpp).
  int threads = 0;
};

/// Streaming accumulator of per-time means and percentiles of concentrations across subjects.
/// Feed it the chunks of a run in subject order with add(), then call finish(). Not
/// thread-safe (add() itself runs in parallel). Movable, not copyable.
class TimeSummary {
 public:
  /// An empty summary of runs with these output times and compartments.
  /// @throws InvalidArgument when times is empty, compartments < 1 or an option is out of
  ///         range (a percentile outside [0, 100] or NaN, exact_values < 0, window_binades
  ///         outside [1, 1024], threads < 0)
  TimeSummary(std::vector<double> times, int compartments, TimeSummaryOptions options = {});
  ~TimeSummary();
  TimeSummary(TimeSummary&&) noexcept;
  TimeSummary& operator=(TimeSummary&&) noexcept;
  TimeSummary(const TimeSummary&) = delete;
  TimeSummary& operator=(const TimeSummary&) = delete;

  /// Adds the next chunk of subjects (the subjects following those already added). A subject
  /// whose status is NonFinite or with a non-finite concentration is excluded and counted.
  /// Any chunk sizes give bit-identical results (see the file comment).
  /// @throws InvalidArgument when the chunk's output times or compartments differ from the
  ///         summary's
  /// @throws DomainError when more than 2^32 - 1 subjects would be added
  void add(const SimulationResult& chunk);

  /// add(chunk) followed by subject_metrics(chunk, metric_compartment, last_dose_time,
  /// metrics, options.threads): the same summary state and metric values, in one call.
  /// @param metric_compartment 0-based compartment of the metrics
  /// @param last_dose_time as for subject_metrics (NaN: no dose)
  /// @param metrics chunk.subjects() x kMetricCount doubles (see subject_metrics)
  /// @throws as add(); InvalidArgument for a metric compartment out of range or a null
  ///         `metrics` with subjects
  void add(const SimulationResult& chunk, int metric_compartment, double last_dose_time,
           double* metrics);

  /// The table of everything added so far (may be called at any time; does not change the
  /// state). Means and percentiles are NaN when no subject was included.
  TimeSummaryTable finish() const;

  /// Exact percentiles at any size. Once the percentiles are the sketch's estimates (more
  /// values than exact_values were added), further passes over the same subjects make them
  /// exact:
  ///
  ///     while (summary.begin_pass()) {
  ///       for (each chunk, in the order of the first pass) summary.add(chunk);
  ///       summary.end_pass();
  ///     }
  ///
  /// A pass adds the same values again (a deterministic simulation run again). After the
  /// first pass the sketch has located each order statistic x_k that a percentile needs in one
  /// of its buckets; a pass collects the values of those buckets (then x_k is read from them
  /// sorted) or, while they would be more than exact_values, counts them in up to 4096 finer
  /// sub-intervals (then x_k is located in an interval at least 256 times narrower for the next
  /// pass). One further pass suffices while the values in the needed buckets fit in
  /// exact_values (a few per thousand of the values of each time: runs of millions of values
  /// per time need two or three); every pass narrows the interval by 2^8 or more, so there are
  /// at most 8. Sums, counts and metrics are not changed by a pass. finish() then reports the
  /// exact percentiles (type 7, as numpy.percentile on the same values) and exact() is true.
  /// If a pass sees other values than the first (its counts per bucket differ) the estimates
  /// stay and needs_pass() is false.
  /// Memory of a pass: the values collected (at most max(exact_values, 65536) doubles) and
  /// 1 to 16 KiB of counters per needed bucket that is counted.
  /// @returns false (and opens no pass) when the percentiles are exact or none is asked for
  /// @throws InvalidArgument when a pass is already open
  bool begin_pass();
  /// Closes the pass opened by begin_pass().
  /// @throws InvalidArgument when no pass is open, or when the pass added a different number
  ///         of subjects (or of included subjects) than the summary holds
  void end_pass();
  /// True when a further pass would make the percentiles exact.
  bool needs_pass() const noexcept;
  /// True between begin_pass() and end_pass(): add() feeds the pass.
  bool in_pass() const noexcept;
  /// Passes begun so far.
  int passes() const noexcept;

  /// Subjects passed to add(), included or not.
  std::int64_t subjects() const noexcept;
  /// Subjects excluded for non-finite values.
  std::int64_t excluded() const noexcept;
  /// True while percentiles are exact: the values are still kept, or passes have found every
  /// order statistic (begin_pass).
  bool exact() const noexcept;
  /// Bytes allocated for the state now (histogram counters counted in full, resident or not).
  std::size_t state_bytes() const noexcept;
  /// state_bytes() of a new summary of this shape (before anything is added; the exact phase's
  /// values, at most options.exact_values doubles, come on top).
  static std::size_t state_bytes_for(std::int64_t times, int compartments,
                                     const TimeSummaryOptions& options = {}) noexcept;

 private:
  friend struct detail::FusedSummary;  // the fused simulate-and-summarise path (engine)
  void add_to_pass(const SimulationResult& chunk);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The p-th percentile (type 7, numpy.percentile's default) of `sorted`: ascending, not
/// empty, p in [0, 100].
double sorted_percentile(const std::vector<double>& sorted, double p) noexcept;

/// Number of exposure metrics per subject.
inline constexpr int kMetricCount = 4;

/// Names of the exposure metrics, in the order subject_metrics() writes them.
inline constexpr std::array<std::string_view, kMetricCount> kMetricNames{"cmax", "tmax", "auc",
                                                                         "cmin"};

/// The same names as strings.
std::vector<std::string> metric_names();

/// Time of the last dose of a regimen (time + repeat * every of the latest dose line), or NaN
/// when there is no dose.
double last_dose_time(const std::vector<DoseEvent>& doses) noexcept;

/// Exposure metrics of every subject of a chunk, from the concentration of one compartment at
/// the output times t_0 < t_1 < ... < t_{n-1} (concentrations as for TimeSummary::add):
///  - cmax: the largest concentration;
///  - tmax: the first output time at which it is reached;
///  - auc: the area from t_0 to t_{n-1} by the linear-up / log-down trapezoid: over
///    [t_{k-1}, t_k] with c_{k-1} > c_k > 0 the piece is (c_{k-1} - c_k) (t_k - t_{k-1}) /
///    ln(c_{k-1} / c_k), otherwise (c_{k-1} + c_k) (t_k - t_{k-1}) / 2. Each log-down piece is
///    accurate to about 2e-15 relative: with x = (c_{k-1} - c_k) / c_k below 1/16 it is
///    c_k x / ln(1 + x) by the series of x / ln(1 + x) to x^12 (slow declines lose nothing to
///    cancellation), above it the logarithm of the correctly rounded ratio (>= 0.06, so the
///    ratio's rounding moves it by at most 1.9e-15 relative; a ratio over 1.8e308 is clamped
///    to it). Summation order (fixed, for determinism): the pieces are added in time order;
///  - cmin: the smallest concentration at output times >= last_dose_time (over every output
///    time when last_dose_time is NaN: no dose); NaN when no output time qualifies.
/// A subject whose status is NonFinite or with a non-finite concentration gets NaN for all
/// four. Runs in parallel over subjects; each subject's metrics do not depend on the thread
/// count or the chunk.
/// @param compartment 0-based compartment index
/// @param out chunk.subjects() x kMetricCount doubles, row-major, in kMetricNames order
/// @param threads OpenMP threads, 0 = the default (pkscan/threads.hpp)
/// @throws InvalidArgument for a compartment out of range, a null `out` with subjects,
///         threads < 0
void subject_metrics(const SimulationResult& chunk, int compartment, double last_dose_time,
                     double* out, int threads = 0);

}  // namespace pkscan
