#pragma once
/// @file error.hpp
/// The pkscan exception hierarchy. Library code reports misuse and bad input by throwing one of
/// these classes and never aborts, exits or prints. The command-line program maps them to exit
/// statuses: InvalidArgument, DomainError and ConfigError are bad input (2), BackendUnavailable
/// is 3, DeviceError and any other Error are 1.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pkscan {

/// Base of every exception pkscan throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Shapes, sizes, unknown names, inconsistent options: the call itself is malformed.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A value outside its domain: negative dose, NaN time, non-positive volume, a run too large.
class DomainError : public Error {
 public:
  using Error::Error;
};

/// A run file that cannot be used. Carries the file and, where known, the 1-based line and
/// column of the offending YAML node (0 when unknown).
class ConfigError : public Error {
 public:
  /// @param file path of the run file as the user gave it
  /// @param line 1-based line, 0 when unknown
  /// @param column 1-based column, 0 when unknown
  /// @param message what is wrong, naming the key and the accepted values
  ConfigError(std::string file, int line, int column, const std::string& message);
  /// The run file.
  const std::string& file() const noexcept { return file_; }
  /// 1-based line of the node, 0 when unknown.
  int line() const noexcept { return line_; }
  /// 1-based column of the node, 0 when unknown.
  int column() const noexcept { return column_; }
  /// The message without the location prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  std::string file_;
  int line_;
  int column_;
  std::string message_;
};

/// The requested method or device is not compiled into this build or not usable on this
/// machine (no CUDA device, driver missing).
class BackendUnavailable : public Error {
 public:
  using Error::Error;
};

/// A CUDA runtime failure (out of device memory, launch failure, driver error).
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// Formats a number for an error message with enough digits to be recognisable ("0.1", "1e+300").
std::string format_value(double value);

}  // namespace pkscan
