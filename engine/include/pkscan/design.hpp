#pragma once
/// @file design.hpp
/// Design simulations (NONMEM's `$SIM`): a dataset gives each subject's records (doses,
/// observation times, time-varying covariates, occasions) and a PopulationSpec gives the
/// parameters (typical values, between-subject variability, covariate effects on the dataset's
/// columns, between-occasion variability); each replicate simulates the whole design with new
/// draws, and a residual error turns the predictions into simulated observations.
///
/// For record k of subject i in replicate r, every parameter the population varies is
///
///     p = typical * f_1(cov_ik) * f_2(cov_ik) * ... * exp(eta_i + kappa_io),
///
/// PopulationSampler::individual() at the record's covariate values (time-varying covariates
/// act from the record on, as a dataset's parameter columns do: a record's values govern the
/// interval that ends at it) and at its occasion o (the occasion column's value on the record).
/// eta_i is PopulationSampler::sample()'s draw of (seed, r, i), so a subject has the etas of
/// grid population subject i; kappa_io comes from PopulationSampler::occasion(r, i, o). The
/// residual errors of subject i's observations are the first of residual_normals(seed, r, i):
/// observation k of the subject (its k-th EVID 0 record) uses z[2k] and z[2k + 1]. Every draw
/// therefore depends only on (seed, replicate, subject, occasion): the results are the same bits
/// for any thread count.
///
/// Parameters the population does not vary (no iiv, iov or covariate effect) take their typical
/// value, or the dataset's column of that name where it has one (per record, as in a dataset
/// run). A design without variability is the dataset run with the typical values, bit for bit.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <pkscan/dataset.hpp>
#include <pkscan/events.hpp>
#include <pkscan/options.hpp>
#include <pkscan/population.hpp>
#include <string>
#include <vector>

namespace pkscan {

class RunExchange;

/// A design simulation.
struct DesignRun {
  /// The design: subjects, records and covariate columns (read for the population's model).
  std::shared_ptr<const Dataset> data;
  /// Typical values, iiv, omega, covariate effects and iov of the model's parameters.
  /// covariate_names are columns of the dataset (Dataset::covariate_columns), read per record as
  /// numbers; `count` and `covariates` are not used (the dataset's subjects and records, or
  /// DesignRun::count, give them).
  PopulationSpec population;
  /// Virtual subjects per replicate, resampled from the dataset's subjects with replacement;
  /// 0: every dataset subject once per replicate. Virtual subject j of replicate r copies the
  /// records (doses, times, covariates, occasions) of dataset subject
  /// resampled_subject(population.seed, r, j, dataset subjects) and draws its etas, kappas and
  /// residual errors as subject j (the formula above with i = j).
  std::int64_t count = 0;
  /// The dataset's occasion column (a covariate column of whole numbers); needed with iov.
  std::string occasion;
  std::int64_t replicates = 1;  ///< replicates of the whole design (NONMEM's NSUBPROBLEMS)
  /// Residual error of the simulated observations (DV); absent: predictions only.
  std::optional<ResidualError> residual;
  /// Lower limit of quantification (with a residual error): a number, or NaN with lloq_column
  /// naming a dataset covariate column that holds each observation's LLOQ.
  double lloq = std::numeric_limits<double>::quiet_NaN();
  std::string lloq_column;
  /// Each subject's (and occasion's) parameters, etas and kappas go to the sink.
  bool parameter_table = true;
  SimulateOptions options;  ///< method (not power), threads, device (CPU or CUDA)
};

/// What a design sink knows before the first replicate.
struct DesignLayout {
  std::shared_ptr<const ModelInfo> model;
  std::shared_ptr<const Dataset> data;
  std::int64_t replicates = 1;
  bool observations = false;  ///< chunks carry DV (a residual error)
  bool blq = false;           ///< chunks carry BLQ flags (an LLOQ)
  /// The parameter table's parameter columns (ModelInfo::parameters indices, model order): every
  /// column the run gives a value; empty without the table.
  std::vector<int> parameter_table;
  std::vector<std::string> eta_columns;  ///< "eta_<parameter>", PopulationSpec::iiv order
  std::vector<std::string> iov_columns;  ///< "iov_<parameter>", PopulationSpec::iov order
  bool occasions = false;                ///< the table has a row per subject and occasion (iov)
  bool resampled = false;  ///< DesignRun::count: chunks carry each subject's source (a column)
};

/// One replicate of a design: the predictions at every observation record (DatasetResult's rows,
/// in dataset order), and the parameter table's rows. Pointers are borrowed for the call.
struct DesignChunk {
  std::int64_t replicate = 0;             ///< 0-based
  const DatasetResult* result = nullptr;  ///< amounts, concentrations, prediction (IPRED)
  const double* dv = nullptr;             ///< per row: the simulated observation (observations)
  const std::int8_t* blq = nullptr;       ///< per row: 1 where DV < LLOQ (blq)
  /// Resampled runs (DesignLayout::resampled): per subject of the replicate (DatasetResult's
  /// `subject` and table_subject index it), the index into Dataset::subjects of the subject it
  /// copies (whose records DatasetResult's `record` indexes); null otherwise.
  const std::int64_t* source = nullptr;
  /// The parameter table: one row per subject, or per subject and occasion in the order the
  /// occasions first appear in its records, each with the parameters of its first record.
  std::int64_t table_rows = 0;
  const std::int64_t* table_subject = nullptr;  ///< per table row: index into Dataset::subjects
  const double* table_occasion = nullptr;       ///< per table row: occasion (occasions only)
  const double* table_parameters = nullptr;     ///< per table row x ModelInfo::parameters (all)
  const double* table_etas = nullptr;           ///< per table row x eta_columns
  const double* table_kappas = nullptr;         ///< per table row x iov_columns
};

/// A destination of a design's results: write() once per replicate, in order, then commit().
class DesignSink {
 public:
  virtual ~DesignSink() = default;
  virtual void write(const DesignChunk& chunk) = 0;
  virtual void commit() = 0;
  /// A run split over processes (run_design with a RunExchange): on the rank that simulated a
  /// replicate, the bytes that write() of the run's sink would add to its files for it, in
  /// `bytes` (replaced), so that rank 0 only appends them (write_formatted). False (the
  /// default) when this sink does not format replicates: they then travel as values.
  virtual bool format(const DesignChunk& /*chunk*/, std::vector<char>& /*bytes*/) { return false; }
  /// Takes in place of write() the bytes that format() of a formatter of the same layout made
  /// of replicate `replicate` (0-based) of `rows` observation rows.
  /// @throws InvalidArgument when the sink does not take formatted replicates (the default)
  virtual void write_formatted(std::int64_t replicate, std::int64_t rows,
                               const std::vector<char>& bytes);
};

/// Checks a design run before anything runs: the population (PopulationSampler's rules), every
/// covariate an effect uses is a dataset column holding a finite number on every record (> 0 for
/// a power effect), the occasion column (with iov) holds whole numbers, no dataset column gives a
/// parameter the population varies, replicates >= 1, the residual error (standard deviations
/// finite and >= 0, exponential alone), the LLOQ (finite and >= 0; a column: numbers on every
/// observation record; needs a residual error), the method (not power), and every record's
/// parameters under the typical values.
/// Errors name the dataset's file, line and column for a bad cell, or carry a field
/// (Error::field(): `population.typical[2]`, `omega[1][0]`, `iov_omega[0][0]`,
/// `effects[0].covariate`, `occasion`, `replicates`, `residual.additive`, `lloq`, `lloq_column`).
/// @throws InvalidArgument, DomainError, ConfigError (a dataset cell)
void check_design_run(const DesignRun& run);

/// The layout the sink of `run` receives.
DesignLayout design_layout(const DesignRun& run);

/// Number of observation rows of one replicate; with DesignRun::count, whose replicates differ,
/// count times the mean observation records per dataset subject, rounded.
std::int64_t design_rows(const DesignRun& run) noexcept;

/// Progress of a design run: replicates done, of `total`.
using DesignProgressFn = std::function<void(std::int64_t done, std::int64_t total)>;

/// Simulates every replicate of the design into `sink` (write() per replicate, then commit()).
/// Memory: one replicate's results at a time.
/// Split over processes (`exchange`, see RunExchange in population_run.hpp): replicate r is
/// simulated by rank r mod size; every rank calls run_design() with the same run, a rank other
/// than 0 sends its replicates' values to rank 0 (its sink receives nothing and is not
/// committed), and rank 0 writes every replicate in order, as one process does, and commits
/// once every rank has reported that it finished. An error on another rank reaches rank 0 as
/// an Error of the same kind whose message starts "rank R: ".
/// @throws everything check_design_run throws; DomainError naming the subject, record and
///         replicate for a drawn parameter out of its domain (an overflowing covariate effect);
///         the sink's errors. On an exception the sink is not committed.
RunSummary run_design(const DesignRun& run, DesignSink& sink, const DesignProgressFn& progress = {},
                      RunExchange* exchange = nullptr);

}  // namespace pkscan
