#pragma once
/// @file run.hpp
/// Runs beyond one machine: a run file's run split over the processes of an MPI communicator
/// (docs/scale-out.md). The library `pkscan::mpi` (CMake component `mpi`) links Open MPI; the
/// core library and pkscan::config do not.
///
/// Every process calls run() with the same run file and path. A population, sweep or HDF5 run
/// (config::RunKind::Streamed) is split by its chunks (whole blocks of 1024 subjects, at most
/// about 64 MiB of results each): chunk u is simulated (and, without trajectories, summarised)
/// by rank u mod size, and rank 0 receives the others' in row order, writes and commits the
/// result files (RunExchange, pkscan/population_run.hpp). The files are byte-identical to those of
/// config::run() in one process, for any number of ranks. The passes of exact percentiles are
/// split over the ranks too (RunExchange::broadcast). A design run (`subjects: {dataset,
/// population}`) is split by its replicates: replicate r is simulated by rank r mod size and
/// rank 0 writes them all (run_design). A grid run written to CSV is split by its chunks as a
/// streamed run, and a dataset run by blocks of 1024 subjects, each block's rows formatted by the
/// rank that simulated it (config::run). A rank other than 0 keeps simulating while its
/// last messages travel, but at most Exchange::kInFlight messages ahead of rank 0, so memory
/// stays bounded.
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <pkscan/config/run.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <vector>

namespace pkscan::mpi {

/// A RunExchange over an MPI communicator: messages to rank 0 with MPI_Isend (tag 7301), and
/// from rank 0 to all with MPI_Bcast, in pieces of at most 1 GiB. Only the thread that made it
/// calls MPI (MPI_THREAD_FUNNELED suffices).
///
/// Fault injection for tests: when the environment variable PKSCAN_MPI_FAULT holds
/// "RANK:UNIT:throw" or "RANK:UNIT:kill", the process of rank RANK throws an Error, or sends
/// itself SIGKILL, before it simulates chunk UNIT (0-based, in row order).
class Exchange final : public RunExchange {
 public:
  /// @throws InvalidArgument for a malformed PKSCAN_MPI_FAULT; Error when MPI fails
  explicit Exchange(MPI_Comm comm);
  /// Waits for the messages still on their way to rank 0.
  ~Exchange() override;
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  /// Starts sending a copy of `message` (MPI_Isend) and returns; waits first for the oldest
  /// message in flight when kInFlight are, so a rank runs at most that far ahead of rank 0.
  void send(const std::vector<char>& message) override;
  void receive(int from, std::vector<char>& message) override;
  void before_unit(std::int64_t unit) override;
  bool can_broadcast() const noexcept override { return true; }
  /// MPI_Bcast from rank 0 (its size first), in pieces of at most 1 GiB.
  void broadcast(std::vector<char>& message) override;

 private:
  static constexpr std::size_t kInFlight = 2;
  struct Outgoing {
    std::uint64_t bytes = 0;
    std::vector<char> data;
    std::vector<MPI_Request> requests;
  };
  // Waits for the oldest message in flight and drops it; returns MPI_Waitall's code.
  int wait_oldest() noexcept;

  MPI_Comm comm_;
  std::deque<Outgoing> outgoing_;
  int rank_ = 0;
  int size_ = 1;
  int fault_rank_ = -1;
  std::int64_t fault_unit_ = -1;
  bool fault_kill_ = false;
};

/// Processes of `comm` on this process's node (MPI_COMM_TYPE_SHARED), >= 1.
int local_ranks(MPI_Comm comm);

/// The run of a run file (config::run's contract) split over the processes of `comm`. When
/// spec.options.threads is 0, each rank uses the machine's default threads divided by the ranks
/// on its node (at least 1). Rank 0 returns what config::run() returns; another rank returns
/// the rows it simulated (RunReport::rows) and writes nothing.
/// @throws what config::run() throws, on rank 0 also another rank's error (its message led by
///         "rank R: "); an error on a rank other than 0 is also sent to rank 0
config::RunReport run(const config::RunSpec& spec, const std::string& path,
                      const PopulationRunOptions& options, MPI_Comm comm);

}  // namespace pkscan::mpi
