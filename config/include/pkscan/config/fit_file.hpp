#pragma once
/// @file fit_file.hpp
/// Population fit files (YAML; docs/run-files.md, "Fit files"): a model, a NONMEM dataset,
/// THETA, the inter-individual variability (OMEGA), the residual error (SIGMA) and the
/// estimation method, read into a PopulationModel at the initial estimates.

#include <limits>
#include <memory>
#include <optional>
#include <pkscan/dataset.hpp>
#include <pkscan/estimation.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/output/output.hpp>
#include <string>
#include <vector>

namespace pkscan::config {

/// One `theta` entry.
struct FitTheta {
  std::string name;  ///< the model's parameter name (canonical, also when the file used an alias)
  int column = -1;   ///< its column (ModelInfo::parameters)
  double init = 0.0;
  double lower = -std::numeric_limits<double>::infinity();
  double upper = std::numeric_limits<double>::infinity();
  bool fixed = false;
};

/// A parsed, checked fit file.
struct FitFile {
  std::string file;                        ///< the fit file's path as given
  std::shared_ptr<const ModelInfo> model;  ///< `model`
  std::shared_ptr<const Dataset> dataset;  ///< `dataset`, read
  std::vector<FitTheta> theta;             ///< `theta`, in file order
  PopulationModel population;              ///< THETA, OMEGA, SIGMA at the initial estimates
  /// `covariates`: the effects are in population.effects; these are estimated (indices)
  std::vector<int> effect_indices;
  std::vector<bool> effect_fixed;  ///< per effect: `coefficient: {fixed: true}`
  bool omega_block = false;        ///< `iiv.block` (a full OMEGA) rather than `iiv.diagonal`
  bool omega_fixed = false;        ///< `iiv.fixed`: OMEGA is not estimated
  bool sigma_fixed = false;        ///< `error.fixed`: SIGMA is not estimated
  bool proportional = false;       ///< `error` has a proportional part
  bool additive = false;           ///< `error` has an additive part
  EstimationMethod method = EstimationMethod::Focei;  ///< `estimation.method`
  /// `estimation.max_evaluations`: 0 evaluates at the estimates given (NONMEM's MAXEVAL=0)
  int max_evaluations = 10000;
  /// `estimation.covariance` (absent or `none`: no covariance step)
  std::optional<CovarianceKind> covariance;
  std::string output_path;                ///< `output.path`
  std::vector<output::InputFile> inputs;  ///< the fit file and the dataset
};

/// Reads a fit file. Bad input is a ConfigError naming the file, line and column of the YAML
/// node (or the dataset's cell).
/// @throws ConfigError
FitFile load_fit_file(const std::string& path);

/// Parses a fit file held in memory (`file` names it in messages and resolves the dataset path).
/// @throws ConfigError
FitFile parse_fit_file(const std::string& text, const std::string& file);

}  // namespace pkscan::config
