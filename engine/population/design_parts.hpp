#pragma once
// The parts of a design simulation (design.cpp): what a run prepares once from its dataset and
// population, and how each replicate's drawn parameters reach the event solver (as the rows of
// each subject's event plan) or the device (as columns of a copy of the dataset).
#include <cstdint>
#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/design.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/population.hpp>
#include <vector>

#include "events/plan.hpp"

namespace pkscan::detail {

// Records per thread woken in a design's parallel regions (each record costs about 0.1 us to
// 1 us to plan, prepare and solve: a thread is worth waking for a few hundred microseconds of
// work).
constexpr double kRecordsPerThread = 1000.0;

// Everything a design run prepares once: the sampler, the dataset copy with the drawn columns,
// every record's covariate values and occasion, the parameter table's rows and the observation
// rows of each subject.
struct Design {
  std::shared_ptr<const ModelInfo> model;
  std::unique_ptr<PopulationSampler> sampler;
  const Dataset* src = nullptr;        // the design's dataset (DesignRun::data)
  Dataset data;                        // the copy with the drawn columns (make_copy)
  std::vector<int> drawn;              // model columns drawn per record
  std::vector<int> drawn_slot;         // their slots in data.parameter_columns
  std::vector<int> column_of;          // per parameter column of src: its model column
  std::int64_t max_records = 0;        // the most records of a subject
  std::vector<std::int64_t> record0;   // per subject: its first record's index in the flat arrays
  std::vector<double> cov;             // per record x covariate_names
  std::vector<std::int64_t> occasion;  // per record (with iov)
  std::vector<double> lloq;            // per observation row (an LLOQ column)
  std::vector<std::int64_t> obs0;      // per subject: its first observation row (and the total)
  double plan_bytes = 0.0;             // the most the event plans of its subjects take (Plans)
  std::vector<std::int64_t> table0;    // per subject: its first table row (and the total)
  std::vector<std::int64_t> table_record;  // per table row: its first record (within the subject)
  std::vector<std::int64_t> table_subject;
  std::vector<double> table_occasion;
  bool iov = false;
};

// The event plans of a design's dataset subjects, kept across replicates (their events do not
// depend on the parameters; set_rows writes each replicate's rows), or none where they would
// take more than kPlanCacheBytes (each replicate then plans its subjects again).
struct Plans {
  std::vector<detail::SubjectPlan> plan;  // per dataset subject, or empty
};

// Checks the run's options, residual error, LLOQ and covariate, occasion and LLOQ columns, and
// reads every record's covariates and occasion (no copy of the dataset).
// @throws InvalidArgument, DomainError or ConfigError (a cell, at its file, line and column)
Design prepare(const DesignRun& run);

// The dataset copy with a parameter column per drawn column (the device's path and the
// population predictions run it), its drawn cells 0 until write_values writes them.
void make_copy(Design& d);

// Every record's drawn parameters of dataset subject s (records x d.drawn.size(), row-major)
// into `out`, from its etas (null: 0) and, with iov, the kappas of each record's occasion in
// `replicate` (replicate < 0: 0) of virtual subject `draw`. Returns true when every record's
// values are the first record's (the same covariates and occasion throughout).
bool drawn_values(const Design& d, std::int64_t s, std::int64_t draw, std::int64_t replicate,
                  const double* eta, std::vector<double>& kappa, std::vector<double>& row,
                  std::vector<double>& out);

// Writes drawn_values() `vals` of a subject into its records in the copy.
void write_values(const Design& d, const std::vector<double>& vals, DatasetSubject& subj);

// The parameter rows of dataset subject s's plan (a plan of the dataset without the drawn
// columns) for its drawn values `vals`: each record's dataset cells, then its drawn values, a
// run of records with equal cells sharing one row, as DatasetSetup::plan_records makes them from
// the copy with the values written in. Reuses the plan's rows (no allocation once warm).
// `uniform`: drawn_values said every record's values are the first's.
void set_rows(const Design& d, std::int64_t s, const double* vals, bool uniform, SubjectPlan& plan);

// A batch of every subject's typical row: the values of the columns that are not drawn.
ParameterBatch typical_batch(const Design& d, std::int64_t subjects);

// The event solver's setup of d's dataset for a run with `options`, as simulate_dataset_into
// makes it (its messages name it).
DatasetSetup design_setup(const Design& d, const SimulateOptions& options);

// check_design_run's checks after prepare(): every record's parameters at eta = 0 and kappa = 0,
// the typical values under the covariate effects (an effect that overflows is found here), as
// check_dataset checks a dataset. On the CPU, through `setup` (a setup of d's dataset), keeping
// the plans in `plans` where they fit; with a null setup or on the device, through the copy
// (make_copy), which it leaves with those values.
void check_prepared(Design& d, const DesignRun& run, const DatasetSetup* setup, Plans* plans);

}  // namespace pkscan::detail
