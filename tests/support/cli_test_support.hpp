#pragma once
// Helpers shared by the command-line tests (tests/cli): run the CLI in-process, scratch
// directories, CSV reading. Every helper that checks something does so with a gtest assertion.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cli.hpp>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace pkscan::cli::test {

namespace fs = std::filesystem;

/// What one `pkscan ...` call did.
struct CliResult {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs `pkscan args...` in-process.
inline CliResult run_pkscan(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliResult r;
  r.status = run_cli(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

/// Prints a CliResult in failure messages.
inline std::string describe(const CliResult& r) {
  return "exit status " + std::to_string(r.status) + "\n--- stdout ---\n" + r.out +
         "\n--- stderr ---\n" + r.err + "\n--------------";
}

/// A scratch directory (support/scratch_dir.hpp), whole files as strings (support/files.hpp).
using TempDir = ::pkscan::test::ScratchDir;
using ::pkscan::test::read_text;
using ::pkscan::test::write_text;

/// Lines of `text` without their '\n' (a final '\n' does not start an extra empty line).
inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

/// Fields of one CSV line (the contract's CSV has no quoting).
inline std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(
        line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

/// Names (relative paths) of everything under `dir`, recursively, sorted.
inline std::vector<std::string> list_tree(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().lexically_relative(dir).string());  // a symlink by its own name
  std::sort(names.begin(), names.end());
  return names;
}

/// Names under `dir` that look like a temporary file or commit journal of pkscan
/// (`.NAME.pkscan-tmp.*`, `.NAME.pkscan-commit`; `*.tmp.*` for plot's directory).
inline std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> found;
  for (const std::string& n : list_tree(dir))
    if (n.find(".tmp.") != std::string::npos || n.find(".pkscan-tmp.") != std::string::npos ||
        n.find(".pkscan-commit") != std::string::npos)
      found.push_back(n);
  return found;
}

/// The contract's CSV header (docs/output.md).
inline const char* const kCsvHeader =
    "id,time,amount_depot,amount_central,amount_peripheral,conc_depot,conc_central,"
    "conc_peripheral";

/// The repository's example run files.
inline fs::path examples_dir() { return fs::path(PKSCAN_SOURCE_DIR) / "config" / "examples"; }

/// Replaces every occurrence of `from` in `s` by `to`.
inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t pos = s.find(from); pos != std::string::npos;
       pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

/// Number of significant digits in a decimal number's text ("0.00123" -> 3, "1.5e-07" -> 2).
inline int significant_digits(const std::string& text) {
  std::string mantissa = text.substr(0, text.find_first_of("eE"));
  std::string digits;
  for (char c : mantissa)
    if (c >= '0' && c <= '9') digits += c;
  const std::size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 1;
  digits = digits.substr(first);
  if (mantissa.find('.') != std::string::npos) return static_cast<int>(digits.size());
  const std::size_t last = digits.find_last_not_of('0');  // integer: trailing zeros are padding
  return static_cast<int>(last + 1);
}

}  // namespace pkscan::cli::test
