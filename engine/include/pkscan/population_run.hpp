#pragma once
/// @file population_run.hpp
/// Population and sweep runs in the library: the rows (replicates x sweep points x subjects) are
/// simulated in chunks of consecutive rows and handed to a ResultSink, so memory stays bounded
/// whatever the number of subjects. The sink decides what happens to them: pkscan::output's CSV
/// and HDF5 files (pkscan/output/sink.hpp), or the caller's own (the Python module keeps the
/// summaries and metrics in memory).
///
/// Row order: replicate (slowest), then sweep point (the first swept parameter varying slowest),
/// then subject. `id` counts rows from 1 within a replicate (sweep point-major), so a replicate
/// is one NONMEM-style table; the `replicate` column (when replicates > 1) and the swept
/// parameters are the chunk's extra columns. A population subject's random draws depend only on
/// (seed, replicate, subject index): the same virtual subject appears at every sweep point
/// (paired comparison), and results do not depend on the thread count or the chunk size.
///
/// Summaries by group (PopulationRun::summary_by): the rows of each group are summarised as a
/// run of their own would summarise them, in row order (a group's TimeSummary sees its rows as
/// consecutive subjects), so a group's table does not depend on the other groups, the chunk
/// size or the thread count. Groups are numbered in row order (replicate, then the grouping
/// sweep parameters, the first slowest). A replicate's groups are finished and handed to the
/// sink once its last row is written; groups without the replicate are kept until the end. The
/// summaries kept at once share TimeSummaryOptions::exact_values.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <pkscan/models/model.hpp>
#include <pkscan/options.hpp>
#include <pkscan/population.hpp>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <vector>

namespace pkscan {

/// What a sink knows before the first chunk.
struct RunLayout {
  std::shared_ptr<const ModelInfo> model;    ///< compartments and parameter names
  std::vector<double> times;                 ///< output times, ascending
  Precision precision = Precision::Float64;  ///< precision of the simulated values
  /// Total number of simulated subjects (replicates x grid x subjects). When > 0, commit()
  /// checks that exactly this many rows were written; 0 = not known in advance.
  std::int64_t rows = 0;
  /// Names of per-subject columns that describe a row beyond its id: "arm" (with arms),
  /// "replicate", then the sweep parameters, in that order (may be empty).
  std::vector<std::string> extra_columns;
  /// With arms: the names of the arms; the `arm` column holds the arm's number k (1-based), whose
  /// name is arm_names[k - 1] (CSV writes the name).
  std::vector<std::string> arm_names;
  /// With arms: which of `times` each arm samples, arms x times row-major (1: sampled). `times`
  /// is the sorted union of the arms' output times (Arm::output); the chunks and summary tables
  /// of arm k hold its own times only (arm_times_of), and a sink that writes one time axis for
  /// every arm fills the others (the HDF5 sink: NaN). Empty without arms.
  std::vector<std::int8_t> arm_sampled;
  /// The per-row parameter table (CSV: `STEM.parameters.csv`): the parameter columns it holds
  /// (ModelInfo::parameters indices: those the run gives a value, in model order), then the
  /// etas (eta_columns). Empty: no table.
  std::vector<int> parameter_table;
  /// Names of Chunk::etas' columns, "eta_<parameter>" in the order of PopulationSpec::iiv; empty
  /// without between-subject variability.
  std::vector<std::string> eta_columns;
  /// Chunks carry simulated observations (Chunk::ipred, dv; PopulationRun::residual).
  bool observations = false;
  /// Chunks carry BLQ flags (Chunk::blq; PopulationRun::lloq).
  bool blq = false;
  /// Names of per-subject exposure metrics (metric_names() of summary.hpp); empty when metrics
  /// are not written.
  std::vector<std::string> metric_names;
  /// Compartment whose concentration the metrics describe (0-based).
  int metric_compartment = 1;
  /// Names of the columns the per-time summaries are grouped by ("replicate", then swept
  /// parameters, in extra_columns order; a subset of extra_columns); empty: one summary of
  /// every row.
  std::vector<std::string> summary_columns;
  /// Number of summary tables ResultSink::write_summary() receives (1 without groups; 0 without
  /// summaries).
  std::int64_t summary_groups = 0;
  /// Summaries across replicates (PopulationRun::replicate_percentiles): their grouping columns
  /// (summary_columns without "replicate") and the number of tables; 0: none.
  std::vector<std::string> replicate_summary_columns;
  std::int64_t replicate_summary_groups = 0;
  /// Without PopulationRun::exact_percentiles, some summary group holds more values (its
  /// subjects x times x compartments) than its share of TimeSummaryOptions::exact_values, so its
  /// percentiles are the sketch's estimates (TimeSummaryTable::exact): the CSV summary then ends
  /// in a column `exact` (1 or 0 per row).
  bool summary_estimates = false;
  bool trajectories = true;  ///< amounts/concentrations per subject and time are written
  int threads = 0;           ///< threads a sink may use to format a chunk (0 = pkscan's default)
  std::string run_text;      ///< the run description's text (a run file; stored by the HDF5 sink)
  std::string run_file;      ///< its path (HDF5 attribute; the file of a ConfigError)
};

/// The output times of arm k (0-based) of a layout with arms: the layout's times it samples
/// (RunLayout::arm_sampled); layout.times without arms. Its chunks' results
/// (SimulationResult::output_times) and summary tables (TimeSummaryTable::times,
/// ReplicateSummaryTable::times) hold these times.
/// @throws InvalidArgument for an arm out of range or an arm_sampled of the wrong size
std::vector<double> arm_times_of(const RunLayout& layout, std::int64_t arm);

/// One chunk of consecutive subjects, rows [first, first + result.subjects()). The pointers are
/// borrowed for the duration of ResultSink::write() only.
struct Chunk {
  std::int64_t first = 0;  ///< global 0-based row index of the chunk's first subject
  /// Amounts of the chunk's subjects (model, output times and precision of the RunLayout;
  /// concentrations are not filled: a sink divides amounts by volumes as it reads). With
  /// summaries only (no trajectories), the amounts may be absent.
  const SimulationResult* result = nullptr;
  /// per subject: the `id` column (1-based); null = row number + 1 (first + s + 1)
  const std::int64_t* ids = nullptr;
  /// per subject x extra_columns, row-major (replicate number 1-based, sweep values)
  const double* extra = nullptr;
  /// per subject x model parameters (ModelInfo::parameters order; NaN = unused), row-major
  const double* parameters = nullptr;
  /// per subject x metric_names, row-major; null when metrics are not written
  const double* metrics = nullptr;
  /// per subject x eta_columns, row-major: the subject's drawn etas; null without them
  const double* etas = nullptr;
  /// per subject x output time, row-major, with RunLayout::observations: the observed
  /// compartment's concentration (IPRED, float64) and the simulated observation (DV)
  const double* ipred = nullptr;
  const double* dv = nullptr;
  /// per subject x output time, with RunLayout::blq: 1 where DV < LLOQ, else 0
  const std::int8_t* blq = nullptr;
};

/// Summaries across replicates: for each group of the run's summaries without the replicate
/// (its values of RunLayout::replicate_summary_columns), output time and compartment, the
/// percentiles across replicates (type 7, exact) of each replicate's summary statistics: the
/// mean and each summary percentile (a prediction interval of each statistic).
struct ReplicateSummaryTable {
  std::vector<double> times;            ///< output times
  int compartments = 0;                 ///< number of compartments
  std::vector<std::string> statistics;  ///< "mean", then "p<q>" per summary percentile
  std::vector<double> percentiles;      ///< percentiles across replicates, e.g. {5, 50, 95}
  /// times x compartments x statistics x percentiles, row-major
  std::vector<double> values;
  std::int64_t replicates = 0;  ///< replicates summarised
  std::vector<double> group;    ///< the group's values (empty without grouping columns)
};

/// A destination for one run's results. Called from one thread: write() for every chunk in row
/// order, write_summary() once per summary group (RunLayout::summary_groups times, in group
/// order; a group's table arrives once its last row has been written), then commit().
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  /// Takes one chunk; chunks arrive in row order, without gaps.
  virtual void write(const Chunk& chunk) = 0;
  /// Takes the per-time summary of one group (TimeSummaryTable::group says which).
  virtual void write_summary(const TimeSummaryTable& table) = 0;
  /// Takes the summary across replicates of one group (RunLayout::replicate_summary_groups
  /// calls, in group order, after the last write_summary()). The default ignores it.
  virtual void write_replicate_summary(const ReplicateSummaryTable& /*table*/) {}
  /// The run is complete.
  virtual void commit() = 0;
  /// A run split over processes (RunExchange): on the rank that simulated a chunk, the bytes
  /// that write() of the run's sink would add to its files for it, in `bytes` (replaced), so
  /// that rank 0 only appends them (write_formatted). False (the default) when this sink does
  /// not format chunks: the chunk then travels as values.
  virtual bool format(const Chunk& /*chunk*/, std::vector<char>& /*bytes*/) { return false; }
  /// Takes in place of write(chunk) the bytes that format() of a formatter of the same layout
  /// made of it; `chunk` holds its rows (first) and result (its subjects) only.
  /// @throws InvalidArgument when the sink does not take formatted chunks (the default)
  virtual void write_formatted(const Chunk& chunk, const std::vector<char>& bytes);
};

/// A dose property a sweep varies: a field of one dose line.
struct DoseTarget {
  /// The field: the amount (per unit with DoseScaling::covariate), the interval `every`, the
  /// number of additional doses `repeat`, an infusion's `duration` or `rate`.
  enum class Field { Amount, Every, Repeat, Duration, Rate };
  int line = 0;  ///< 0-based dose line (of problem.doses; with arms, of every arm's doses)
  Field field = Field::Amount;
};

/// The column name of a swept dose property: `dose<line + 1>_<field>` ("dose1_amount").
std::string dose_target_name(const DoseTarget& target);

/// A grid of parameters and dose properties: the cartesian product of the listed values, the
/// first varying slowest.
struct Sweep {
  /// What each dimension varies: a parameter (ModelInfo::parameters index, >= 0), or a dose
  /// property, -1 - k for dose_targets[k].
  std::vector<int> columns;
  std::vector<std::vector<double>> values;  ///< per dimension: its values
  std::vector<DoseTarget> dose_targets;     ///< the swept dose properties
  /// Number of grid points (1 when there is no sweep).
  std::int64_t points() const noexcept {
    std::int64_t n = 1;
    for (const auto& v : values) n *= static_cast<std::int64_t>(v.size());
    return n;
  }
};

/// What the per-time summaries of a run are grouped by: the rows of each combination of the
/// listed keys are summarised on their own (one TimeSummaryTable each).
struct SummaryBy {
  bool replicate = false;    ///< one group per replicate
  std::vector<int> columns;  ///< swept parameters (entries of Sweep::columns): one group per value
  bool arm = false;          ///< one group per arm (a run with arms needs it)
  /// Stratification: a column of the population's covariates (PopulationSpec::covariate_names);
  /// each group is split by the covariate's value, one group per distinct value (ascending, at
  /// most kMaxStrata; the same strata in every arm and replicate, empty ones included). -1: none.
  int covariate = -1;
};

/// Distinct values a stratification covariate (SummaryBy::covariate) may have.
inline constexpr std::int64_t kMaxStrata = 1000;

/// A dose line whose amount depends on the subject (a population's covariate): per unit of the
/// covariate (mg/kg: the line's amount times the covariate's value) or by band (a dose table).
/// A linear model's amounts are linear in its doses, so a subject's amounts are those of the
/// line's amount scaled by the subject's factor, and lines with different factors add up.
struct DoseScaling {
  /// Column of PopulationSpec::covariate_names; -1: the line's amount as given.
  int covariate = -1;
  /// Bands: empty for an amount per unit of the covariate; else ascending finite edges, and
  /// band_amounts (edges + 1 amounts, finite and >= 0): the amount for a covariate below
  /// edges[0], in [edges[k - 1], edges[k]), and from the last edge on. The line's amount is then
  /// not used.
  std::vector<double> band_edges;
  std::vector<double> band_amounts;
  /// The subject's multiplier of the line's amount (per unit: x; bands: the band's amount).
  double factor(double x) const noexcept;
};

/// One arm of a trial on a time grid: its own subjects and doses.
struct Arm {
  std::string name;              ///< written in the `arm` column
  std::int64_t count = 0;        ///< subjects of the arm, >= 1
  std::vector<DoseEvent> doses;  ///< the arm's dose lines (the run's problem.doses are not used)
  std::vector<DoseScaling> scaling;  ///< per dose line, or empty (every amount as given)
  /// The arm's output times (its rows, summaries and metrics); absent: problem.output. Checked
  /// by check_output_times' rules (field `arms[k].output.steps[i]`).
  std::optional<OutputTimes> output;
};

/// The subjects of arms given as shares of a population's `count` subjects: each share in
/// (0, 1], the shares adding up to 1 (within 1e-9); the counts are the largest remainders of
/// share x count (ties go to the earlier arm) and add up to `count`. An arm may get 0 subjects
/// (check_population_run refuses it).
/// @throws DomainError for a share out of range (field `shares[k]`) or shares that do not add
///         up to 1 (field `shares`); InvalidArgument for no shares or count < 0
std::vector<std::int64_t> arm_counts_of_shares(const std::vector<double>& shares,
                                               std::int64_t count);

/// A population or sweep run.
struct PopulationRun {
  /// Grid, doses and output times; problem.parameters holds the subjects (one row each) when
  /// there is no population, and is unused otherwise.
  Problem problem;
  SimulateOptions options;  ///< method, device, precision, threads
  /// The virtual population (count, seed, typical values, Omega, covariates); when absent the
  /// subjects are the rows of problem.parameters.
  std::optional<PopulationSpec> population;
  std::int64_t replicates = 1;  ///< replicate trials of the population (NONMEM's NSUBPROBLEMS)
  /// Parameter grid. With a population a swept value is the typical value: individual values
  /// scale with it (parameter = typical * effects * exp(eta)).
  Sweep sweep;
  bool trajectories = true;  ///< chunks carry the amounts
  bool summaries = false;    ///< per-time summaries and subject metrics
  /// Each row's parameters (and with a population its etas) as a table of their own
  /// (RunLayout::parameter_table; the CSV sink's `STEM.parameters.csv`).
  bool parameter_table = false;
  /// Residual error of simulated observations (population runs with trajectories): each row
  /// gains IPRED and DV at every output time; the draws depend only on (seed, replicate,
  /// subject), so a subject has the same errors at every sweep point.
  std::optional<ResidualError> residual;
  /// Lower limit of quantification: with a residual error, each observation gains a BLQ flag
  /// (DV < lloq; DV keeps the simulated value). NaN: none.
  double lloq = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> percentiles = {5, 50, 95};  ///< summary percentiles, ascending
  /// Percentiles exact at any size: a summary group whose values exceed its share of
  /// TimeSummaryOptions::exact_values is simulated again once its rows are complete (passes of
  /// TimeSummary::begin_pass, nothing written) until its percentiles are the exact ones (type 7,
  /// TimeSummaryTable::exact). false: such a group keeps the sketch's estimates
  /// (RunLayout::summary_estimates).
  bool exact_percentiles = true;
  /// Groups of the summaries. Absent: one group per arm and sweep point (every swept
  /// parameter), the replicates pooled; without arms and a sweep, one summary of every row.
  std::optional<SummaryBy> summary_by;
  /// Per-subject dose amounts: one DoseScaling per line of problem.doses, or empty (needs a
  /// population with the covariates it names).
  std::vector<DoseScaling> dose_scaling;
  /// Arms (a trial): the population's subjects are split into the arms in order (arm k has the
  /// subjects after those of the arms before it: their draws and covariate rows), each with its
  /// own doses; population.count is the sum of the counts. Rows then go arm by arm (the arm
  /// slowest, then replicate, sweep point, subject), with an `arm` column first, and the
  /// summaries are grouped by arm (summary_by.arm). An arm with its own output times
  /// (Arm::output) is simulated, summarised and measured at those; the layout's times are the
  /// union (RunLayout::arm_sampled). Empty: one arm of problem.doses.
  std::vector<Arm> arms;
  /// Summaries across replicates at these percentiles (ascending, in [0, 100]); empty: none.
  /// Needs replicates > 1 and summaries grouped by replicate (summary_by.replicate).
  std::vector<double> replicate_percentiles;
  std::string run_text;  ///< provenance for the sink (RunLayout)
  std::string run_file;
};

/// Progress of a run: rows done so far, of `total`.
using ProgressFn = std::function<void(std::int64_t done, std::int64_t total)>;

/// Progress of the passes of exact percentiles (PopulationRun::exact_percentiles) that follow a
/// run's last chunk: the pass (1, 2, ...), the rows it has gone through and the rows it covers.
using PassProgressFn = std::function<void(int pass, std::int64_t done, std::int64_t total)>;

/// A run split over several processes (pkscan's MPI runs use one; any transport can). The
/// run's chunks are its units, numbered in row order (across arms), and unit u belongs to rank
/// u mod size(). Every rank calls run_population() with the same run and options: the owner of
/// a unit simulates it (with its metrics and observations), a rank other than 0 sends it to rank
/// 0, and rank 0 hands every unit to its sink in row order. A unit of a run without
/// trajectories that starts a block of 1024 subjects of a summary group past its exact phase is
/// summarised by its owner, which sends its block sums instead of its amounts (and its
/// sketches at the group's end); other units are summarised by rank 0. The sink of a rank
/// other than 0 only formats its units when it can (ResultSink::format: rank 0 then appends
/// their bytes) and is not committed. Rank 0 commits only after every other
/// rank has reported that it finished; an error on another rank reaches rank 0 as an Error of
/// the same kind whose message starts "rank R: ". Block sums are added in block order and
/// sketch counts are integers, so the results are the bits of a run without an exchange, for
/// any size. The passes of exact percentiles (PopulationRun::exact_percentiles) are split too
/// when the exchange can broadcast (can_broadcast()): rank 0 broadcasts each pass's plan, every
/// rank simulates the pass's calls i with i mod size() its rank and sends rank 0 the values and
/// counts it found, which rank 0 merges (order statistics and counts do not depend on the order
/// of the values); otherwise rank 0 runs the passes alone.
class RunExchange {
 public:
  virtual ~RunExchange() = default;
  /// This process's rank, in [0, size()).
  virtual int rank() const noexcept = 0;
  /// Number of processes, >= 1.
  virtual int size() const noexcept = 0;
  /// On a rank other than 0: hands one message to rank 0. Messages of one rank arrive in the
  /// order they were sent. May block while rank 0 is behind (this bounds the memory).
  virtual void send(const std::vector<char>& message) = 0;
  /// On rank 0: the next message from rank `from` (in [1, size())).
  virtual void receive(int from, std::vector<char>& message) = 0;
  /// Called by the owner of unit `unit` before it simulates it (a hook for fault tests; the
  /// default does nothing).
  virtual void before_unit(std::int64_t /*unit*/) {}
  /// True when broadcast() works (the default: false, and rank 0 runs the passes alone). Every
  /// rank's exchange must give the same answer.
  virtual bool can_broadcast() const noexcept { return false; }
  /// Every rank calls it in the same order: on rank 0 it hands `message` to every other rank; on
  /// another rank it replaces `message` with rank 0's.
  /// @throws InvalidArgument when the exchange cannot broadcast (the default)
  virtual void broadcast(std::vector<char>& message);
};

/// Options of run_population().
struct PopulationRunOptions {
  /// Rows per chunk: 0 picks a chunk of about 64 MiB of results (always a multiple of 1024).
  std::int64_t chunk_rows = 0;
  ProgressFn progress;  ///< called after every chunk (may be empty)
  /// Called after every call of a pass that follows the last chunk (may be empty). The passes
  /// of summaries grouped by replicate run between the chunks, after each replicate's last:
  /// `progress` covers them.
  PassProgressFn pass_progress;
  /// The run split over several processes (see RunExchange); null: this process runs it all.
  RunExchange* exchange = nullptr;
};

/// What a run did.
struct PopulationRunReport {
  std::int64_t rows = 0;    ///< rows simulated
  std::int64_t chunks = 0;  ///< chunks
  RunSummary summary;       ///< path that ran (of the last chunk), summed timings
};

/// Total rows: replicates x sweep points x subjects.
std::int64_t population_rows(const PopulationRun& run) noexcept;

/// Checks the parts of `run` that run_population adds to a Problem, before anything runs: the
/// model, replicates, the sweep (columns, each value under its parameter's rule), the population
/// (PopulationSampler's rules on typical values, iiv, omega, covariates and effects), that
/// bioavailability and lag stay fixed (a population run is a run on a time grid), the summary
/// groups (summary_by: swept columns; the groups kept at once fit in result_byte_limit), the
/// residual error (standard deviations finite and >= 0, exponential alone, a population and
/// trajectories) and lloq (finite, >= 0, with a residual error). Errors carry field paths
/// (Error::field(): `sweep.values[0][2]`, `population.iiv[1]`, `omega[1][0]`,
/// `effects[0].reference`, `summary_by`, `residual.additive`, `lloq`; the population's own
/// rules name PopulationSpec's members).
/// run_population checks the same. The base problem is checked as simulate() checks it, per
/// chunk.
/// @throws InvalidArgument, DomainError
void check_population_run(const PopulationRun& run);

/// Summary tables a run writes (RunLayout::summary_groups; 0 without summaries).
std::int64_t population_summary_groups(const PopulationRun& run);

/// Bytes the summaries of `run` hold while it runs: the state of every group's TimeSummary
/// kept at once (TimeSummary::state_bytes_for) and the exact phase's shared budget (twice that with
/// exact_percentiles: the values a pass collects); 0 without summaries. check_population_run fails
/// when this exceeds result_byte_limit(run.options).
long double population_summary_bytes(const PopulationRun& run);

/// Any work of `units` units split over the processes of `exchange` (the protocol of
/// run_population's split runs): unit u belongs to rank u mod exchange.size(), which calls
/// `make(u, bytes)` to fill the unit's bytes (after RunExchange::before_unit(u)); rank 0 calls
/// `take(u, bytes)` for every unit in unit order, its own or another rank's, and `commit()` once
/// every other rank has reported that it finished. Another rank's error reaches rank 0 as an
/// exception of the same kind, its message led by "rank R: "; on any error nothing is committed.
/// A rank other than 0 never calls `take` or `commit`. With one process, every unit is made and
/// taken here. Used by the dataset runs of run files (config::run).
void run_units(RunExchange& exchange, std::int64_t units,
               const std::function<void(std::int64_t, std::vector<char>&)>& make,
               const std::function<void(std::int64_t, const std::vector<char>&)>& take,
               const std::function<void()>& commit);

/// The layout the sink of `run` receives (output times, extra columns, metric names, ...).
RunLayout population_layout(const PopulationRun& run);

/// Simulates the run chunk by chunk into `sink` (write() per chunk, write_summary() when
/// summaries are asked for, commit()).
/// @throws InvalidArgument for an inconsistent run (no subjects, a sweep column out of range);
///         DomainError naming the replicate and subject for invalid parameter values;
///         everything simulate(), PopulationSampler and the sink throw. On an exception the sink
///         is not committed.
PopulationRunReport run_population(const PopulationRun& run, ResultSink& sink,
                                   const PopulationRunOptions& options = {});

}  // namespace pkscan
