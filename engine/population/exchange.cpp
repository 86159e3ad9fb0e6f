// The messages of a run split over several processes (see exchange.hpp). Every rank runs the
// same program on one kind of machine, so values travel as their bytes.
#include "population/exchange.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <pkscan/error.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "api/result_parts.hpp"
#include "core/block.hpp"
#include "grid/fused_summary.hpp"
#include "summary/refine.hpp"
#include "summary/sketch.hpp"

namespace pkscan {

namespace {

// The error kinds a message carries, so that rank 0 throws what the other rank caught.
enum class ErrorKind : std::uint8_t { Error, InvalidArgument, DomainError, OutOfMemory, Other };

class Writer {
 public:
  explicit Writer(std::vector<char>& out) : out_(out) { out_.clear(); }
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    raw(&v, sizeof(T));
  }
  template <class T>
  void array(const T* p, std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    pod(static_cast<std::uint64_t>(n));
    if (n != 0) raw(p, n * sizeof(T));
  }
  template <class V>
  void vec(const V& v) {
    array(v.data(), v.size());
  }
  // n values of T without their length (a part of an array whose length was written).
  template <class T>
  void values(const T* p, std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n != 0) raw(p, n * sizeof(T));
  }
  void reserve(std::size_t bytes) { out_.reserve(bytes); }

 private:
  void raw(const void* p, std::size_t bytes) {
    const std::size_t at = out_.size();
    out_.resize(at + bytes);
    std::memcpy(out_.data() + at, p, bytes);
  }
  std::vector<char>& out_;
};

class Reader {
 public:
  Reader(const std::vector<char>& in, int from) : in_(in), from_(from) {}
  template <class T>
  T pod() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  // The next array's length, checked against what is left.
  template <class T>
  std::size_t length() {
    const auto n = pod<std::uint64_t>();
    if (n > (in_.size() - at_) / sizeof(T)) bad();
    return static_cast<std::size_t>(n);
  }
  template <class T>
  void vec(std::vector<T>& v) {
    v.resize(length<T>());
    if (!v.empty()) std::memcpy(v.data(), take(v.size() * sizeof(T)), v.size() * sizeof(T));
  }
  template <class T>
  void array(Array<T>& v) {
    const std::size_t n = length<T>();
    v.resize_uninitialized(n);
    if (n != 0) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
  }
  // n values of T into p (their length was read by length<T>()).
  template <class T>
  void copy(T* p, std::size_t n) {
    if (n != 0) std::memcpy(p, take(n * sizeof(T)), n * sizeof(T));
  }
  void end() const {
    if (at_ != in_.size()) bad();
  }
  [[noreturn]] void bad() const {
    throw Error("rank " + std::to_string(from_) + " sent a malformed message (" +
                std::to_string(in_.size()) + " bytes)");
  }

 private:
  const char* take(std::size_t bytes) {
    if (bytes > in_.size() - at_) bad();
    const char* p = in_.data() + at_;
    at_ += bytes;
    return p;
  }
  const std::vector<char>& in_;
  std::size_t at_ = 0;
  int from_ = 0;
};

[[noreturn]] void throw_error(Reader& r, int from) {
  const auto kind = r.pod<ErrorKind>();
  std::vector<char> text;
  r.vec(text);
  r.end();
  const std::string what =
      "rank " + std::to_string(from) + ": " + std::string(text.begin(), text.end());
  switch (kind) {
    case ErrorKind::InvalidArgument:
      throw InvalidArgument(what);
    case ErrorKind::DomainError:
      throw DomainError(what);
    case ErrorKind::OutOfMemory:
      throw Error(what + " (out of memory)");
    case ErrorKind::Error:
    case ErrorKind::Other:
      break;
  }
  throw Error(what);
}

// A result's members (api/result_parts.hpp), written and read in one order.
void write_result(Writer& w, const SimulationResult& result) {
  const detail::ResultParts r = detail::result_parts(const_cast<SimulationResult&>(result));
  w.pod(*r.subjects);
  w.pod(*r.compartments);
  w.pod(*r.precision);
  w.vec(*r.output_times);
  w.vec(*r.output_steps);
  w.vec(*r.volumes);
  w.vec(*r.amounts_f64);
  w.vec(*r.amounts_f32);
  w.vec(*r.conc_f64);
  w.vec(*r.conc_f32);
  w.vec(*r.status);
  w.pod(*r.summary);
}

void read_result(Reader& rd, SimulationResult& result) {
  const detail::ResultParts r = detail::result_parts(result);
  *r.subjects = rd.pod<std::int64_t>();
  *r.compartments = rd.pod<int>();
  *r.precision = rd.pod<Precision>();
  rd.vec(*r.output_times);
  rd.vec(*r.output_steps);
  rd.vec(*r.volumes);
  rd.array(*r.amounts_f64);
  rd.array(*r.amounts_f32);
  rd.array(*r.conc_f64);
  rd.array(*r.conc_f32);
  rd.vec(*r.status);
  *r.summary = rd.pod<RunSummary>();
}

// The message's kind: `want`, or an error of the other rank, thrown here.
void expect(Reader& r, int from, detail::MessageKind want) {
  const auto kind = r.pod<detail::MessageKind>();
  if (kind == detail::MessageKind::Error) throw_error(r, from);
  if (kind != want) r.bad();
}

}  // namespace

namespace detail {

void pack_unit(std::int64_t first, const SimulationResult& result, const UnitColumns& columns,
               const double* parameters, std::size_t parameter_values, std::vector<char>& message) {
  Writer w(message);
  w.pod(MessageKind::Unit);
  w.pod(first);
  write_result(w, result);
  w.vec(columns.ids);
  w.vec(columns.extra);
  w.array(parameters, parameter_values);
  w.vec(columns.metrics);
  w.vec(columns.etas);
  w.vec(columns.ipred);
  w.vec(columns.dv);
  w.vec(columns.blq);
  w.pod(columns.partial);
  w.vec(columns.block_sums);
  w.vec(columns.tail);
  w.pod(columns.excluded);
  w.pod(columns.formatted);
  w.vec(columns.bytes);
}

void pack_current_error(std::vector<char>& message) {
  ErrorKind kind = ErrorKind::Other;
  std::string text = "unknown error";
  try {
    throw;
  } catch (const InvalidArgument& e) {
    kind = ErrorKind::InvalidArgument;
    text = e.what();
  } catch (const DomainError& e) {
    kind = ErrorKind::DomainError;
    text = e.what();
  } catch (const Error& e) {
    kind = ErrorKind::Error;
    text = e.what();
  } catch (const std::bad_alloc&) {
    kind = ErrorKind::OutOfMemory;
    text = "out of memory";
  } catch (const std::exception& e) {
    text = e.what();
  } catch (...) {
  }
  Writer w(message);
  w.pod(MessageKind::Error);
  w.pod(kind);
  w.array(text.data(), text.size());
}

void pack_done(std::vector<char>& message) {
  Writer w(message);
  w.pod(MessageKind::Done);
}

std::int64_t unpack_unit(const std::vector<char>& message, int from, SimulationResult& result,
                         UnitColumns& columns) {
  Reader r(message, from);
  expect(r, from, MessageKind::Unit);
  const auto first = r.pod<std::int64_t>();
  read_result(r, result);
  r.vec(columns.ids);
  r.vec(columns.extra);
  r.vec(columns.parameters);
  r.vec(columns.metrics);
  r.vec(columns.etas);
  r.vec(columns.ipred);
  r.vec(columns.dv);
  r.vec(columns.blq);
  columns.partial = r.pod<bool>();
  r.vec(columns.block_sums);
  r.vec(columns.tail);
  columns.excluded = r.pod<std::int64_t>();
  columns.formatted = r.pod<bool>();
  r.vec(columns.bytes);
  r.end();
  return first;
}

void pack_bytes(const std::vector<char>& bytes, std::vector<char>& message) {
  Writer w(message);
  w.reserve(bytes.size() + 16);
  w.pod(MessageKind::Bytes);
  w.array(bytes.data(), bytes.size());
}

void unpack_bytes(const std::vector<char>& message, int from, std::vector<char>& bytes) {
  Reader r(message, from);
  expect(r, from, MessageKind::Bytes);
  r.vec(bytes);
  r.end();
}

void unpack_done(const std::vector<char>& message, int from) {
  Reader r(message, from);
  expect(r, from, MessageKind::Done);
  r.end();
}

void take_partial(TimeSummary& worker, SimulationResult& chunk, UnitColumns& out) {
  out.partial = true;
  FusedSummary::take_capture(worker, out.block_sums, out.tail, out.excluded);
  drop_amounts(chunk);
}

void drop_amounts(SimulationResult& result) {
  const ResultParts p = result_parts(result);
  p.amounts_f64->resize_uninitialized(0);
  p.amounts_f32->resize_uninitialized(0);
}

void commit_partial(TimeSummary& summary, std::int64_t n, const UnitColumns& in) {
  FusedSummary::commit_counts(summary, n, in.block_sums.data(), in.tail.data(), in.excluded);
}

void pack_sketch(const TimeSummary& worker, std::vector<char>& message) {
  const std::vector<const Sketch*> all = FusedSummary::sketches(worker);
  Writer w(message);
  w.pod(MessageKind::Sketch);
  w.pod(static_cast<std::uint64_t>(all.size()));
  for (const Sketch* h : all) {
    w.pod(h->width);
    w.pod(h->stride);
    w.array(h->counts, static_cast<std::size_t>(h->dummy));  // the rows' counters, no dummies
    w.vec(h->lo);
    w.vec(h->maxkey);
    w.vec(h->zero);
    w.vec(h->under);
  }
}

void unpack_sketch(const std::vector<char>& message, int from, TimeSummary& summary) {
  Reader r(message, from);
  expect(r, from, MessageKind::Sketch);
  const auto n = r.pod<std::uint64_t>();
  if (n > 4096) r.bad();
  for (std::uint64_t i = 0; i < n; ++i) {
    std::unique_ptr<Sketch, SketchFree> h(new Sketch);
    init_sketch(*h, FusedSummary::rows(summary), FusedSummary::window_binades(summary), false);
    if (r.pod<std::int64_t>() != h->width || r.pod<std::int64_t>() != h->stride) r.bad();
    const std::size_t counts = r.length<std::uint32_t>();
    if (counts != static_cast<std::size_t>(h->dummy)) r.bad();
    r.copy(h->counts, counts);
    const std::size_t per_row = h->lo.size();
    r.vec(h->lo);
    r.vec(h->maxkey);
    r.vec(h->zero);
    r.vec(h->under);
    if (h->lo.size() != per_row || h->maxkey.size() != per_row || h->zero.size() != per_row ||
        h->under.size() != per_row)
      r.bad();
    FusedSummary::adopt_sketch(summary, std::move(h));
  }
  r.end();
}

void pack_design_unit(const DesignChunk& c, int parameters, int etas, int kappas,
                      const std::vector<char>* formatted, std::vector<char>& message) {
  const DatasetResult& r = *c.result;
  const auto rows = static_cast<std::size_t>(r.rows());
  const std::size_t subjects = r.status.size();
  const auto table = static_cast<std::size_t>(c.table_rows);
  Writer w(message);
  if (formatted != nullptr) {
    w.reserve(formatted->size() + 1024);
    w.pod(MessageKind::DesignUnit);
    w.pod(c.replicate);
    w.pod(std::uint8_t{1});
    w.pod(r.rows());
    w.pod(r.summary);
    w.vec(*formatted);
    return;
  }
  w.reserve(rows * (8 * 5 + 16 * static_cast<std::size_t>(r.compartments)) +
            table * 8 * static_cast<std::size_t>(2 + parameters + etas + kappas) + 1024);
  w.pod(MessageKind::DesignUnit);
  w.pod(c.replicate);
  w.pod(std::uint8_t{0});
  w.pod(r.compartments);
  w.vec(r.subject);
  w.vec(r.record);
  w.vec(r.time);
  w.vec(r.compartment);
  w.vec(r.amounts);
  w.vec(r.concentrations);
  w.vec(r.prediction);
  w.vec(r.status);
  w.pod(r.summary);
  // Each optional array: whether it is there, then its values.
  const auto optional = [&](const auto* p, std::size_t n) {
    w.pod(static_cast<std::uint8_t>(p != nullptr));
    if (p != nullptr) w.array(p, n);
  };
  optional(c.dv, rows);
  optional(c.blq, rows);
  optional(c.source, subjects);
  w.pod(c.table_rows);
  optional(c.table_subject, table);
  optional(c.table_occasion, table);
  optional(c.table_parameters, table * static_cast<std::size_t>(parameters));
  optional(c.table_etas, table * static_cast<std::size_t>(etas));
  optional(c.table_kappas, table * static_cast<std::size_t>(kappas));
}

std::int64_t unpack_design_unit(const std::vector<char>& message, int from, int parameters,
                                int etas, int kappas, DesignUnit& u) {
  Reader r(message, from);
  expect(r, from, MessageKind::DesignUnit);
  DesignChunk& c = u.chunk;
  c = DesignChunk{};
  c.replicate = r.pod<std::int64_t>();
  DatasetResult& d = u.result;
  u.formatted = r.pod<std::uint8_t>() != 0;
  if (u.formatted) {
    u.rows = r.pod<std::int64_t>();
    d.summary = r.pod<RunSummary>();
    r.vec(u.bytes);
    r.end();
    if (u.rows < 0) r.bad();
    return c.replicate;
  }
  d.compartments = r.pod<int>();
  r.vec(d.subject);
  r.vec(d.record);
  r.vec(d.time);
  r.vec(d.compartment);
  r.vec(d.amounts);
  r.vec(d.concentrations);
  r.vec(d.prediction);
  r.vec(d.status);
  d.summary = r.pod<RunSummary>();
  const std::size_t rows = d.time.size();
  const auto nc = static_cast<std::size_t>(std::max(d.compartments, 0));
  if (d.compartments <= 0 || d.subject.size() != rows || d.record.size() != rows ||
      d.compartment.size() != rows || d.amounts.size() != rows * nc ||
      d.concentrations.size() != rows * nc || d.prediction.size() != rows)
    r.bad();
  c.result = &d;
  // An optional array of `n` values.
  const auto optional =
      [&](auto& v, std::size_t n) -> const typename std::decay_t<decltype(v)>::value_type* {
    if (r.pod<std::uint8_t>() == 0) return nullptr;
    r.vec(v);
    if (v.size() != n) r.bad();
    return v.data();
  };
  c.dv = optional(u.dv, rows);
  c.blq = optional(u.blq, rows);
  c.source = optional(u.source, d.status.size());
  c.table_rows = r.pod<std::int64_t>();
  if (c.table_rows < 0) r.bad();
  const auto table = static_cast<std::size_t>(c.table_rows);
  c.table_subject = optional(u.table_subject, table);
  c.table_occasion = optional(u.table_occasion, table);
  c.table_parameters = optional(u.table_parameters, table * static_cast<std::size_t>(parameters));
  c.table_etas = optional(u.table_etas, table * static_cast<std::size_t>(etas));
  c.table_kappas = optional(u.table_kappas, table * static_cast<std::size_t>(kappas));
  r.end();
  return c.replicate;
}

void pack_pass_plan(std::vector<TimeSummary>& summaries, std::vector<char>& message) {
  Writer w(message);
  w.pod(MessageKind::PassPlan);
  w.pod(static_cast<std::uint64_t>(summaries.size()));
  std::vector<std::uint64_t> a, b;
  std::vector<std::int64_t> count;
  std::vector<std::int32_t> shift;
  for (TimeSummary& s : summaries) {
    const Refinement* f = FusedSummary::open_pass(s);
    w.pod(static_cast<std::uint8_t>(f != nullptr));
    if (f == nullptr) continue;
    a.clear();
    b.clear();
    count.clear();
    shift.clear();
    for (const RefineTarget* t : f->flat) {
      a.push_back(t->a);
      b.push_back(t->b);
      count.push_back(t->count);
      shift.push_back(t->shift);
    }
    w.vec(f->row_first);
    w.vec(a);
    w.vec(b);
    w.vec(count);
    w.vec(shift);
  }
}

bool unpack_pass_plan(const std::vector<char>& message, std::vector<TimeSummary>& workers) {
  Reader r(message, 0);
  expect(r, 0, MessageKind::PassPlan);
  if (r.pod<std::uint64_t>() != workers.size()) r.bad();
  bool any = false;
  std::vector<std::uint32_t> row_first;
  std::vector<std::uint64_t> a, b;
  std::vector<std::int64_t> count;
  std::vector<std::int32_t> shift;
  for (TimeSummary& s : workers) {
    const auto open = r.pod<std::uint8_t>();
    if (open == 0) {
      FusedSummary::set_pass(s, nullptr);
      continue;
    }
    r.vec(row_first);
    r.vec(a);
    r.vec(b);
    r.vec(count);
    r.vec(shift);
    const std::size_t rows = static_cast<std::size_t>(FusedSummary::rows(s));
    const std::size_t k = a.size();
    if (row_first.size() != rows + 1 || row_first.front() != 0 || row_first.back() != k ||
        b.size() != k || count.size() != k || shift.size() != k)
      r.bad();
    auto f = std::make_unique<Refinement>();
    f->targets.resize(rows);
    for (std::size_t row = 0; row < rows; ++row) {
      if (row_first[row + 1] < row_first[row]) r.bad();
      for (std::uint32_t i = row_first[row]; i < row_first[row + 1]; ++i) {
        // A target counts in at most 4096 sub-intervals (plan_pass): memory stays bounded.
        if (a[i] > b[i] || shift[i] < -1 || shift[i] > 63 ||
            (shift[i] >= 0 && ((b[i] - a[i]) >> shift[i]) >= 4096))
          r.bad();
        RefineTarget t;
        t.a = a[i];
        t.b = b[i];
        t.count = count[i];
        t.shift = shift[i];
        // The values this rank may collect, reserved (untouched pages cost nothing).
        if (t.shift < 0)
          t.values.reserve(static_cast<std::size_t>(std::max<std::int64_t>(0, t.count)));
        f->targets[row].push_back(std::move(t));
      }
    }
    lay_out_pass(*f);
    FusedSummary::set_pass(s, std::move(f));
    any = true;
  }
  r.end();
  return any;
}

void pack_pass_values(std::vector<TimeSummary>& workers, std::vector<char>& message) {
  // The message's size first: the values collected may be tens of MB, written once.
  std::size_t bytes = 64;
  for (TimeSummary& s : workers)
    if (const Refinement* f = FusedSummary::open_pass(s))
      for (const RefineTarget* t : f->flat)
        bytes += 3 * sizeof(std::uint64_t) + t->values.size() * sizeof(double) +
                 t->hist.size() * sizeof(std::uint32_t);
  Writer w(message);
  w.reserve(bytes + 64 * workers.size());
  w.pod(MessageKind::PassValues);
  w.pod(static_cast<std::uint64_t>(workers.size()));
  std::vector<std::int64_t> seen;
  std::vector<std::uint64_t> lo, hi;
  for (TimeSummary& s : workers) {
    const Refinement* f = FusedSummary::open_pass(s);
    w.pod(static_cast<std::uint8_t>(f != nullptr));
    if (f == nullptr) continue;
    seen.clear();
    lo.clear();
    hi.clear();
    std::uint64_t n_values = 0, n_hist = 0;
    for (const RefineTarget* t : f->flat) {
      seen.push_back(t->seen);
      lo.push_back(t->lo_seen);
      hi.push_back(t->hi_seen);
      n_values += t->values.size();
      n_hist += t->hist.size();
    }
    w.pod(f->subjects);
    w.pod(f->included);
    w.vec(seen);
    w.vec(lo);
    w.vec(hi);
    // The targets' values, then their sub-interval counts, each as one array.
    w.pod(n_values);
    for (const RefineTarget* t : f->flat) w.values(t->values.data(), t->values.size());
    w.pod(n_hist);
    for (const RefineTarget* t : f->flat) w.values(t->hist.data(), t->hist.size());
    FusedSummary::set_pass(s, nullptr);
  }
}

void unpack_pass_values(const std::vector<char>& message, int from,
                        std::vector<TimeSummary>& summaries) {
  Reader r(message, from);
  expect(r, from, MessageKind::PassValues);
  if (r.pod<std::uint64_t>() != summaries.size()) r.bad();
  std::vector<std::int64_t> seen;
  std::vector<std::uint64_t> lo, hi;
  std::vector<std::uint32_t> hist;
  for (TimeSummary& s : summaries) {
    Refinement* f = FusedSummary::open_pass(s);
    if ((r.pod<std::uint8_t>() != 0) != (f != nullptr)) r.bad();
    if (f == nullptr) continue;
    const auto subjects = r.pod<std::int64_t>();
    const auto included = r.pod<std::int64_t>();
    r.vec(seen);
    r.vec(lo);
    r.vec(hi);
    const std::size_t k = f->flat.size();
    if (seen.size() != k || lo.size() != k || hi.size() != k) r.bad();
    // A collecting target's values are as many as it saw.
    std::size_t want_values = 0, want_hist = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const RefineTarget& t = *f->flat[i];
      if (seen[i] < 0) r.bad();
      if (t.shift < 0) want_values += static_cast<std::size_t>(seen[i]);
      want_hist += t.hist.size();
    }
    if (r.length<double>() != want_values) r.bad();
    for (std::size_t i = 0; i < k; ++i) {
      RefineTarget& t = *f->flat[i];
      t.seen += seen[i];
      t.lo_seen = std::min(t.lo_seen, lo[i]);
      t.hi_seen = std::max(t.hi_seen, hi[i]);
      if (t.shift >= 0) continue;
      const std::size_t at = t.values.size();
      t.values.resize(at + static_cast<std::size_t>(seen[i]));
      r.copy(t.values.data() + at, static_cast<std::size_t>(seen[i]));
    }
    if (r.length<std::uint32_t>() != want_hist) r.bad();
    for (RefineTarget* t : f->flat) {
      hist.resize(t->hist.size());
      r.copy(hist.data(), hist.size());
      for (std::size_t j = 0; j < hist.size(); ++j) t->hist[j] += hist[j];
    }
    f->subjects += subjects;
    f->included += included;
  }
  r.end();
}

}  // namespace detail

}  // namespace pkscan
