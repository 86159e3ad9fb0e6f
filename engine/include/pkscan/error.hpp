#pragma once
/// @file error.hpp
/// The pkscan exception hierarchy. Library code reports misuse and bad input by throwing one of
/// these classes and never aborts, exits or prints. The command-line program maps them to exit
/// statuses: InvalidArgument, DomainError and ConfigError are bad input (2), BackendUnavailable
/// is 3, DeviceError and any other Error are 1.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace pkscan {

/// Base of every exception pkscan throws.
///
/// An error about one value also says which value (field()), what it was (value()) and the rule
/// it broke (rule()), so that a front end that knows where the value came from can report it
/// there: the run-file loader maps field() to the YAML node's file:line:column, and each rule is
/// written once, in the library.
///
/// A field path names the value inside the object the caller passed, by the C++ member names of
/// pkscan's public types, with 0-based indices as in C++: `grid.dt`, `grid.steps`,
/// `doses[2].time`, `output.steps[0]`, `parameters[3].CL` (row 3 of the parameter batch, the
/// parameter by its canonical name), `typical[1]`, `omega[1][0]`, `covariates[7][0]`,
/// `effects[0].reference`. The message (what()) stays written for people, with 1-based subject and
/// dose numbers ("simulate: dose 3 time is -1, but must be finite and >= 0").
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  /// An error about one value.
  /// @param what the whole message
  /// @param field the value's field path ("" when the error is not about one value)
  /// @param value the value as the message shows it ("-1")
  /// @param rule what it must be ("finite and >= 0"), "" when the message has no such part
  Error(const std::string& what, std::string field, std::string value, std::string rule)
      : std::runtime_error(what),
        field_(std::move(field)),
        value_(std::move(value)),
        rule_(std::move(rule)) {}
  /// The field path of the value that broke a rule, "" when the error is not about one value.
  const std::string& field() const noexcept { return field_; }
  /// The value as the message shows it ("" when not known).
  const std::string& value() const noexcept { return value_; }
  /// What the value must be ("finite and > 0"); "" when the message does not have that shape.
  const std::string& rule() const noexcept { return rule_; }

 private:
  std::string field_;
  std::string value_;
  std::string rule_;
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
