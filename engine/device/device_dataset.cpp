// Datasets (event lists) on device 'cuda': simulate_dataset_on_device (device/device.hpp),
// written once over a system's Runtime, so the host system runs every line of it in CI.
//
// The device runs the event walk (walk_kernels.hpp), the Predictor's: one thread per subject
// makes the subject's events from its records, orders them after lag and F and walks them
// (infusions, resets, steady states), and writes its whole output rows (amounts,
// concentrations, prediction) and its status. The host's threads convert each subject's records
// (DatasetSetup::build_records: the plan without its events), fill its parameter rows (the
// CPU's checks and messages) and their eigendecompositions (the CPU's Propagator), and write the
// rows' index columns.
// Numeric contract: the CPU event solver's arithmetic (kernels/event_step.hpp and
// kernels/steady_state.hpp on both sides): the host system gives the CPU's bits; CUDA differs
// from them only through its exp and expm1. Subjects the walk leaves to the host (a row without
// a fast eigendecomposition, more than kWalkList infusions at once) are run by the CPU's solver
// in the same call (RunSummary::device_host_subjects counts them).
//
// Pipeline: subjects go in chunks of about Runtime::target_chunk_bytes() (at most 128 MiB) of
// records, rows and output. Per chunk: the host's threads build it, each into its own part (a few
// parts per thread, for balance); the parts go up where they go (their offsets are moved by the
// parts before them, the only serial pass); one launch; while the device runs, the next chunk is
// built; then the rows come straight back into the result and the host runs what the walk left.
// Two chunks are kept by the calling thread between calls (thread_local), so repeated calls
// allocate no host memory for them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/events.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "core/parallel.hpp"
#include "device/buffer.hpp"
#include "device/device.hpp"
#include "device/runtime.hpp"
#include "device/walk_host.hpp"
#include "device/walk_job.hpp"
#include "events/plan.hpp"
#include "events/solver.hpp"

namespace pkscan::detail {

namespace {

// Subjects [first, first + count) of a chunk, built by one thread: their plans as the walk's
// arrays and their parameter rows (offsets relative to the part until the chunk moves them).
struct Part {
  std::int64_t first = 0, count = 0;
  WalkArrays a;
  std::vector<double> rows;  // row_stride each
  std::vector<char> fast;    // per subject: every row has a fast eigendecomposition
  std::int64_t base_records = 0, base_rows = 0, base_scratch = 0;
};

// One chunk of subjects and its parts, in host memory.
struct Chunk {
  std::int64_t first = 0, count = 0, row0 = 0, row1 = 0;
  std::vector<Part> parts;              // grown, never shrunk: kept by the calling thread
  std::vector<std::int64_t> first_row;  // per subject: its first parameter row, or -1: host
  std::int64_t records = 0, rows = 0, scratch = 0;  // totals over the parts
};

// About how many bytes subject s takes (plans, rows and output), to size chunks: its records, a
// scratch event per event they make, a parameter row per record when the dataset has parameter
// columns (one otherwise), its output rows.
std::int64_t subject_bytes(const DatasetSetup& setup, const DatasetSubject& subject,
                           std::int64_t stride) {
  std::int64_t events = 1, records = 0, obs = 0;
  for (const DatasetRecord& r : subject.records) {
    events += (1 + std::max<std::int64_t>(r.addl, 0)) * (r.rate > 0.0 ? 2 : 1);
    ++records;
    obs += r.evid == 0;
  }
  const std::int64_t rows = setup.column_of.empty() ? 1 : records;
  const std::int64_t event_bytes = sizeof(Event);
  return static_cast<std::int64_t>(sizeof(device::WalkSubject)) + 9 + events * event_bytes +
         records * static_cast<std::int64_t>(sizeof(device::WalkRecord)) + rows * (8 + 8 * stride) +
         obs * 8 * (2 * setup.n + 1);
}

// The bytes a chunk aims at: the runtime's pipelining target, at most 128 MiB (the host keeps
// two chunks), and at most a quarter of the device's free memory.
std::int64_t chunk_target(device::Runtime& rt) {
  std::size_t free_bytes = 0, total_bytes = 0;
  rt.memory_info(free_bytes, total_bytes);
  return std::max<std::int64_t>(
      1, std::min({static_cast<std::int64_t>(rt.target_chunk_bytes()), std::int64_t{128} << 20,
                   static_cast<std::int64_t>(free_bytes / 4)}));
}

// Chunks built by the host's threads, walked by the device one after another, the next chunk
// built while the device runs the current one.
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
        stride_(device::row_stride(setup.n, setup.np)),
        target_(chunk_target(rt)) {
    launched_.model = walk_model(setup);
    launched_.row_stride = stride_;
  }

  void run(Chunk (&chunks)[2]) {
    if (subjects_ == 0) return;
    int cur = 0;
    bounds(chunks[cur], 0);
    build(chunks[cur]);
    while (true) {
      Chunk& c = chunks[cur];
      upload_and_launch(c);
      Chunk& next = chunks[1 - cur];
      bounds(next, c.first + c.count);
      if (next.count > 0) build(next);  // while the device runs c
      finish(c);
      if (next.count == 0) break;
      cur = 1 - cur;
    }
    res_.summary.device_kernel_seconds = kernel_seconds_;
    res_.summary.device_transfer_seconds = transfer_seconds_;
    res_.summary.device_host_subjects = host_subjects_;
  }

 private:
  // The chunk from subject `first` on: subjects while they fit the target (at least one).
  void bounds(Chunk& c, std::int64_t first) const {
    c.first = first;
    c.count = 0;
    for (std::int64_t bytes = 0; first + c.count < subjects_ && (c.count == 0 || bytes < target_);
         ++c.count)
      bytes += subject_bytes(
          setup_, setup_.data->subjects[static_cast<std::size_t>(first + c.count)], stride_);
    if (c.count == 0) return;
    c.row0 = first_row_[static_cast<std::size_t>(first)];
    c.row1 = first + c.count < subjects_ ? first_row_[static_cast<std::size_t>(first + c.count)]
                                         : res_.rows();
  }

  // Builds the chunk's parts (host threads), then moves their offsets.
  void build(Chunk& c) {
    const std::int64_t np = std::min<std::int64_t>(c.count, threads_ * 4);
    if (static_cast<std::int64_t>(c.parts.size()) < np)
      c.parts.resize(static_cast<std::size_t>(np));
    for (std::int64_t p = 0; p < np; ++p) {
      Part& part = c.parts[static_cast<std::size_t>(p)];
      part.first = c.first + c.count * p / np;
      part.count = c.first + c.count * (p + 1) / np - part.first;
    }
    for (std::size_t p = static_cast<std::size_t>(np); p < c.parts.size(); ++p)
      c.parts[p].count = 0;
    with_compartments_1_to_6(setup_.n, [&](auto n) { build_parts<decltype(n)::value>(c, np); });
    c.records = c.rows = c.scratch = 0;
    c.first_row.resize(static_cast<std::size_t>(c.count));
    for (std::int64_t p = 0; p < np; ++p) {
      Part& part = c.parts[static_cast<std::size_t>(p)];
      part.base_records = c.records;
      part.base_rows = c.rows;
      part.base_scratch = c.scratch;
      for (std::int64_t j = 0; j < part.count; ++j) {
        device::WalkSubject& w = part.a.subjects[static_cast<std::size_t>(j)];
        w.records += c.records;
        w.scratch += c.scratch;
        c.first_row[static_cast<std::size_t>(part.first - c.first + j)] =
            part.fast[static_cast<std::size_t>(j)] != 0
                ? c.rows + part.a.first_row[static_cast<std::size_t>(j)]
                : -1;
      }
      c.records += static_cast<std::int64_t>(part.a.records.size());
      c.rows += part.a.rows();
      c.scratch += part.a.scratch;
    }
  }

  // Each part on one thread: the plans, the rows and the index columns of its subjects.
  template <int N>
  void build_parts(Chunk& c, std::int64_t np) {
    struct Worker {
      SubjectPlan plan;
      std::vector<double> values;
      Propagator<N> prop;
    };
    detail::parallel_for(
        np, threads_, 1, [] { return Worker{}; },
        [&](std::int64_t p, Worker& w) {
          Part& part = c.parts[static_cast<std::size_t>(p)];
          part.a.clear();
          part.rows.clear();
          part.fast.clear();
          for (std::int64_t s = part.first; s < part.first + part.count; ++s) {
            setup_.build_records(s, w.plan);
            const std::int64_t first = first_row_[static_cast<std::size_t>(s)];
            part.a.append(w.plan, first - c.row0);
            const std::size_t at = part.rows.size();
            part.rows.resize(at + w.plan.rows.size() * static_cast<std::size_t>(stride_));
            part.fast.push_back(fill_walk_rows<N>(setup_, w.plan, s, parameters_.row(s), w.values,
                                                  w.prop, stride_, nullptr, part.rows.data() + at)
                                    ? 1
                                    : 0);
            // The index columns of its rows (Solver::index_row).
            std::size_t row = static_cast<std::size_t>(first);
            for (std::size_t j = 0; j < w.plan.records.size(); ++j) {
              const EventRecord& r = w.plan.records[j];
              if (r.evid != 0) continue;
              res_.subject[row] = s;
              res_.record[row] = static_cast<std::int64_t>(j);
              res_.time[row] = r.time;
              res_.compartment[row] = r.obs_cmt;
              ++row;
            }
          }
        });
  }

  // Layout of the device's input: subjects, records, rows' overridden columns, first rows, rows,
  // scratch events; and of its output: prediction, amounts, concentrations, status.
  struct Layout {
    std::size_t records = 0, overridden = 0, first_row = 0, rows = 0, scratch = 0, in = 0;
    std::size_t amounts = 0, concentrations = 0, status = 0, out = 0;
  };
  Layout layout(const Chunk& c) const {
    Layout l;
    const auto after = [](std::size_t at, std::int64_t count, std::size_t size) {
      return at + align_up(static_cast<std::size_t>(count) * size, kAlign);
    };
    l.records = after(0, c.count, sizeof(device::WalkSubject));
    l.overridden = after(l.records, c.records, sizeof(device::WalkRecord));
    l.first_row = after(l.overridden, c.rows, sizeof(std::uint64_t));
    l.rows = after(l.first_row, c.count, sizeof(std::int64_t));
    l.scratch = after(l.rows, c.rows * stride_, sizeof(double));
    l.in = l.scratch + static_cast<std::size_t>(c.scratch) * sizeof(Event);
    const std::int64_t rows = c.row1 - c.row0;
    l.amounts = after(0, rows, sizeof(double));
    l.concentrations = after(l.amounts, rows * setup_.n, sizeof(double));
    l.status = after(l.concentrations, rows * setup_.n, sizeof(double));
    l.out = l.status + static_cast<std::size_t>(c.count);
    return l;
  }

  // Uploads the chunk's parts where they go, and enqueues the walk.
  void upload_and_launch(const Chunk& c) {
    const Layout l = layout(c);
    in_.reserve(l.in);
    out_.reserve(l.out);
    char* din = static_cast<char*>(in_.ptr());
    char* dout = static_cast<char*>(out_.ptr());
    void* sm = stream_.get();
    stream_.mark(0);
    std::int64_t subjects = 0;
    for (const Part& part : c.parts) {
      if (part.count == 0) continue;
      const WalkArrays& a = part.a;
      const auto up = [&](std::size_t at, std::int64_t base, const auto& v) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        if (v.empty()) return;
        rt_.copy_to_device(din + at + static_cast<std::size_t>(base) * sizeof(T), v.data(),
                           v.size() * sizeof(T), sm);
      };
      up(0, subjects, a.subjects);
      up(l.records, part.base_records, a.records);
      up(l.overridden, part.base_rows, a.overridden);
      up(l.rows, part.base_rows * stride_, part.rows);
      subjects += part.count;
    }
    rt_.copy_to_device(din + l.first_row, c.first_row.data(),
                       c.first_row.size() * sizeof(std::int64_t), sm);
    stream_.mark(1);
    device::WalkChunk& w = launched_;
    w.subjects = c.count;
    w.subject = reinterpret_cast<const device::WalkSubject*>(din);
    w.records = reinterpret_cast<const device::WalkRecord*>(din + l.records);
    w.overridden = reinterpret_cast<const std::uint64_t*>(din + l.overridden);
    w.first_row = reinterpret_cast<const std::int64_t*>(din + l.first_row);
    w.rows = reinterpret_cast<const double*>(din + l.rows);
    w.scratch = reinterpret_cast<Event*>(din + l.scratch);
    w.prediction = reinterpret_cast<double*>(dout);
    w.amounts = reinterpret_cast<double*>(dout + l.amounts);
    w.concentrations = reinterpret_cast<double*>(dout + l.concentrations);
    w.status = reinterpret_cast<std::uint8_t*>(dout + l.status);
    rt_.launch_walk(setup_.n, w, sm);
    stream_.mark(2);
  }

  // Copies the launched chunk's rows into the result and its statuses, then runs the subjects
  // the walk left to the host.
  void finish(const Chunk& c) {
    const device::WalkChunk& w = launched_;
    const std::size_t rows = static_cast<std::size_t>(c.row1 - c.row0);
    const std::size_t un = static_cast<std::size_t>(setup_.n);
    const std::size_t r0 = static_cast<std::size_t>(c.row0);
    void* sm = stream_.get();
    stream_.mark(3);  // the copies' own time: the stream may have waited for the host since 2
    rt_.copy_to_host(res_.amounts.data() + r0 * un, w.amounts, rows * un * sizeof(double), sm);
    rt_.copy_to_host(res_.concentrations.data() + r0 * un, w.concentrations,
                     rows * un * sizeof(double), sm);
    rt_.copy_to_host(res_.prediction.data() + r0, w.prediction, rows * sizeof(double), sm);
    status_.resize(static_cast<std::size_t>(c.count));
    rt_.copy_to_host(status_.data(), w.status, status_.size(), sm);
    stream_.mark(4);
    rt_.synchronize(sm);
    kernel_seconds_ += stream_.seconds(1, 2);
    transfer_seconds_ += stream_.seconds(0, 1) + stream_.seconds(3, 4);
    host_.clear();
    for (std::int64_t j = 0; j < c.count; ++j) {
      const std::uint8_t st = status_[static_cast<std::size_t>(j)];
      if (st == device::kWalkHost) host_.push_back(c.first + j);
      res_.status[static_cast<std::size_t>(c.first + j)] =
          st == device::kWalkOk ? SubjectStatus::Ok : SubjectStatus::NonFinite;
    }
    host_subjects_ += static_cast<std::int64_t>(host_.size());
    struct Worker {
      SubjectPlan plan;
      std::unique_ptr<EventSolver> solver;
    };
    detail::parallel_for(
        static_cast<std::int64_t>(host_.size()), threads_, 1,
        [&] {
          return Worker{{}, make_event_solver(setup_)};
        },
        [&](std::int64_t i, Worker& wk) {
          const std::int64_t s = host_[static_cast<std::size_t>(i)];
          setup_.build_plan(s, wk.plan);
          const bool finite = wk.solver->simulate_rows(wk.plan, s, parameters_.row(s), res_,
                                                       first_row_[static_cast<std::size_t>(s)]);
          res_.status[static_cast<std::size_t>(s)] =
              finite ? SubjectStatus::Ok : SubjectStatus::NonFinite;
        });
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
  const std::int64_t stride_;
  const std::int64_t target_;
  device::WalkChunk launched_;
  std::vector<std::uint8_t> status_;
  std::vector<std::int64_t> host_;
  double kernel_seconds_ = 0.0, transfer_seconds_ = 0.0;
  std::int64_t host_subjects_ = 0;
};

}  // namespace

void simulate_dataset_on_device(const DatasetSetup& setup, const ParameterBatch& parameters,
                                const std::vector<std::int64_t>& first_row, int threads,
                                DatasetResult& res) {
  std::unique_ptr<device::Runtime> rt = walk_runtime("simulate_dataset");
  // Two chunks, kept by the calling thread between calls (at most about 128 MiB each): a
  // repeated call builds into memory it already has.
  thread_local Chunk chunks[2];
  DatasetRun(setup, parameters, first_row, threads, res, *rt).run(chunks);
}

}  // namespace pkscan::detail
