#pragma once
/// @file dataset.hpp
/// Reading NONMEM-format datasets (CSV): subjects, their dose and observation records, and the
/// per-record model parameters and covariates that travel with them.
///
/// The reader checks the format and the NONMEM record rules (see the conventions block at the
/// top of engine/events/dataset_reader.cpp) and reports every problem as a ConfigError carrying the
/// file, the 1-based line and the 1-based column (field index) of the offending value. It does not
/// check parameter values (negative rates, zero volumes): the engine validates those. Values
/// keep the dataset's units; pkscan is unit-agnostic (see types.hpp).

#include <cstdint>
#include <limits>
#include <pkscan/models/model.hpp>
#include <string>
#include <vector>

namespace pkscan {

/// One dataset record (row).
struct DatasetRecord {
  std::int64_t line = 0;  ///< 1-based line in the file
  double time = 0.0;      ///< TIME, finite and >= 0, non-decreasing within a subject
  int evid = 0;           ///< 0 observation, 1 dose, 2 other, 3 reset, 4 reset and dose
  double amt = 0.0;       ///< AMT, >= 0 (0 when missing)
  double rate = 0.0;      ///< RATE, >= 0 (0 when missing): 0 bolus, > 0 zero-order rate
  int cmt = 0;      ///< CMT, 1-based; 0 when missing or 0 (the engine applies the NONMEM defaults)
  double ii = 0.0;  ///< II, the dosing interval, >= 0 (0 when missing)
  std::int64_t addl = 0;  ///< ADDL, the number of additional doses, >= 0 (0 when missing)
  int ss = 0;             ///< SS: 0, 1 or 2 (0 when missing)
  double dv = std::numeric_limits<double>::quiet_NaN();  ///< DV, NaN when missing
  bool mdv = false;  ///< MDV (given, or derived: 1 for EVID != 0 or missing DV, else 0)
  /// Values of Dataset::parameter_columns on this row, in that order; NaN when missing.
  /// Not range-checked here (the engine validates parameter values).
  std::vector<double> parameters;
  /// Text of Dataset::covariate_columns on this row, in that order: surrounding spaces and
  /// quotes removed, otherwise as written ("." stays ".").
  std::vector<std::string> covariates;
  /// True for a record that gives a dose (EVID 1 or 4).
  bool is_dose() const noexcept { return evid == 1 || evid == 4; }
};

/// One subject: consecutive records with the same ID.
struct DatasetSubject {
  std::string id;                      ///< ID as written in the file (spaces and quotes removed)
  std::vector<DatasetRecord> records;  ///< in file order, at least one
};

/// A whole dataset.
struct Dataset {
  std::string file;                            ///< path, for messages
  std::vector<std::string> columns;            ///< every header name as written, in file order
  std::vector<std::string> parameter_columns;  ///< the model's names (ModelInfo::parameters) of
                                               ///< the parameters found as columns, in file order
  std::vector<std::string> covariate_columns;  ///< other columns, carried to the output,
                                               ///< original spelling, in file order
  std::vector<DatasetSubject> subjects;        ///< in file order, at least one
  /// Number of records with EVID 0 (observations), over all subjects.
  std::int64_t observation_count() const noexcept;
  /// Number of records, over all subjects.
  std::int64_t record_count() const noexcept;
  /// Index of a covariate column: `name` as written, else compared ignoring case (as NONMEM
  /// data items are); -1 when there is none.
  int covariate_index(const std::string& name) const noexcept;
  /// 1-based position of the column `name` (as written) in the header; 0 when absent.
  int header_column(const std::string& name) const noexcept;
};

/// Largest dataset read_dataset and parse_dataset accept, in bytes (1 GiB).
inline constexpr std::int64_t kMaxDatasetBytes = std::int64_t{1} << 30;

/// Reads a NONMEM-format CSV dataset from a file, for a model.
///
/// @param path file to read; its size is checked (at most kMaxDatasetBytes) before reading
/// @param model the model simulated on it: the names and aliases of its parameters
///        (ModelInfo::parameters: "ka" or "k01") may appear as columns, matched ignoring case and
///        stored under the parameter's name; CMT must lie in 1..model.compartments.size()
/// @return the dataset, subjects and records in file order
/// @throws ConfigError(file, line, column, message) for a file that cannot be read, is too
///         large, or holds bad input; the message names the column (its header name), the value
///         and what is accepted, and column is the 1-based field index (0 when no single field
///         is at fault)
/// @throws InvalidArgument when the model has no compartments (model_info(ModelKind::Linear);
///         a linear model comes from make_linear_model)
/// Thread-safety: reentrant; no shared state.
Dataset read_dataset(const std::string& path, const ModelInfo& model);

/// Parses a NONMEM-format CSV dataset held in memory; the same rules as read_dataset.
///
/// @param text the whole file's content (at most kMaxDatasetBytes)
/// @param file name used in messages and stored in Dataset::file
/// @param model the model, as for read_dataset
/// @throws ConfigError for bad input, as read_dataset
/// @throws InvalidArgument when the model has no compartments
Dataset parse_dataset(const std::string& text, const std::string& file, const ModelInfo& model);

}  // namespace pkscan
