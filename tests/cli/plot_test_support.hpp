#pragma once
// Helpers shared by the `pkscan plot` tests (plot_test.cpp, plot_groups_test.cpp): the gnuplot
// program, PNG sizes, and the checks of a successful plot and of a plot error.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {

// Sets (or unsets, with nullptr) an environment variable for the lifetime of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::string old_;
  bool had_ = false;
};

// The gnuplot program on PATH; empty when there is none.
inline std::string gnuplot_path() {
  const char* path = std::getenv("PATH");
  for (const std::string& dir : split_csv(replace_all(path ? path : "", ":", ","))) {
    struct stat st {};
    const std::string p = (dir.empty() ? "." : dir) + "/gnuplot";
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0)
      return p;
  }
  return "";
}

// Whether gnuplot is on PATH (the PNG tests need it; the error tests do not).
inline bool have_gnuplot() { return !gnuplot_path().empty(); }

#define REQUIRE_GNUPLOT() \
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed (Debian: gnuplot-nox)"

// Width and height from a PNG's signature and IHDR chunk; {0, 0} when it is not a PNG.
inline std::pair<std::uint32_t, std::uint32_t> png_size(const std::string& path) {
  const std::string b = read_text(path);
  const std::string signature = "\x89PNG\r\n\x1a\n";
  if (b.size() < 24 || b.compare(0, 8, signature) != 0 || b.compare(12, 4, "IHDR") != 0)
    return {0, 0};
  auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

// Runs `pkscan plot` and checks success, the PNG's size, the success line and that nothing
// but the inputs and the PNG is left in the directory.
inline void expect_png(const TempDir& dir, const std::vector<std::string>& args,
                       const std::string& png, std::uint32_t width, std::uint32_t height,
                       const std::string& said) {
  std::vector<std::string> full = {"plot"};
  full.insert(full.end(), args.begin(), args.end());
  const CliResult r = run_pkscan(full);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("pkscan: wrote " + png + " (" + std::to_string(width) + "x" +
                       std::to_string(height) + ", " + said),
            std::string::npos)
      << r.out;
  ASSERT_TRUE(fs::exists(png));
  EXPECT_EQ(png_size(png), std::make_pair(width, height));
  EXPECT_EQ(temp_files(dir.path()), std::vector<std::string>{});
}

// Runs `pkscan plot args...` and checks the exit status, a single line on stderr containing
// `text`, no image and no temporary files.
inline void expect_error(const TempDir& dir, const std::vector<std::string>& args, int status,
                         const std::string& text) {
  std::vector<std::string> full = {"plot"};
  full.insert(full.end(), args.begin(), args.end());
  const CliResult r = run_pkscan(full);
  EXPECT_EQ(r.status, status) << describe(r);
  EXPECT_EQ(r.out, "");
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_EQ(r.err.rfind("pkscan: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  EXPECT_EQ(temp_files(dir.path()), std::vector<std::string>{});
  for (const std::string& n : list_tree(dir.path()))
    EXPECT_FALSE(n.size() > 4 && n.compare(n.size() - 4, 4, ".png") == 0) << n << " was written";
}

}  // namespace pkscan::cli::test
