// CUDA backends, host side: methods `batched` and `power` on device `cuda` (models with 2, 3 or 4
// compartments; the kernels are templates on the compartment count).
//
// Numeric contract: transitions are built on the host in double (build_transition, as every
// other path) and uploaded in double; the kernels (cuda_kernels.cu) round K to Real, compute
// the breakpoint inputs in double in the order of detail::breakpoint_inputs and round them, and
// step with detail::affine_step. nvcc contracts the step's multiply-adds into FMA, so results
// are not bitwise equal to the reference: float64 within 1e-12 relative (batched) and 1e-10
// relative (power: products reordered by repeated squaring, as on the CPU). Deterministic run
// to run and independent of the chunking: one thread computes one subject from start to end.
//
// Power with dense output (every grid step reported) runs the batched kernel: every step must be
// computed and written anyway, and the step loop is exact to 1e-12 (the power jumps would only
// add rounding). Sparse output uses the power kernel (table of K^(2^j), jumps between outputs).
//
// Pipeline (per run):
// 1. The schedule (breakpoints, rates, boluses, partial infusions, sparse output steps) is
//    uploaded once into one device buffer.
// 2. Subjects are split into chunks. A chunk's device buffers (inputs, output, status, power
//    table) live in one of two slots, each with its own stream. The chunk size is the smallest
//    of: all subjects; what fits twice in device memory (cudaMemGetInfo, keeping 10% of the
//    device free); and a pipelining target of kTargetChunkBytes of output (but never below
//    kMinChunkSubjects, so a chunk still fills the device).
// 3. For chunk i+1 the host builds the transitions (OpenMP, batch.threads) into the slot's
//    pinned input staging buffer while the device runs chunk i, then enqueues its upload and
//    kernel on the slot's stream. Then chunk i is drained on its own stream: its output is
//    copied device -> pinned staging in pieces of at most kPieceBytes (two staging pieces,
//    so piece p+1 is in flight while the host copies piece p into the result), overlapping
//    the kernel of chunk i+1 on the other stream.
// Device and pinned buffers are cached in the backend object and grown only when too small.
// Errors: DeviceError from PKSCAN_CUDA_CHECK (launch and execution errors checked separately);
// BackendUnavailable when no device is usable. On an error the streams are drained before the
// exception leaves run(), so no copy is still writing into buffers that a later run reuses.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <pkscan/error.hpp>
#include <string>
#include <vector>

#include "detail/backend.hpp"
#include "detail/schedule.hpp"
#include "detail/transition.hpp"
// CUDA runtime headers after the standard library and Eigen.
#include "cuda_check.hpp"
#include "cuda_kernels.hpp"

namespace pkscan {
namespace cuda {
int device_count(std::string* why) noexcept;  // device_query.cu
}  // namespace cuda

namespace detail {

namespace {

constexpr std::size_t kAlign = 256;                                // device sub-buffer alignment
constexpr std::size_t kPieceBytes = std::size_t{32} << 20;         // D2H staging piece
constexpr std::size_t kTargetChunkBytes = std::size_t{256} << 20;  // output per chunk
constexpr std::int64_t kMinChunkSubjects = 8192;                   // 64 blocks of 128 threads

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

std::int64_t round_up(std::int64_t v, std::int64_t a) { return (v + a - 1) / a * a; }

// A device allocation, grown on demand (contents are not preserved).
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;

  void release() noexcept {
    if (ptr) (void)cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  void reserve(std::size_t need) {
    if (need <= bytes) return;
    release();  // free first: the old and new buffer need not fit together
    PKSCAN_CUDA_CHECK(cudaMalloc(&ptr, need));
    bytes = need;
  }
};

// A pinned host allocation, grown on demand.
struct PinnedBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;

  void release() noexcept {
    if (ptr) (void)cudaFreeHost(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  void reserve(std::size_t need) {
    if (need <= bytes) return;
    release();
    PKSCAN_CUDA_CHECK(cudaHostAlloc(&ptr, need, cudaHostAllocDefault));
    bytes = need;
  }
};

// Copies `bytes` from pinned staging into the result on up to `threads` threads (the result's
// pages are often touched for the first time here, so one thread would not keep up with the
// PCIe link).
void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads) {
  constexpr std::size_t kGrain = std::size_t{4} << 20;
  const std::int64_t parts = std::max<std::int64_t>(
      1, std::min<std::int64_t>(threads, static_cast<std::int64_t>((bytes + kGrain - 1) / kGrain)));
  if (parts == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const std::size_t each =
      align_up((bytes + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts), 64);
  const int team = static_cast<int>(parts);
#pragma omp parallel for schedule(static) num_threads(team)
  for (std::int64_t p = 0; p < parts; ++p) {
    const std::size_t off = static_cast<std::size_t>(p) * each;
    if (off < bytes)
      std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                  std::min(each, bytes - off));
  }
}

[[noreturn]] __attribute__((noinline, cold)) void throw_no_memory(const std::string& what,
                                                                  std::size_t need,
                                                                  std::size_t avail) {
  throw DeviceError("simulate: CUDA device memory is too small for this run: " + what + " needs " +
                    std::to_string(need) + " bytes, but only " + std::to_string(avail) +
                    " bytes may be used (10% of the device is kept free)");
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(Method method) noexcept : method_(method) {}  // no device work here
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() override { release(); }

  Method method() const noexcept override { return method_; }
  Device device() const noexcept override { return Device::Cuda; }
  std::string unsupported_reason(const PreparedBatch& b) const override {
    if (b.n < cuda::kMinCompartments || b.n > cuda::kMaxCompartments)
      return "method '" + to_string(method_) + "' on device 'cuda' is compiled for models with " +
             std::to_string(cuda::kMinCompartments) + " to " +
             std::to_string(cuda::kMaxCompartments) + " compartments, not " + std::to_string(b.n);
    return {};
  }
  void run(const PreparedBatch& b, ResultView<double> out) override { run_guarded(b, out); }
  void run(const PreparedBatch& b, ResultView<float> out) override { run_guarded(b, out); }

 private:
  struct Slot {
    cudaStream_t stream = nullptr;
    DeviceBuffer in;      // k, g, partial matrices (double, SoA)
    DeviceBuffer out;     // amounts
    DeviceBuffer status;  // one byte per subject
    DeviceBuffer table;   // power table (power kernel only)
    PinnedBuffer in_stage;
  };

  // Per-run sizes.
  struct Plan {
    std::int64_t n_out = 0;
    bool dense = false;
    bool power = false;  // power kernel (sparse output); otherwise the batched kernel
    int levels = 0;
    std::size_t in_per_subject = 0;     // bytes
    std::size_t out_per_subject = 0;    // bytes
    std::size_t table_per_subject = 0;  // bytes (per table column)
    std::int64_t chunk = 0;             // subjects per chunk (capacity of a slot)
    std::int64_t chunks = 0;
    std::size_t piece = 0;  // bytes per D2H staging piece (both ring buffers hold at least this)
  };

  Method method_;
  bool ready_ = false;
  int device_ = -1;
  Slot slot_[2];
  cudaEvent_t piece_done_[2] = {nullptr, nullptr};
  PinnedBuffer piece_[2];  // D2H staging ring
  PinnedBuffer status_stage_;
  DeviceBuffer sched_;
  std::vector<unsigned char> sched_host_;  // packed schedule, kept for its capacity
  // Transitions, one per host thread and compartment count, kept for their capacity.
  std::vector<Transition<2>> tr2_;
  std::vector<Transition<3>> tr3_;
  std::vector<Transition<4>> tr4_;

  template <int N>
  std::vector<Transition<N>>& transitions() {
    if constexpr (N == 2)
      return tr2_;
    else if constexpr (N == 3)
      return tr3_;
    else
      return tr4_;
  }

  static void release_device(Slot& s) noexcept {
    s.in.release();
    s.out.release();
    s.status.release();
    s.table.release();
  }

  bool holds_anything() const noexcept {
    bool any = sched_.ptr || status_stage_.ptr || piece_[0].ptr || piece_[1].ptr ||
               piece_done_[0] || piece_done_[1];
    for (const Slot& s : slot_)
      any =
          any || s.stream || s.in.ptr || s.out.ptr || s.status.ptr || s.table.ptr || s.in_stage.ptr;
    return any;
  }

  void release() noexcept {
    ready_ = false;
    device_ = -1;
    if (!holds_anything()) return;  // e.g. never ran: do not start the CUDA runtime here
    for (Slot& s : slot_) {
      if (s.stream) (void)cudaStreamSynchronize(s.stream);
    }
    for (Slot& s : slot_) {
      release_device(s);
      s.in_stage.release();
      if (s.stream) (void)cudaStreamDestroy(s.stream);
      s.stream = nullptr;
    }
    for (cudaEvent_t& e : piece_done_) {
      if (e) (void)cudaEventDestroy(e);
      e = nullptr;
    }
    for (PinnedBuffer& p : piece_) p.release();
    status_stage_.release();
    sched_.release();
    (void)cudaGetLastError();  // errors while freeing are ignored; do not leave them behind
  }

  // Waits for all work of this backend, ignoring errors (exception path).
  void quiesce() noexcept {
    for (Slot& s : slot_)
      if (s.stream) (void)cudaStreamSynchronize(s.stream);
    (void)cudaGetLastError();
  }

  void ensure_context() {
    std::string why;
    if (cuda::device_count(&why) == 0)
      throw BackendUnavailable("device 'cuda' is not available: " + why);
    int dev = 0;
    PKSCAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (ready_ && dev == device_) return;
    release();  // first use, or the caller switched devices: start afresh on this one
    try {
      for (Slot& s : slot_)
        PKSCAN_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
      for (cudaEvent_t& e : piece_done_)
        PKSCAN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } catch (...) {
      release();
      throw;
    }
    device_ = dev;
    ready_ = true;
  }

  template <class Real>
  void run_guarded(const PreparedBatch& b, ResultView<Real> out) {
    if (const std::string why = unsupported_reason(b); !why.empty()) throw BackendUnavailable(why);
    if (b.subjects <= 0) return;
    if (b.out_steps.empty()) {  // nothing to report: every subject is trivially finite
      for (std::int64_t s = 0; s < b.subjects; ++s) out.status[s] = SubjectStatus::Ok;
      return;
    }
    ensure_context();
    try {
      run_all(b, out);
    } catch (...) {
      quiesce();
      throw;
    }
  }

  std::size_t held_device_bytes() const noexcept {
    std::size_t h = sched_.bytes;
    for (const Slot& s : slot_) h += s.in.bytes + s.out.bytes + s.status.bytes + s.table.bytes;
    return h;
  }

  // Packs the schedule into sched_host_, uploads it into sched_ and returns the device view.
  cuda::DeviceSchedule upload_schedule(const PreparedBatch& b, const Plan& plan) {
    const Schedule& s = b.schedule;
    const std::size_t nbp = static_cast<std::size_t>(s.breakpoints());
    const std::size_t np = s.partials.size();
    const std::size_t n_out_up = plan.dense ? 0 : b.out_steps.size();
    // Offsets of the sub-arrays in the packed buffer.
    std::size_t off = 0;
    auto take = [&off](std::size_t bytes) {
      const std::size_t at = off;
      off = align_up(off + bytes, kAlign);
      return at;
    };
    const std::size_t o_step = take(nbp * sizeof(std::int64_t));
    const std::size_t un = static_cast<std::size_t>(b.n);
    const std::size_t o_rate = take(nbp * un * sizeof(double));
    const std::size_t o_bolus = take(nbp * un * sizeof(double));
    const std::size_t o_pbegin = take((nbp + 1) * sizeof(std::int64_t));
    const std::size_t o_pcomp = take(np * sizeof(int));
    const std::size_t o_prate = take(np * sizeof(double));
    const std::size_t o_plen = take(np * sizeof(int));
    const std::size_t o_out = take(n_out_up * sizeof(std::int64_t));
    const std::size_t total = off;

    sched_host_.resize(total);
    unsigned char* h = sched_host_.data();
    auto put = [h](std::size_t at, const void* src, std::size_t bytes) {
      if (bytes) std::memcpy(h + at, src, bytes);
    };
    put(o_step, s.bp_step.data(), nbp * sizeof(std::int64_t));
    put(o_rate, s.bp_rate.data(), nbp * un * sizeof(double));
    put(o_bolus, s.bp_bolus.data(), nbp * un * sizeof(double));
    put(o_pbegin, s.bp_partial_begin.data(), (nbp + 1) * sizeof(std::int64_t));
    for (std::size_t p = 0; p < np; ++p) {
      const PartialInfusion& pi = s.partials[p];
      std::memcpy(h + o_pcomp + p * sizeof(int), &pi.compartment, sizeof(int));
      std::memcpy(h + o_prate + p * sizeof(double), &pi.rate, sizeof(double));
      std::memcpy(h + o_plen + p * sizeof(int), &pi.length_index, sizeof(int));
    }
    put(o_out, b.out_steps.data(), n_out_up * sizeof(std::int64_t));

    sched_.reserve(total);
    // Pageable source: the copy is staged by the driver; synchronising the stream before the
    // kernels (on both streams) read the schedule orders it for both slots.
    PKSCAN_CUDA_CHECK(
        cudaMemcpyAsync(sched_.ptr, h, total, cudaMemcpyHostToDevice, slot_[0].stream));
    PKSCAN_CUDA_CHECK(cudaStreamSynchronize(slot_[0].stream));

    auto* d = static_cast<unsigned char*>(sched_.ptr);
    cuda::DeviceSchedule ds;
    ds.steps = s.steps;
    ds.breakpoints = s.breakpoints();
    ds.n_out = plan.n_out;
    ds.dense = plan.dense ? 1 : 0;
    ds.partial_lengths = static_cast<int>(s.partial_lengths.size());
    ds.levels = plan.levels;
    ds.n = b.n;
    for (int r = 0; r < b.n; ++r) ds.initial[r] = s.initial[static_cast<std::size_t>(r)];
    ds.bp_step = reinterpret_cast<const std::int64_t*>(d + o_step);
    ds.bp_rate = reinterpret_cast<const double*>(d + o_rate);
    ds.bp_bolus = reinterpret_cast<const double*>(d + o_bolus);
    ds.bp_partial_begin = reinterpret_cast<const std::int64_t*>(d + o_pbegin);
    ds.partial_compartment = reinterpret_cast<const int*>(d + o_pcomp);
    ds.partial_rate = reinterpret_cast<const double*>(d + o_prate);
    ds.partial_length = reinterpret_cast<const int*>(d + o_plen);
    ds.out_steps = plan.dense ? nullptr : reinterpret_cast<const std::int64_t*>(d + o_out);
    return ds;
  }

  // Device bytes of one slot holding `m` subjects.
  static std::size_t slot_bytes(const Plan& p, std::int64_t m) {
    const std::size_t um = static_cast<std::size_t>(m);
    const std::size_t padded = static_cast<std::size_t>(round_up(m, cuda::kBlockThreads));
    return align_up(p.in_per_subject * um, kAlign) + align_up(p.out_per_subject * um, kAlign) +
           align_up(um, kAlign) + align_up(p.table_per_subject * padded, kAlign);
  }

  // Chunk size from device memory and the pipelining target.
  void plan_chunks(const PreparedBatch& b, Plan& p, std::size_t sched_bytes) {
    std::size_t free_b = 0, total_b = 0;
    PKSCAN_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const std::size_t usable_all = free_b + held_device_bytes();  // ours get reused or freed
    const std::size_t keep = total_b / 10;
    const std::size_t usable = usable_all > keep ? usable_all - keep : 0;
    if (sched_bytes + 2 * slot_bytes(p, 1) > usable)
      throw_no_memory("the schedule and one subject per buffer slot",
                      sched_bytes + 2 * slot_bytes(p, 1), usable);
    const std::size_t per =
        p.in_per_subject + p.out_per_subject + 1 + p.table_per_subject;  // bytes per subject
    // Slack for alignment and the table padding of both slots.
    const std::size_t slack =
        2 * (4 * kAlign + p.table_per_subject * static_cast<std::size_t>(cuda::kBlockThreads));
    const std::size_t room = usable - sched_bytes;
    std::int64_t fit = room > slack ? static_cast<std::int64_t>((room - slack) / (2 * per)) : 0;
    fit = std::max<std::int64_t>(fit, 1);  // one subject per slot fits (checked above)
    const std::int64_t target = std::max<std::int64_t>(
        kMinChunkSubjects, static_cast<std::int64_t>(kTargetChunkBytes / p.out_per_subject));
    std::int64_t chunk = std::min({b.subjects, fit, target});
    p.chunks = (b.subjects + chunk - 1) / chunk;
    p.chunk = (b.subjects + p.chunks - 1) / p.chunks;  // equal chunks, never larger than before
  }

  // Builds the transitions of subjects [first, first + m) into the slot's pinned input staging.
  template <int N>
  void prepare_inputs_n(const PreparedBatch& b, std::int64_t first, std::int64_t m, Slot& slot) {
    const Problem& pr = *b.problem;
    const Schedule& s = b.schedule;
    const std::size_t np = s.partial_lengths.size();
    auto* k = static_cast<double*>(slot.in_stage.ptr);
    double* g = k + N * N * m;
    double* part = g + N * N * m;
    const int threads =
        static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(b.threads, m)));
    std::vector<Transition<N>>& trs = transitions<N>();
    if (trs.size() < static_cast<std::size_t>(threads))
      trs.resize(static_cast<std::size_t>(threads));
#pragma omp parallel num_threads(threads)
    {
      Transition<N>& tr = trs[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
      for (std::int64_t j = 0; j < m; ++j) {
        Mat<N> a;
        rate_matrix(pr.parameters.info(), pr.parameters.row(first + j), a.data());
        build_transition<N>(a, pr.grid.dt, pr.discretization, s.partial_lengths, tr);
        for (int e = 0; e < N * N; ++e) {
          k[e * m + j] = tr.k.data()[e];
          g[e * m + j] = tr.g.data()[e];
        }
        for (std::size_t l = 0; l < np; ++l)
          for (int e = 0; e < N * N; ++e)
            part[(static_cast<std::int64_t>(l) * N * N + e) * m + j] = tr.partial[l].data()[e];
      }
    }
  }

  void prepare_inputs(const PreparedBatch& b, std::int64_t first, std::int64_t m, Slot& slot) {
    switch (b.n) {  // unsupported_reason() has excluded other counts
      case 2:
        return prepare_inputs_n<2>(b, first, m, slot);
      case 3:
        return prepare_inputs_n<3>(b, first, m, slot);
      default:
        return prepare_inputs_n<4>(b, first, m, slot);
    }
  }

  // Host preparation, upload and kernel of one chunk on its slot's stream.
  template <class Real>
  void launch_chunk(const PreparedBatch& b, const Plan& p, const cuda::DeviceSchedule& ds,
                    std::int64_t first, std::int64_t m, Slot& slot) {
    prepare_inputs(b, first, m, slot);
    const std::size_t in_bytes = p.in_per_subject * static_cast<std::size_t>(m);
    PKSCAN_CUDA_CHECK(cudaMemcpyAsync(slot.in.ptr, slot.in_stage.ptr, in_bytes,
                                      cudaMemcpyHostToDevice, slot.stream));
    cuda::DeviceChunk<Real> dc;
    dc.subjects = m;
    dc.k = static_cast<const double*>(slot.in.ptr);
    const std::int64_t nn = static_cast<std::int64_t>(b.n) * b.n;
    dc.g = dc.k + nn * m;
    dc.partial = b.schedule.partial_lengths.empty() ? nullptr : dc.g + nn * m;
    dc.table = p.power ? static_cast<Real*>(slot.table.ptr) : nullptr;
    dc.table_stride = p.power ? round_up(m, cuda::kBlockThreads) : 0;
    dc.out = static_cast<Real*>(slot.out.ptr);
    dc.status = static_cast<std::uint8_t*>(slot.status.ptr);
    if (p.power)
      cuda::launch_power_sparse(ds, dc, slot.stream);
    else
      cuda::launch_batched(ds, dc, slot.stream);
  }

  // Copies chunk [first, first + m) back into the result and its statuses.
  template <class Real>
  void drain_chunk(const PreparedBatch& b, const Plan& p, std::int64_t first, std::int64_t m,
                   Slot& slot, ResultView<Real> out) {
    cudaStream_t st = slot.stream;
    PKSCAN_CUDA_CHECK(cudaMemcpyAsync(status_stage_.ptr, slot.status.ptr,
                                      static_cast<std::size_t>(m), cudaMemcpyDeviceToHost, st));
    const std::size_t total = p.out_per_subject * static_cast<std::size_t>(m);
    const std::size_t piece = p.piece;
    const std::size_t pieces = (total + piece - 1) / piece;
    const auto* src = static_cast<const unsigned char*>(slot.out.ptr);
    auto* dst = reinterpret_cast<unsigned char*>(out.amounts + first * p.n_out * b.n);
    auto issue = [&](std::size_t q) {
      const std::size_t off = q * piece;
      const std::size_t len = std::min(piece, total - off);
      PKSCAN_CUDA_CHECK(
          cudaMemcpyAsync(piece_[q % 2].ptr, src + off, len, cudaMemcpyDeviceToHost, st));
      PKSCAN_CUDA_CHECK(cudaEventRecord(piece_done_[q % 2], st));
    };
    if (pieces > 0) issue(0);
    for (std::size_t q = 0; q < pieces; ++q) {
      // Piece q+1 goes into the other staging buffer, whose previous piece (q-1) the host
      // has already copied out.
      if (q + 1 < pieces) issue(q + 1);
      PKSCAN_CUDA_CHECK(cudaEventSynchronize(piece_done_[q % 2]));
      const std::size_t off = q * piece;
      parallel_copy(dst + off, piece_[q % 2].ptr, std::min(piece, total - off), b.threads);
    }
    // Execution errors of the chunk's kernel and copies surface here (or at an event above).
    PKSCAN_CUDA_CHECK(cudaStreamSynchronize(st));
    const auto* flags = static_cast<const std::uint8_t*>(status_stage_.ptr);
    for (std::int64_t j = 0; j < m; ++j)
      out.status[first + j] = flags[j] ? SubjectStatus::NonFinite : SubjectStatus::Ok;
  }

  template <class Real>
  void run_all(const PreparedBatch& b, ResultView<Real> out) {
    const Schedule& s = b.schedule;
    Plan p;
    p.n_out = static_cast<std::int64_t>(b.out_steps.size());
    p.dense = p.n_out == s.steps + 1;  // sorted, distinct, in [0, steps]: exactly 0..steps
    p.power = method_ == Method::Power && !p.dense;
    if (p.power) {
      p.levels = 1;
      while (p.levels < 62 && (std::int64_t{1} << p.levels) <= s.steps) ++p.levels;
    }
    const std::size_t nn = static_cast<std::size_t>(b.n) * static_cast<std::size_t>(b.n);
    p.in_per_subject = (2 + s.partial_lengths.size()) * nn * sizeof(double);
    p.out_per_subject =
        static_cast<std::size_t>(p.n_out) * static_cast<std::size_t>(b.n) * sizeof(Real);
    p.table_per_subject = p.power ? static_cast<std::size_t>(p.levels) * 2 * nn * sizeof(Real) : 0;

    const cuda::DeviceSchedule ds = upload_schedule(b, p);
    plan_chunks(b, p, sched_.bytes);

    // Buffers for a full chunk in each slot used (grown only when too small). plan_chunks()
    // counted every cached device buffer as reusable, so when one must grow all are freed
    // first (no old buffer stays next to the new ones), and an unused second slot gives its
    // buffers back.
    const std::size_t um = static_cast<std::size_t>(p.chunk);
    const std::size_t padded = static_cast<std::size_t>(round_up(p.chunk, cuda::kBlockThreads));
    const std::size_t need_in = p.in_per_subject * um;
    const std::size_t need_out = p.out_per_subject * um;
    const std::size_t need_table = p.power ? p.table_per_subject * padded : 0;
    const int slots = p.chunks > 1 ? 2 : 1;
    bool grow = false;
    for (int i = 0; i < slots; ++i) {
      const Slot& sl = slot_[i];
      grow = grow || sl.in.bytes < need_in || sl.out.bytes < need_out || sl.status.bytes < um ||
             sl.table.bytes < need_table;
    }
    for (int i = 0; i < 2; ++i) {
      if (grow || i >= slots) release_device(slot_[i]);
      if (i >= slots) continue;
      Slot& sl = slot_[i];
      sl.in.reserve(need_in);
      sl.out.reserve(need_out);
      sl.status.reserve(um);
      sl.table.reserve(need_table);
      sl.in_stage.reserve(need_in);
    }
    status_stage_.reserve(um);
    p.piece = std::min(kPieceBytes, p.out_per_subject * um);
    for (PinnedBuffer& pb : piece_) pb.reserve(p.piece);

    auto chunk_first = [&](std::int64_t i) { return i * p.chunk; };
    auto chunk_size = [&](std::int64_t i) {
      return std::min(p.chunk, b.subjects - chunk_first(i));
    };
    launch_chunk<Real>(b, p, ds, chunk_first(0), chunk_size(0), slot_[0]);
    for (std::int64_t i = 0; i < p.chunks; ++i) {
      if (i + 1 < p.chunks)
        launch_chunk<Real>(b, p, ds, chunk_first(i + 1), chunk_size(i + 1), slot_[(i + 1) % 2]);
      drain_chunk<Real>(b, p, chunk_first(i), chunk_size(i), slot_[i % 2], out);
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_batched_backend() {
  return std::make_unique<CudaBackend>(Method::Batched);
}

std::unique_ptr<Backend> make_cuda_power_backend() {
  return std::make_unique<CudaBackend>(Method::Power);
}

}  // namespace detail
}  // namespace pkscan
