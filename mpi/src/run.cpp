// Run files split over MPI processes (see pkscan/mpi/run.hpp).
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <memory>
#include <pkscan/config/population_run.hpp>
#include <pkscan/design.hpp>
#include <pkscan/error.hpp>
#include <pkscan/mpi/run.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::mpi {

namespace {

constexpr int kTag = 7301;
// Largest piece of one message (MPI counts are int).
constexpr std::size_t kPiece = std::size_t{1} << 30;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("MPI: ") + what + ": " +
              std::string(text, static_cast<std::size_t>(len)));
}

}  // namespace

Exchange::Exchange(MPI_Comm comm) : comm_(comm) {
  check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  const char* fault = std::getenv("PKSCAN_MPI_FAULT");
  if (fault == nullptr || *fault == '\0') return;
  const std::string f(fault);
  const std::size_t a = f.find(':');
  const std::size_t b = a == std::string::npos ? a : f.find(':', a + 1);
  const std::string kind = b == std::string::npos ? std::string() : f.substr(b + 1);
  try {
    if (kind != "throw" && kind != "kill") throw InvalidArgument("");
    fault_rank_ = std::stoi(f.substr(0, a));
    fault_unit_ = std::stoll(f.substr(a + 1, b - a - 1));
  } catch (const std::exception&) {
    throw InvalidArgument("PKSCAN_MPI_FAULT is \"" + f +
                          "\", but must be RANK:UNIT:throw or RANK:UNIT:kill");
  }
  fault_kill_ = kind == "kill";
}

void Exchange::before_unit(std::int64_t unit) {
  if (rank_ != fault_rank_ || unit != fault_unit_) return;
  if (fault_kill_) std::raise(SIGKILL);
  throw Error("fault injected before chunk " + std::to_string(unit) + " (PKSCAN_MPI_FAULT)");
}

Exchange::~Exchange() {
  while (!outgoing_.empty()) static_cast<void>(wait_oldest());
}

int Exchange::wait_oldest() noexcept {
  Outgoing& o = outgoing_.front();
  const int rc =
      MPI_Waitall(static_cast<int>(o.requests.size()), o.requests.data(), MPI_STATUSES_IGNORE);
  outgoing_.pop_front();
  return rc;
}

void Exchange::send(const std::vector<char>& message) {
  // The size first, then the bytes in pieces; rank 0 receives them in this order (MPI keeps
  // the order of one sender's messages of one tag).
  while (outgoing_.size() >= kInFlight) check(wait_oldest(), "MPI_Waitall");
  Outgoing& o = outgoing_.emplace_back();
  o.bytes = static_cast<std::uint64_t>(message.size());
  o.data = message;
  o.requests.emplace_back();
  check(MPI_Isend(&o.bytes, 1, MPI_UINT64_T, 0, kTag, comm_, &o.requests.back()), "MPI_Isend");
  for (std::size_t at = 0; at < o.data.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, o.data.size() - at);
    o.requests.emplace_back();
    check(MPI_Isend(o.data.data() + at, static_cast<int>(n), MPI_BYTE, 0, kTag, comm_,
                    &o.requests.back()),
          "MPI_Isend");
  }
}

void Exchange::receive(int from, std::vector<char>& message) {
  std::uint64_t bytes = 0;
  check(MPI_Recv(&bytes, 1, MPI_UINT64_T, from, kTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
  message.resize(static_cast<std::size_t>(bytes));
  for (std::size_t at = 0; at < message.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, message.size() - at);
    check(MPI_Recv(message.data() + at, static_cast<int>(n), MPI_BYTE, from, kTag, comm_,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
  }
}

void Exchange::broadcast(std::vector<char>& message) {
  auto bytes = static_cast<std::uint64_t>(message.size());
  check(MPI_Bcast(&bytes, 1, MPI_UINT64_T, 0, comm_), "MPI_Bcast");
  message.resize(static_cast<std::size_t>(bytes));
  for (std::size_t at = 0; at < message.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, message.size() - at);
    check(MPI_Bcast(message.data() + at, static_cast<int>(n), MPI_BYTE, 0, comm_), "MPI_Bcast");
  }
}

int local_ranks(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  int n = 1;
  const int rc = MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  check(rc, "MPI_Comm_size");
  return std::max(n, 1);
}

config::RunReport run(const config::RunSpec& spec, const std::string& path,
                      const PopulationRunOptions& options, MPI_Comm comm) {
  Exchange exchange(comm);
  if (exchange.size() == 1) return config::run(spec, path, options);
  config::RunSpec mine = spec;
  if (mine.options.threads == 0)
    mine.options.threads = std::max(1, resolve_threads(0) / local_ranks(comm));
  const config::RunKind kind = config::run_kind(mine, path);
  PopulationRunOptions split = options;
  split.exchange = &exchange;
  if (exchange.rank() == 0) return config::run(mine, path, split);
  split.progress = nullptr;
  split.pass_progress = nullptr;
  // A dataset run's blocks of subjects, their rows formatted here.
  if (kind == config::RunKind::Dataset) return config::run(mine, path, split);
  if (kind == config::RunKind::Design) {
    // Replicate r is rank r mod size's; its rows are formatted here (CSV), rank 0 appends them.
    // The formatter sees every replicate of this rank once (format()): it counts their rows.
    class Counting final : public DesignSink {
     public:
      explicit Counting(std::unique_ptr<DesignSink> to) : to_(std::move(to)) {}
      bool format(const DesignChunk& c, std::vector<char>& bytes) override {
        rows += c.result->rows();
        return to_->format(c, bytes);
      }
      void write(const DesignChunk&) override {}
      void commit() override {}
      std::int64_t rows = 0;

     private:
      std::unique_ptr<DesignSink> to_;
    };
    const DesignRun run = config::to_design_run(mine);
    Counting formatter(output::make_design_formatter(path, design_layout(run)));
    config::RunReport rep;
    rep.kind = kind;
    rep.summary = run_design(run, formatter, {}, &exchange);
    rep.rows = formatter.rows;
    return rep;
  }
  // Rows are formatted here (CSV), and rank 0 appends them.
  const PopulationRun run = config::to_population_run(mine);
  const std::unique_ptr<ResultSink> formatter =
      output::make_formatter(path, population_layout(run));
  const PopulationRunReport r = run_population(run, *formatter, split);
  config::RunReport rep;
  rep.kind = kind;
  rep.summary = r.summary;
  rep.rows = r.rows;
  return rep;
}

}  // namespace pkscan::mpi
