// `pkscan plot`: reads a result (contract CSV, summary CSV or HDF5), writes a gnuplot script
// with the data inline (datablocks) into a private temporary directory next to the output, runs
// gnuplot there by fork/exec (no shell; no user text reaches gnuplot except the title and the
// subject and group labels, quoted as gnuplot strings with enhanced text off), and renames the PNG
// over the output. The temporary directory is removed in every case.
#include "plot.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <pkscan/error.hpp>
#include <pkscan/output/read.hpp>
#include <pkscan/output/temp_files.hpp>
#include <string>
#include <system_error>

#include "plot_data.hpp"
#include "signals.hpp"

namespace pkscan::cli {

namespace {

namespace fs = std::filesystem;

// The gnuplot program: `program`, else $PKSCAN_GNUPLOT, else `gnuplot` on PATH.
std::string find_gnuplot(const std::string& program) {
  std::string name = program;
  std::string source;
  if (name.empty()) {
    const char* env = std::getenv("PKSCAN_GNUPLOT");
    if (env != nullptr && *env != '\0') {
      name = env;
      source = "PKSCAN_GNUPLOT";
    }
  }
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) name = "gnuplot";
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    throw BackendUnavailable("gnuplot not found; install gnuplot-nox (" +
                             (source.empty() ? std::string("the gnuplot program") : source) +
                             " names " + name + ", which is not an executable file)");
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (executable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw BackendUnavailable("gnuplot not found; install gnuplot-nox");
}

// A private directory next to the output (a registered temporary directory, temp_files.hpp:
// removed with its contents on destruction, on a terminating signal, or by the next plot to the
// same output after SIGKILL).
class TempDir {
 public:
  explicit TempDir(const std::string& output) {
    try {
      path_ = output::create_temp_dir(output);
    } catch (const Error& e) {
      throw InvalidArgument(std::string("--output: ") + e.what());
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() { output::remove_temp_file(path_); }
  std::string file(const char* name) const { return path_ + "/" + name; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// The line of gnuplot's stderr that says what went wrong: the first `"plot.gp" line N: ...`
// (gnuplot may first echo the offending command), else the first non-blank line.
std::string first_error_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, first;
  while (std::getline(in, line)) {
    const std::size_t b = line.find_first_not_of(" \t\r^");
    if (b == std::string::npos) continue;
    line = line.substr(b);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (first.empty()) first = line;
    if (line.find("line ") != std::string::npos && line.find(':') != std::string::npos) return line;
  }
  return first;
}

// Runs `gnuplot -d plot.gp` in `dir` (-d: ignore the user's init files), stdin from /dev/null,
// stdout and stderr into plot.err. Returns the wait status.
int run_gnuplot(const std::string& gnuplot, const TempDir& dir) {
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  const std::string& dir_path = dir.path();
  const char* argv[] = {"gnuplot", "-d", "plot.gp", nullptr};
  const char exec_failed[] = "pkscan: cannot execute the gnuplot program\n";
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot start gnuplot: ") + std::strerror(errno));
  if (pid == 0) {
    restore_signal_mask_in_child();  // gnuplot starts with the signals it would have had
    if (::chdir(dir_path.c_str()) != 0) ::_exit(127);
    const int in = ::open("/dev/null", O_RDONLY);
    const int err = ::open("plot.err", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || err < 0) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(err, 1);
    ::dup2(err, 2);
    ::execv(gnuplot.c_str(), const_cast<char* const*>(argv));
    const ssize_t ignored = ::write(2, exec_failed, sizeof exec_failed - 1);
    (void)ignored;
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error(std::string("cannot wait for gnuplot: ") + std::strerror(errno));
  }
  return status;
}

}  // namespace

CLI::App* add_plot_command(CLI::App& app, PlotOptions& o) {
  CLI::App* plot = app.add_subcommand(
      "plot", "Draw the concentration-time curves of a result with gnuplot (PNG)");
  plot->add_option("result", o.result,
                   "Result: a CSV written by pkscan run (its <stem>.summary.csv is drawn when "
                   "present), a summary CSV, an .h5 file, or the <stem>.table.csv of pkscan fit "
                   "FILE.yaml (goodness-of-fit plots)")
      ->required();
  plot->add_option("--output,-o", o.output, "PNG file to write")->required();
  plot->add_option("--width", o.width, "Image width in pixels (default 800)")
      ->check(CLI::Range(64, 10000));
  plot->add_option("--height", o.height, "Image height in pixels (default 500)")
      ->check(CLI::Range(64, 10000));
  plot->add_flag("--log", o.log, "Logarithmic concentration axis (non-positive values skipped)");
  plot->add_option("--compartment", o.compartment,
                   "Compartment to draw (default: central, else the first)");
  plot->add_option("--max-subjects", o.max_subjects,
                   "Most subject lines drawn without a summary (default 30)")
      ->check(CLI::Range(1, 100000));
  plot->add_option("--max-groups", o.max_groups,
                   "Most groups of a summary by group drawn, each its own band (default 10)")
      ->check(CLI::Range(1, 100000));
  plot->add_option("--title", o.title, "Title (default: the result file's name)");
  plot->footer(
      "Needs gnuplot (Debian: gnuplot-nox); PKSCAN_GNUPLOT may name the program.\n"
      "Exit status: 0 success; 2 unreadable or invalid result file or bad option; 3 gnuplot not\n"
      "found; 1 gnuplot failed. Errors are one line on stderr.");
  return plot;
}

void render_png(const std::string& script, const std::string& output, const std::string& program) {
  const TempDir dir(output);  // a bad output directory is bad input, gnuplot or not
  const std::string gnuplot = find_gnuplot(program);
  {
    std::ofstream f(dir.file("plot.gp"), std::ios::binary);
    f << script;
    f.close();
    if (!f) throw Error("cannot write the gnuplot script in " + dir.path());
  }
  const int status = run_gnuplot(gnuplot, dir);
  if (WIFSIGNALED(status))
    throw Error("gnuplot was killed by signal " + std::to_string(WTERMSIG(status)));
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) {
    const std::string line = first_error_line(dir.file("plot.err"));
    throw Error("gnuplot failed: " + (line.empty() ? "exit status " + std::to_string(code) : line));
  }
  const std::string png = dir.file("plot.png");
  std::error_code ec;
  if (!fs::is_regular_file(png, ec) || fs::file_size(png, ec) == 0) {
    const std::string line = first_error_line(dir.file("plot.err"));
    throw Error("gnuplot failed: it wrote no image" + (line.empty() ? "" : ": " + line));
  }
  ::chmod(png.c_str(), 0644);
  if (::rename(png.c_str(), output.c_str()) != 0)
    throw Error("cannot move the image into place at " + output + ": " + std::strerror(errno));
}

void run_plot(const PlotOptions& o, std::ostream& out) {
  if (!plot::ends_with(o.output, ".png"))
    throw InvalidArgument("--output is \"" + o.output + "\", but must end in .png");
  const plot::Script script =
      plot::is_fit_table(o.result)
          ? plot::fit_table_script(o)
          : plot::make_script(
                output::read_result(o.result, o.compartment, o.max_subjects, o.max_groups), o);
  render_png(script.text, o.output, o.gnuplot);
  out << "pkscan: wrote " << o.output << " (" << o.width << "x" << o.height << ", " << script.what
      << ")\n";
}

}  // namespace pkscan::cli
