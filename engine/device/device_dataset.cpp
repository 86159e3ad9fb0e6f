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
// Pipeline: subjects go in chunks of about Runtime::target_chunk_bytes() of program and output.
// Per chunk: record (host threads), pack the parts into one staging buffer (relocating their
// offsets), upload, run, copy the rows straight into the result. Chunks run one after another:
// the host's recording is the larger part of the work, and it does not overlap the device's.
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

// A stream and its timing events, drained before they (and the buffers declared before them)
// go: no copy is still running into memory that is being freed.
class Stream {
 public:
  explicit Stream(device::Runtime& rt) : rt_(&rt) {
    try {
      stream_ = rt.create_stream();
      for (void*& e : mark_) e = rt.create_timing_event();
    } catch (...) {
      release();
      throw;
    }
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { release(); }
  void* get() const noexcept { return stream_; }
  void mark(int i) { rt_->record(mark_[i], stream_); }
  double seconds(int from, int to) { return rt_->elapsed_seconds(mark_[from], mark_[to]); }

 private:
  void release() noexcept {
    if (stream_) rt_->synchronize_quietly(stream_);
    for (void*& e : mark_)
      if (e) rt_->destroy_event(e);
    if (stream_) rt_->destroy_stream(stream_);
    stream_ = nullptr;
  }
  device::Runtime* rt_;
  void* stream_ = nullptr;
  void* mark_[4] = {nullptr, nullptr, nullptr, nullptr};
};

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

}  // namespace

void simulate_dataset_on_device(const DatasetSetup& setup, const ParameterBatch& parameters,
                                const std::vector<std::int64_t>& first_row, int threads,
                                DatasetResult& res) {
  std::unique_ptr<device::Runtime> rt = make_device_runtime();
  std::string why = "this build of pkscan has no CUDA support";
  if (!rt || rt->device_count(&why) <= 0)
    throw BackendUnavailable("simulate_dataset: device 'cuda' is not available: " + why);
  const int n = setup.n;
  const std::int64_t subjects = static_cast<std::int64_t>(setup.data->subjects.size());
  const std::int64_t rows_total = res.rows();
  Buffer staging(*rt, true), in(*rt, false), out(*rt, false);
  Stream stream(*rt);
  std::vector<Part> parts;
  double kernel_seconds = 0.0, transfer_seconds = 0.0;
  const std::int64_t target = static_cast<std::int64_t>(rt->target_chunk_bytes());
  for (std::int64_t first = 0; first < subjects;) {
    // The chunk: subjects while they fit the target (at least one).
    std::int64_t count = 0;
    for (std::int64_t bytes = 0; first + count < subjects && (count == 0 || bytes < target);
         ++count)
      bytes += subject_bytes(setup.data->subjects[static_cast<std::size_t>(first + count)], n);
    const std::int64_t row0 = first_row[static_cast<std::size_t>(first)];
    const std::int64_t row1 =
        first + count < subjects ? first_row[static_cast<std::size_t>(first + count)] : rows_total;
    // 1. Record, in contiguous parts of the chunk (a few per thread, for balance).
    const std::int64_t np = std::min<std::int64_t>(count, std::max(1, threads) * 4);
    if (static_cast<std::int64_t>(parts.size()) < np) parts.resize(static_cast<std::size_t>(np));
    for (std::int64_t p = 0; p < np; ++p) {
      Part& part = parts[static_cast<std::size_t>(p)];
      part.first = first + count * p / np;
      part.count = first + count * (p + 1) / np - part.first;
    }
    struct Worker {
      SubjectPlan plan;
      std::unique_ptr<EventSolver> solver;
    };
    detail::parallel_for(
        np, threads, 1,
        [&] {
          return Worker{{}, make_event_solver(setup)};
        },
        [&](std::int64_t p, Worker& w) {
          Part& part = parts[static_cast<std::size_t>(p)];
          part.prog.clear();
          for (std::int64_t s = part.first; s < part.first + part.count; ++s) {
            setup.build_plan(s, w.plan);
            w.solver->record_rows(w.plan, s, parameters.row(s), res,
                                  first_row[static_cast<std::size_t>(s)], part.prog);
          }
        });
    // 2. Pack: begin offsets, operations and reals of every part, one after another.
    std::vector<std::int64_t> ops_base(static_cast<std::size_t>(np) + 1, 0);
    std::vector<std::int64_t> reals_base(static_cast<std::size_t>(np) + 1, 0);
    for (std::int64_t p = 0; p < np; ++p) {
      const DatasetProgram& g = parts[static_cast<std::size_t>(p)].prog;
      ops_base[static_cast<std::size_t>(p) + 1] =
          ops_base[static_cast<std::size_t>(p)] + static_cast<std::int64_t>(g.ops.size());
      reals_base[static_cast<std::size_t>(p) + 1] =
          reals_base[static_cast<std::size_t>(p)] + static_cast<std::int64_t>(g.reals.size());
    }
    const std::size_t ops_total = static_cast<std::size_t>(ops_base.back());
    const std::size_t reals_total = static_cast<std::size_t>(reals_base.back());
    const std::size_t off_ops =
        align_up((static_cast<std::size_t>(count) + 1) * sizeof(std::int64_t), kAlign);
    const std::size_t off_reals = off_ops + align_up(ops_total * sizeof(device::ProgramOp), kAlign);
    const std::size_t in_bytes = off_reals + reals_total * sizeof(double);
    staging.reserve(std::max(in_bytes, static_cast<std::size_t>(count)));
    char* st = static_cast<char*>(staging.ptr());
    auto* begin = reinterpret_cast<std::int64_t*>(st);
    auto* ops = reinterpret_cast<device::ProgramOp*>(st + off_ops);
    auto* reals = reinterpret_cast<double*>(st + off_reals);
    pkscan::parallel_for(np, threads, [&](std::int64_t p, int) {
      const Part& part = parts[static_cast<std::size_t>(p)];
      const std::int64_t ob = ops_base[static_cast<std::size_t>(p)];
      const std::int64_t rb = reals_base[static_cast<std::size_t>(p)];
      for (std::int64_t j = 0; j < part.count; ++j)
        begin[part.first - first + j] = ob + part.prog.begin[static_cast<std::size_t>(j)];
      device::ProgramOp* o = ops + ob;
      for (device::ProgramOp op : part.prog.ops) {
        if (op.arg >= 0) op.arg += rb;
        if (op.kind != device::ProgramKind::Observe && op.aux >= 0) op.aux += rb;
        *o++ = op;
      }
      if (!part.prog.reals.empty())
        std::memcpy(reals + rb, part.prog.reals.data(), part.prog.reals.size() * sizeof(double));
    });
    begin[count] = static_cast<std::int64_t>(ops_total);
    // 3. Upload, run, copy back.
    const std::size_t rows = static_cast<std::size_t>(row1 - row0);
    const std::size_t un = static_cast<std::size_t>(n);
    const std::size_t off_conc = align_up(rows * un * sizeof(double), kAlign);
    const std::size_t off_pred = off_conc + align_up(rows * un * sizeof(double), kAlign);
    const std::size_t off_fin = off_pred + align_up(rows * sizeof(double), kAlign);
    in.reserve(in_bytes);
    out.reserve(off_fin + static_cast<std::size_t>(count));
    char* din = static_cast<char*>(in.ptr());
    char* dout = static_cast<char*>(out.ptr());
    device::DatasetChunk c;
    c.subjects = count;
    c.first_row = row0;
    c.begin = reinterpret_cast<const std::int64_t*>(din);
    c.ops = reinterpret_cast<const device::ProgramOp*>(din + off_ops);
    c.reals = reinterpret_cast<const double*>(din + off_reals);
    c.amounts = reinterpret_cast<double*>(dout);
    c.concentrations = reinterpret_cast<double*>(dout + off_conc);
    c.prediction = reinterpret_cast<double*>(dout + off_pred);
    c.finite = reinterpret_cast<std::uint8_t*>(dout + off_fin);
    void* sm = stream.get();
    stream.mark(0);
    rt->copy_to_device(din, st, in_bytes, sm);
    stream.mark(1);
    rt->launch_dataset(n, c, sm);
    stream.mark(2);
    const std::size_t r0 = static_cast<std::size_t>(row0);
    rt->copy_to_host(res.amounts.data() + r0 * un, c.amounts, rows * un * sizeof(double), sm);
    rt->copy_to_host(res.concentrations.data() + r0 * un, c.concentrations,
                     rows * un * sizeof(double), sm);
    rt->copy_to_host(res.prediction.data() + r0, c.prediction, rows * sizeof(double), sm);
    rt->copy_to_host(st, c.finite, static_cast<std::size_t>(count), sm);
    stream.mark(3);
    rt->synchronize(sm);
    kernel_seconds += stream.seconds(1, 2);
    transfer_seconds += stream.seconds(0, 1) + stream.seconds(2, 3);
    for (std::int64_t j = 0; j < count; ++j)
      res.status[static_cast<std::size_t>(first + j)] =
          st[j] != 0 ? SubjectStatus::Ok : SubjectStatus::NonFinite;
    first += count;
  }
  res.summary.device_kernel_seconds = kernel_seconds;
  res.summary.device_transfer_seconds = transfer_seconds;
}

}  // namespace pkscan::detail
