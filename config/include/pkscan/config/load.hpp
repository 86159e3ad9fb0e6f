#pragma once
/// @file load.hpp
/// Run files (YAML) to a pkscan Problem. This is the only part of pkscan that sees yaml-cpp.
/// The contract is shared/spec/run-config.md; docs/run-files.md documents every key.

#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/engine.hpp>
#include <string>

namespace pkscan::config {

/// A parsed, validated run file.
struct RunSpec {
  std::string file;          ///< the run file's path as given
  Problem problem;           ///< what to simulate
  SimulateOptions options;   ///< method, device, precision
  std::string output_path;   ///< output.path ("" when not given)
  int output_path_line = 0;  ///< 1-based location of output.path, 0 if absent
  int output_path_column = 0;
  /// The NONMEM dataset of a `subjects: {dataset: ...}` run (null for grid runs). Then
  /// problem.parameters has one row per dataset subject and problem.grid/doses/output are unused.
  std::shared_ptr<const Dataset> dataset;
  int output_line = 0;  ///< 1-based location of the `output` key, 0 if absent
  int output_column = 0;
};

/// Reads and validates a run file.
/// @throws ConfigError (file:line:column, naming the key and the accepted values) for any bad
///         input, including a run too large to hold in memory
/// @throws BackendUnavailable when engine.method/engine.device is not available here
RunSpec load_run_file(const std::string& path);

/// Same, from text already in memory; `file` is used in messages.
RunSpec parse_run_config(const std::string& text, const std::string& file);

}  // namespace pkscan::config
