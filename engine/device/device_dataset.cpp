// Datasets (event lists) on device 'cuda': simulate_dataset_on_device (grid/device_backend.hpp),
// written once over a system's Runtime, so the host system runs every line of it in CI.
//
// The event solver's logic never depends on the state (device/dataset_job.hpp), so the work
// splits in two:
//   - the host, on its threads, runs each subject's events once without a state: the plan, the
//     parameter rows and their checks, event order after lag and F, infusions, resets, steady
//     states in closed form, and each parameter row's eigendecomposition. It records the state
//     operations (EventSolver::record_rows) and writes the result's index columns;
//   - the device replays each subject's record on one thread (dataset_kernels.hpp): per step the
//     exponentials of the eigenvalues, K(d) and G(d), and x <- K x + G r, then the observation
//     rows (amounts, concentrations, prediction) and the status.
// Numeric contract: the CPU event solver's arithmetic (events/step_hd.hpp on both sides): the
// host system gives the CPU's bits; CUDA differs from them only through its exp and expm1.
//
// Pipeline: subjects go in chunks of about Runtime::target_chunk_bytes() (at most 64 MiB) of
// program and output. Per chunk: record (host threads, each into its own part of the chunk),
// upload the parts where they go (no packing: each subject's offsets are relative to its part's
// reals, base[j] in dataset_job.hpp), launch, and, while the device runs, record the next chunk;
// then copy the rows straight into the result. Two chunks' programs are kept by the calling
// thread between calls (thread_local), so repeated calls allocate no host memory for them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/events.hpp>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "device/buffer.hpp"
#include "device/runtime.hpp"
#include "events/plan.hpp"
#include "events/program.hpp"
#include "events/solver.hpp"
#include "grid/device_backend.hpp"

namespace pkscan::detail {

namespace {

// Subjects [first, first + count) recorded by one thread, in order.
struct Part {
  std::int64_t first = 0, count = 0;
  DatasetProgram prog;
};

// About how many bytes subject s takes on the device (program and output), to size chunks:
// each event becomes a step and an operation, with a rates vector at worst.
std::int64_t subject_bytes(const DatasetSubject& subject, int n) {
  std::int64_t events = 1;
  for (const DatasetRecord& r : subject.records)
    events += (1 + std::max<std::int64_t>(r.addl, 0)) * (r.rate > 0.0 ? 2 : 1);
  const std::int64_t per_event =
      2 * static_cast<std::int64_t>(sizeof(device::ProgramOp)) + 8 * n + (2 * n + 1) * 8;
  return events * per_event + 8 * (3 * n * n + n);
}

// The bytes a chunk aims at: the runtime's pipelining target, at most 64 MiB (the host keeps two
// chunks' programs), and at most a quarter of the device's free memory (the estimate of
// subject_bytes can be short, by up to 3x for rows without a fast eigendecomposition, whose
// steps carry K and G).
std::int64_t chunk_target(device::Runtime& rt) {
  std::size_t free_bytes = 0, total_bytes = 0;
  rt.memory_info(free_bytes, total_bytes);
  return std::max<std::int64_t>(
      1, std::min({static_cast<std::int64_t>(rt.target_chunk_bytes()), std::int64_t{64} << 20,
                   static_cast<std::int64_t>(free_bytes / 4)}));
}

// One chunk of subjects and its recorded programs, in host memory.
struct Chunk {
  std::int64_t first = 0, count = 0, row0 = 0, row1 = 0;
  std::vector<Part> parts;          // grown, never shrunk: kept by the calling thread
  std::vector<std::int64_t> index;  // begin (count + 1), then base (count)
  std::int64_t ops = 0, reals = 0;  // totals over the parts
};

// A call: chunks recorded by the host's threads, run by the device one after another, the next
// chunk recorded while the device runs the current one.
class DatasetRun {
 public:
  DatasetRun(const DatasetSetup& setup, const ParameterBatch& parameters,
             const std::vector<std::int64_t>& first_row, int threads, DatasetResult& res,
             device::Runtime& rt)
      : setup_(setup),
        parameters_(parameters),
        first_row_(first_row),
        threads_(std::max(1, threads)),
        res_(res),
        rt_(rt),
        in_(rt, false),
        out_(rt, false),
        stream_(rt),
        subjects_(static_cast<std::int64_t>(setup.data->subjects.size())),
        target_(chunk_target(rt)) {}

  void run(Chunk (&chunks)[2]) {
    if (subjects_ == 0) return;
    int cur = 0;
    bounds(chunks[cur], 0);
    record(chunks[cur]);
    while (true) {
      Chunk& c = chunks[cur];
      upload_and_launch(c);
      Chunk& next = chunks[1 - cur];
      bounds(next, c.first + c.count);
      if (next.count > 0) record(next);  // while the device runs c
      finish(c);
      if (next.count == 0) break;
      cur = 1 - cur;
    }
    res_.summary.device_kernel_seconds = kernel_seconds_;
    res_.summary.device_transfer_seconds = transfer_seconds_;
  }

 private:
  // The chunk from subject `first` on: subjects while they fit the target (at least one).
  void bounds(Chunk& c, std::int64_t first) const {
    c.first = first;
    c.count = 0;
    for (std::int64_t bytes = 0; first + c.count < subjects_ && (c.count == 0 || bytes < target_);
         ++c.count)
      bytes +=
          subject_bytes(setup_.data->subjects[static_cast<std::size_t>(first + c.count)], setup_.n);
    if (c.count == 0) return;
    c.row0 = first_row_[static_cast<std::size_t>(first)];
    c.row1 = first + c.count < subjects_ ? first_row_[static_cast<std::size_t>(first + c.count)]
                                         : res_.rows();
  }

  // Records the chunk in contiguous parts (a few per thread, for balance), and its index.
  void record(Chunk& c) {
    const std::int64_t np = std::min<std::int64_t>(c.count, threads_ * 4);
    if (static_cast<std::int64_t>(c.parts.size()) != np)
      c.parts.resize(static_cast<std::size_t>(np));
    for (std::int64_t p = 0; p < np; ++p) {
      Part& part = c.parts[static_cast<std::size_t>(p)];
      part.first = c.first + c.count * p / np;
      part.count = c.first + c.count * (p + 1) / np - part.first;
    }
    struct Worker {
      SubjectPlan plan;
      std::unique_ptr<EventSolver> solver;
    };
    detail::parallel_for(
        np, threads_, 1,
        [&] {
          return Worker{{}, make_event_solver(setup_)};
        },
        [&](std::int64_t p, Worker& w) {
          Part& part = c.parts[static_cast<std::size_t>(p)];
          part.prog.clear();
          for (std::int64_t s = part.first; s < part.first + part.count; ++s) {
            setup_.build_plan(s, w.plan);
            w.solver->record_rows(w.plan, s, parameters_.row(s), res_,
                                  first_row_[static_cast<std::size_t>(s)], part.prog);
          }
        });
    c.index.resize(static_cast<std::size_t>(2 * c.count + 1));
    std::int64_t* begin = c.index.data();
    std::int64_t* base = begin + c.count + 1;
    c.ops = 0;
    c.reals = 0;
    for (const Part& part : c.parts) {
      for (std::int64_t j = 0; j < part.count; ++j) {
        begin[part.first - c.first + j] = c.ops + part.prog.begin[static_cast<std::size_t>(j)];
        base[part.first - c.first + j] = c.reals;
      }
      c.ops += static_cast<std::int64_t>(part.prog.ops.size());
      c.reals += static_cast<std::int64_t>(part.prog.reals.size());
    }
    begin[c.count] = c.ops;
  }

  // Layout of the device's input: index, operations, reals; and of its output: amounts,
  // concentrations, prediction, finite flags.
  struct Layout {
    std::size_t ops = 0, reals = 0, in = 0, conc = 0, pred = 0, finite = 0, out = 0;
  };
  static Layout layout(const Chunk& c, int n) {
    Layout l;
    const std::size_t rows = static_cast<std::size_t>(c.row1 - c.row0);
    const std::size_t un = static_cast<std::size_t>(n);
    l.ops = align_up(c.index.size() * sizeof(std::int64_t), kAlign);
    l.reals = l.ops + align_up(static_cast<std::size_t>(c.ops) * sizeof(device::ProgramOp), kAlign);
    l.in = l.reals + static_cast<std::size_t>(c.reals) * sizeof(double);
    l.conc = align_up(rows * un * sizeof(double), kAlign);
    l.pred = l.conc + align_up(rows * un * sizeof(double), kAlign);
    l.finite = l.pred + align_up(rows * sizeof(double), kAlign);
    l.out = l.finite + static_cast<std::size_t>(c.count);
    return l;
  }

  // Uploads the chunk's index and its parts' programs where they go, and enqueues the kernel.
  void upload_and_launch(const Chunk& c) {
    const Layout l = layout(c, setup_.n);
    in_.reserve(l.in);
    out_.reserve(l.out);
    char* din = static_cast<char*>(in_.ptr());
    char* dout = static_cast<char*>(out_.ptr());
    void* sm = stream_.get();
    stream_.mark(0);
    rt_.copy_to_device(din, c.index.data(), c.index.size() * sizeof(std::int64_t), sm);
    std::size_t ops_at = l.ops, reals_at = l.reals;
    for (const Part& part : c.parts) {
      const DatasetProgram& g = part.prog;
      rt_.copy_to_device(din + ops_at, g.ops.data(), g.ops.size() * sizeof(device::ProgramOp), sm);
      rt_.copy_to_device(din + reals_at, g.reals.data(), g.reals.size() * sizeof(double), sm);
      ops_at += g.ops.size() * sizeof(device::ProgramOp);
      reals_at += g.reals.size() * sizeof(double);
    }
    stream_.mark(1);
    launched_.subjects = c.count;
    launched_.first_row = c.row0;
    launched_.begin = reinterpret_cast<const std::int64_t*>(din);
    launched_.base = launched_.begin + c.count + 1;
    launched_.ops = reinterpret_cast<const device::ProgramOp*>(din + l.ops);
    launched_.reals = reinterpret_cast<const double*>(din + l.reals);
    launched_.amounts = reinterpret_cast<double*>(dout);
    launched_.concentrations = reinterpret_cast<double*>(dout + l.conc);
    launched_.prediction = reinterpret_cast<double*>(dout + l.pred);
    launched_.finite = reinterpret_cast<std::uint8_t*>(dout + l.finite);
    rt_.launch_dataset(setup_.n, launched_, sm);
    stream_.mark(2);
  }

  // Copies the launched chunk's rows into the result and its statuses.
  void finish(const Chunk& c) {
    const device::DatasetChunk& d = launched_;
    const std::size_t rows = static_cast<std::size_t>(c.row1 - c.row0);
    const std::size_t un = static_cast<std::size_t>(setup_.n);
    const std::size_t r0 = static_cast<std::size_t>(c.row0);
    void* sm = stream_.get();
    stream_.mark(3);  // the copies' own time: the stream may have waited for the host since 2
    rt_.copy_to_host(res_.amounts.data() + r0 * un, d.amounts, rows * un * sizeof(double), sm);
    rt_.copy_to_host(res_.concentrations.data() + r0 * un, d.concentrations,
                     rows * un * sizeof(double), sm);
    rt_.copy_to_host(res_.prediction.data() + r0, d.prediction, rows * sizeof(double), sm);
    finite_.resize(static_cast<std::size_t>(c.count));
    rt_.copy_to_host(finite_.data(), d.finite, finite_.size(), sm);
    stream_.mark(4);
    rt_.synchronize(sm);
    kernel_seconds_ += stream_.seconds(1, 2);
    transfer_seconds_ += stream_.seconds(0, 1) + stream_.seconds(3, 4);
    for (std::int64_t j = 0; j < c.count; ++j)
      res_.status[static_cast<std::size_t>(c.first + j)] =
          finite_[static_cast<std::size_t>(j)] != 0 ? SubjectStatus::Ok : SubjectStatus::NonFinite;
  }

  const DatasetSetup& setup_;
  const ParameterBatch& parameters_;
  const std::vector<std::int64_t>& first_row_;
  const std::int64_t threads_;
  DatasetResult& res_;
  device::Runtime& rt_;
  Buffer in_, out_;
  DeviceStream stream_;  // after the buffers: drained before they are freed
  const std::int64_t subjects_;
  const std::int64_t target_;
  device::DatasetChunk launched_;
  std::vector<std::uint8_t> finite_;
  double kernel_seconds_ = 0.0, transfer_seconds_ = 0.0;
};

}  // namespace

void simulate_dataset_on_device(const DatasetSetup& setup, const ParameterBatch& parameters,
                                const std::vector<std::int64_t>& first_row, int threads,
                                DatasetResult& res) {
  std::unique_ptr<device::Runtime> rt = make_device_runtime();
  std::string why = "this build of pkscan has no CUDA support";
  if (!rt || rt->device_count(&why) <= 0)
    throw BackendUnavailable("simulate_dataset: device 'cuda' is not available: " + why);
  // The programs of two chunks, kept by the calling thread between calls (at most about 64 MiB
  // each): a repeated call records into memory it already has.
  thread_local Chunk chunks[2];
  DatasetRun(setup, parameters, first_row, threads, res, *rt).run(chunks);
}

}  // namespace pkscan::detail
