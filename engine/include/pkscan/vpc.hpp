#pragma once
/// @file vpc.hpp
/// Visual predictive checks: a dataset's observations against replicates of its own design
/// simulated with a population model (design.hpp), binned by time, as PsN's `vpc` computes them.
///
/// The observations are the dataset's observation records (EVID 0) with a DV and MDV 0. Every
/// replicate simulates the whole design (run_design) and keeps its simulated DV at the same
/// records. In each bin (and stratum):
///  - the observed percentiles (type 7, numpy.percentile's default) of the observed DV;
///  - for each replicate the same percentiles of its simulated DV, and across the replicates the
///    prediction interval of each (its lower and upper (100 - interval) / 2 percentiles and the
///    median, type 7);
///  - with an LLOQ (DesignRun::lloq or lloq_column): the fraction of observations below it,
///    observed (DV < LLOQ) and per replicate (the simulated BLQ flags), with the same interval;
///    the percentiles include the values below the LLOQ (a plot may censor them);
///  - prediction-corrected (Bergstrand et al. 2011, AAPS J 13:143): every observed and
///    simulated value is multiplied by PRED_bin / PRED, PRED being the population prediction of
///    its record (design_population_predictions: eta = kappa = 0) and PRED_bin the median PRED
///    of its bin.
///
/// Bins: given edges (ascending; bin k is [edge_k, edge_k+1), the last also holds its upper
/// edge; every observation must lie within the edges), or automatic per stratum: one bin per
/// distinct observation time when there are at most 20 of them (or fewer than the bins asked
/// for), else `bins` (default 10) bins of nearly equal numbers of observations, their edges at
/// midpoints between distinct times.
///
/// Memory: one replicate's results at a time and per replicate, bin and percentile one number.

#include <cstdint>
#include <limits>
#include <pkscan/design.hpp>
#include <string>
#include <vector>

namespace pkscan {

/// How a VPC bins and summarises.
struct VpcOptions {
  /// Percentiles of the observations in a bin, ascending, in [0, 100].
  std::vector<double> percentiles = {5, 50, 95};
  /// Width of the prediction interval of each percentile across replicates, in (0, 100).
  double interval = 90;
  /// Bin edges (ascending, at least two); empty: automatic.
  std::vector<double> bin_edges;
  /// Automatic bins per stratum when there are more distinct times than this (0: 10, and one
  /// bin per distinct time up to 20 of them).
  int bins = 0;
  /// Prediction-corrected VPC.
  bool prediction_corrected = false;
  /// A dataset column whose values split the observations into strata (empty: none).
  std::string stratify;
};

/// One bin of one stratum.
struct VpcBin {
  std::string stratum;  ///< the stratification column's value ("" without)
  double lower = 0.0;   ///< time edges: [lower, upper)
  double upper = 0.0;
  double time = 0.0;  ///< median observation time of the bin (where a plot draws it)
  std::int64_t observations = 0;
  std::vector<double> observed;  ///< per percentile
  /// per percentile: the lower end of its prediction interval, the median, the upper end
  std::vector<double> simulated;
  /// with an LLOQ: the observed fraction below it and the simulated fraction's interval
  /// (lower, median, upper); NaN without
  double observed_blq = std::numeric_limits<double>::quiet_NaN();
  double simulated_blq[3] = {std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::quiet_NaN()};
};

/// A VPC's table.
struct VpcTable {
  std::vector<double> percentiles;  ///< VpcOptions::percentiles
  double interval = 90;             ///< VpcOptions::interval
  std::int64_t replicates = 0;
  bool prediction_corrected = false;
  bool blq = false;                 ///< the run has an LLOQ (the BLQ fractions are filled)
  std::string stratify;             ///< the stratification column ("" without)
  std::vector<VpcBin> bins;         ///< strata in order of first appearance, bins by time
  std::vector<std::string> strata;  ///< in order of first appearance ({""} without)
  /// The observations as compared (prediction-corrected in a pcVPC), bin by bin: their times,
  /// values and strata (indices into `strata`).
  std::vector<double> observation_time;
  std::vector<double> observation_value;
  std::vector<int> observation_stratum;
};

/// The population predictions (NONMEM's PRED) at the design's observation records (EVID 0, in
/// dataset order): every record's parameters at eta = 0 and kappa = 0 (the typical values under
/// the covariate effects at the record's covariates).
/// @throws as check_design_run
std::vector<double> design_population_predictions(const DesignRun& run);

/// Checks a VPC before anything runs: check_design_run, a residual error (the simulated
/// observations are compared with observations), at least 2 replicates, the percentiles and
/// interval, the edges (ascending, covering every observation), the stratification column, and
/// at least one observation with a DV. Errors carry fields (`percentiles[i]`, `interval`,
/// `bin_edges[i]`, `bins`, `stratify`, `replicates`, `residual`).
/// @throws InvalidArgument, DomainError, ConfigError
void check_vpc(const DesignRun& run, const VpcOptions& options);

/// Simulates the replicates of the design and computes the VPC's table. `progress` is called
/// after each replicate.
/// @throws what check_vpc and run_design throw; DomainError for a prediction-corrected VPC whose
///         record has PRED 0 in a bin whose median PRED is not 0 (naming the record's line)
VpcTable run_vpc(const DesignRun& run, const VpcOptions& options,
                 const DesignProgressFn& progress = {});

}  // namespace pkscan
