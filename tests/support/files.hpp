#pragma once
// Whole files as strings: writing a test's input, reading what a run wrote.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace pkscan::test {

/// Writes `text` to `path` (creating or truncating it); asserts that it worked.
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(f.good()) << "cannot create " << path;
  f << text;
  f.close();
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

/// The whole file as a string ("" when it cannot be read; callers check existence first).
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace pkscan::test
