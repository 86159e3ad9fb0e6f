// The progress display of long runs (apps/progress.cpp), driven by a fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <progress.hpp>
#include <sstream>
#include <string>

namespace pkscan::cli {
namespace {

TEST(Progress, NothingForShortRuns) {
  std::ostringstream err;
  double t = 0;
  Progress p(err, true, "subjects", 2.0, 10.0, [&] { return t; });
  for (int i = 1; i <= 10; ++i) {
    t = 0.1 * i;  // 1 s in all
    p.update(i * 100, 1000);
  }
  p.finish();
  EXPECT_EQ(err.str(), "");
  EXPECT_EQ(p.writes(), 0);
}

TEST(Progress, BarOnATerminalRedrawsInPlace) {
  std::ostringstream err;
  double t = 0;
  Progress p(err, true, "subjects", 2.0, 10.0, [&] { return t; });
  for (int i = 1; i <= 10; ++i) {
    t = 1.0 * i;  // 10 s in all, 1000 subjects: 100 subjects/s
    p.update(i * 100, 1000);
  }
  p.finish();
  const std::string s = err.str();
  // Drawn from t = 2 s on (9 updates) plus the final redraw; one newline at the very end.
  EXPECT_EQ(p.writes(), 10);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(std::count(s.begin(), s.end(), '\r'), 10);
  EXPECT_NE(
      s.find("[######........................] 20% 200/1000 subjects, 100 subjects/s, 8s left"),
      std::string::npos)
      << s;
  EXPECT_NE(s.find("100% 1000/1000 subjects"), std::string::npos) << s;
}

TEST(Progress, PlainLinesWhenNotATerminal) {
  std::ostringstream err;
  double t = 0;
  Progress p(err, false, "subjects", 2.0, 10.0, [&] { return t; });
  for (int i = 1; i <= 30; ++i) {
    t = 1.0 * i;  // 30 s in all
    p.update(i * 10, 300);
  }
  p.finish();
  const std::string s = err.str();
  EXPECT_EQ(s.find('\r'), std::string::npos);
  // Lines at t = 2, 12, 22 s and a final one.
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 4) << s;
  EXPECT_EQ(s.rfind("pkscan: progress: 6% 20/300 subjects", 0), 0u) << s;
  EXPECT_NE(s.find("pkscan: progress: 100% 300/300 subjects, 10 subjects/s, 0s left\n"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace pkscan::cli
