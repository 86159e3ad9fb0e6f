// pkscan-bench's output-bound workload (--write DIR, bench.hpp): the benchmark problem streamed
// into an HDF5 file beside a plain write of the file's size in the same folder.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <pkscan/output/sink.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/threads.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "bench.hpp"

namespace pkscan::bench {

namespace {

// A sink that keeps nothing: run_population's simulation alone.
class DiscardSink final : public ResultSink {
 public:
  void write(const Chunk&) override {}
  void write_summary(const TimeSummaryTable&) override {}
  void commit() override {}
};

// Seconds to write `bytes` of incompressible bytes to a new file at `path` with write() in 4 MiB
// blocks, then fsync (what a result file's commit does); the file is removed.
double disk_write_seconds(const std::string& path, std::uint64_t bytes) {
  std::vector<unsigned char> block(std::size_t{4} << 20);
  std::mt19937_64 rng(1);
  for (std::size_t i = 0; i + 8 <= block.size(); i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(block.data() + i, &v, 8);
  }
  const double t0 = now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("--write: cannot create " + path + ": " + std::strerror(errno));
  std::uint64_t left = bytes;
  bool ok = true;
  std::uint64_t serial = 0;
  while (left > 0 && ok) {
    // No two 4 KiB pages the same (a storage layer that deduplicates gains nothing).
    for (std::size_t page = 0; page < block.size(); page += 4096, ++serial)
      std::memcpy(block.data() + page, &serial, sizeof serial);
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, block.size()));
    ok = ::write(fd, block.data(), n) == static_cast<ssize_t>(n);
    left -= n;
  }
  ok = ok && ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  const double seconds = now() - t0;
  ::unlink(path.c_str());
  if (!ok) throw Error("--write: cannot write " + path + ": " + why);
  return seconds;
}

}  // namespace

// The output-bound workload (docs/performance.md): the benchmark problem, every step an output
// time, streamed by run_population into DIR/pkscan-bench.h5 (the HDF5 sink: chunks compressed
// on all threads), beside a plain write of the file's size in DIR and the same run into a sink
// that keeps nothing, all in this process.
void run_write_bench(const BenchOptions& o, std::ostream& out) {
  PopulationRun run = bench_population_run(o);
  run.trajectories = true;
  run.summaries = false;
  const std::string path = o.write_dir + "/pkscan-bench.h5";
  struct stat st {};
  const Timings h5 = time_calls(o.repeat, [&] {
    const std::unique_ptr<ResultSink> sink = output::make_sink(path, population_layout(run));
    run_population(run, *sink);
    if (::stat(path.c_str(), &st) != 0) throw Error("--write: no file " + path);
  });
  ::unlink(path.c_str());
  const auto bytes = static_cast<std::uint64_t>(st.st_size);
  const std::string plain = o.write_dir + "/pkscan-bench.bin";
  std::vector<double> disk;
  for (int i = 0; i <= o.repeat; ++i) disk.push_back(disk_write_seconds(plain, bytes));
  disk.erase(disk.begin());  // the first as a warm-up, as time_calls does
  const double disk_s = *std::min_element(disk.begin(), disk.end());
  DiscardSink discard;
  const double simulate_s = time_calls(o.repeat, [&] { run_population(run, discard); }).best();
  const double h5_s = h5.best();
  const std::size_t scalar = o.precision == Precision::Float64 ? 8 : 4;
  const RunLayout layout = population_layout(run);
  const double raw = 2.0 * static_cast<double>(o.n) * static_cast<double>(layout.times.size()) *
                     static_cast<double>(layout.model->compartments.size()) *
                     static_cast<double>(scalar);  // amounts and concentrations
  std::ostringstream s;
  s.precision(6);
  s << "{\"workload\":\"write\",\"format\":\"hdf5\",\"n\":" << o.n << ",\"t\":" << o.t
    << ",\"precision\":\"" << (o.precision == Precision::Float64 ? "float64" : "float32")
    << "\",\"threads\":" << pkscan::resolve_threads(o.threads) << ",\"repeat\":" << o.repeat
    << ",\"best_s\":" << h5_s << ",\"median_s\":" << median(h5.times) << ",\"file_bytes\":" << bytes
    << ",\"raw_bytes\":" << raw << ",\"file_mb_per_s\":" << static_cast<double>(bytes) / h5_s / 1e6
    << ",\"disk_best_s\":" << disk_s << ",\"disk_median_s\":" << median(disk)
    << ",\"disk_mb_per_s\":" << static_cast<double>(bytes) / disk_s / 1e6
    << ",\"file_over_disk\":" << disk_s / h5_s
    << ",\"file_over_disk_median\":" << median(disk) / median(h5.times)
    << ",\"simulate_s\":" << simulate_s << ",\"regime\":\""
    << (simulate_s > 0.8 * h5_s ? "compute" : "output") << "\"}\n";
  out << s.str();
}

}  // namespace pkscan::bench
