#include <cstdio>
#include <pkscan/error.hpp>

namespace pkscan {

namespace {
std::string located(const std::string& file, int line, int column, const std::string& message) {
  std::string where = file;
  if (line > 0) {
    where += ":" + std::to_string(line);
    if (column > 0) where += ":" + std::to_string(column);
  }
  return where.empty() ? message : where + ": " + message;
}
}  // namespace

ConfigError::ConfigError(std::string file, int line, int column, const std::string& message)
    : Error(located(file, line, column, message)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(message) {}

std::string format_value(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", value);
  return buf;
}

}  // namespace pkscan
