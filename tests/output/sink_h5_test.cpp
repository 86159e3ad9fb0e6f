// The HDF5 result sink (output/include/pkscan/output/sink.hpp): a small run simulated in chunks
// and streamed to the sink; the file is read back with the HDF5 C API and every value, shape,
// dtype and attribute compared, and (SinkH5py) read by h5py.
#include "support/sink_support.hpp"

namespace pkscan::output {
namespace {

// ---- HDF5 read-back helpers (HDF5 C API) --------------------------------------------------------

struct H5Closer {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5Closer() {
    if (id >= 0) close(id);
  }
};

std::vector<hsize_t> h5_dims(hid_t file, const char* name) {
  const hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  EXPECT_GE(d, 0) << "no dataset " << name;
  if (d < 0) return {};
  H5Closer dc{d, H5Dclose};
  H5Closer s{H5Dget_space(d), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(s.id);
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(s.id, dims.data(), nullptr);
  return dims;
}

// Class and size in bytes of a dataset's stored type.
std::pair<H5T_class_t, std::size_t> h5_type(hid_t file, const char* name) {
  H5Closer d{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  H5Closer t{H5Dget_type(d.id), H5Tclose};
  return {H5Tget_class(t.id), H5Tget_size(t.id)};
}

template <class T>
std::vector<T> h5_read(hid_t file, const char* name, hid_t mem_type) {
  std::size_t n = 1;
  for (hsize_t x : h5_dims(file, name)) n *= static_cast<std::size_t>(x);
  std::vector<T> v(n);
  H5Closer d{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  EXPECT_GE(H5Dread(d.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0) << name;
  return v;
}

std::vector<std::string> h5_strings(hid_t loc, const char* object, const char* attr) {
  H5Closer a{H5Aopen_by_name(loc, object, attr, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  EXPECT_GE(a.id, 0) << "no attribute " << object << " " << attr;
  if (a.id < 0) return {};
  H5Closer ft{H5Aget_type(a.id), H5Tclose};
  EXPECT_GT(H5Tis_variable_str(ft.id), 0) << attr << " is not a variable-length string";
  EXPECT_EQ(H5Tget_cset(ft.id), H5T_CSET_UTF8) << attr;
  H5Closer s{H5Aget_space(a.id), H5Sclose};
  const hssize_t n = H5Sget_simple_extent_npoints(s.id);
  H5Closer mt{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(mt.id, H5T_VARIABLE);
  H5Tset_cset(mt.id, H5T_CSET_UTF8);
  std::vector<char*> buf(static_cast<std::size_t>(n));
  EXPECT_GE(H5Aread(a.id, mt.id, buf.data()), 0);
  std::vector<std::string> out(buf.begin(), buf.end());
  H5Dvlen_reclaim(mt.id, s.id, H5P_DEFAULT, buf.data());
  return out;
}

// Chunk dimensions and whether the shuffle and deflate filters are set.
struct Storage {
  std::vector<hsize_t> chunk;
  bool shuffle = false;
  bool deflate = false;
};

Storage h5_storage(hid_t file, const char* name) {
  H5Closer d{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  H5Closer p{H5Dget_create_plist(d.id), H5Pclose};
  Storage st;
  if (H5Pget_layout(p.id) != H5D_CHUNKED) return st;
  st.chunk.resize(8);
  st.chunk.resize(static_cast<std::size_t>(H5Pget_chunk(p.id, 8, st.chunk.data())));
  for (int i = 0; i < H5Pget_nfilters(p.id); ++i) {
    unsigned flags = 0;
    std::size_t nvals = 0;
    unsigned config = 0;
    const H5Z_filter_t f = H5Pget_filter2(p.id, static_cast<unsigned>(i), &flags, &nvals, nullptr,
                                          0, nullptr, &config);
    st.shuffle = st.shuffle || f == H5Z_FILTER_SHUFFLE;
    st.deflate = st.deflate || f == H5Z_FILTER_DEFLATE;
  }
  return st;
}

// Volume of each compartment as the test set it (v_depot defaults to 1).
const double kVolume[3] = {1.0, kVCentral, kVPeripheral};

template <class Real>
void expect_trajectories(hid_t file, const ChunkedRun& run, hid_t mem_type) {
  const std::vector<Real> amount = h5_read<Real>(file, "amount", mem_type);
  const std::vector<Real> conc = h5_read<Real>(file, "concentration", mem_type);
  const std::size_t per = static_cast<std::size_t>((run.full.grid.steps + 1) * 3);
  ASSERT_EQ(amount.size(), kSubjects * per);
  ASSERT_EQ(conc.size(), kSubjects * per);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < run.parts.size(); ++i) {
    const SimulationResult& r = run.parts[i];
    for (std::int64_t s = 0; s < r.subjects(); ++s)
      for (std::int64_t t = 0; t < r.times(); ++t)
        for (int c = 0; c < 3; ++c) {
          const std::size_t k = static_cast<std::size_t>(run.firsts[i] + s) * per +
                                static_cast<std::size_t>(t * 3 + c);
          const Real a = static_cast<Real>(r.amount(s, t, c));
          const Real want_conc = a / static_cast<Real>(kVolume[c]);
          if (amount[k] != a || conc[k] != want_conc) {
            if (++mismatches <= 5)
              ADD_FAILURE() << "row " << run.firsts[i] + s << " time " << t << " compartment " << c
                            << ": amount " << amount[k] << " vs " << a << ", concentration "
                            << conc[k] << " vs " << want_conc;
          }
        }
  }
  EXPECT_EQ(mismatches, 0u);
}

// ---- HDF5 ---------------------------------------------------------------------------------------

class SinkH5 : public ::testing::TestWithParam<Precision> {};

TEST_P(SinkH5, RoundTripEveryValueShapeTypeAndAttribute) {
  const Precision precision = GetParam();
  const bool f32 = precision == Precision::Float32;
  const ChunkedRun run(precision);
  TempDir dir;
  const RunLayout layout = run.layout(precision, true);
  const TimeSummaryTable summary = summary_table(layout);
  {
    const std::unique_ptr<ResultSink> sink = make_sink(dir.file("pop.h5"), layout);
    run.write_all(*sink, true);
    sink->write_summary(summary);
    sink->commit();
  }
  EXPECT_EQ(dir.names(), std::vector<std::string>{"pop.h5"});
  const hid_t file = H5Fopen(dir.file("pop.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  H5Closer fc{file, H5Fclose};
  const hsize_t T = kSteps + 1, N = kSubjects;

  // Root attributes.
  EXPECT_EQ(h5_strings(file, ".", "run_file"), std::vector<std::string>{"runs/pop µ.yaml"});
  EXPECT_EQ(h5_strings(file, ".", "run_text"),
            std::vector<std::string>{"model: three_compartment\n# µg/L, \"quoted\"\n"});
  EXPECT_EQ(h5_strings(file, ".", "model"), std::vector<std::string>{"three_compartment"});
  EXPECT_EQ(h5_strings(file, ".", "compartments"),
            (std::vector<std::string>{"depot", "central", "peripheral"}));
  EXPECT_EQ(h5_strings(file, ".", "pkscan_version"),
            std::vector<std::string>{PKSCAN_VERSION_STRING});

  // /time
  EXPECT_EQ(h5_dims(file, "time"), std::vector<hsize_t>{T});
  EXPECT_EQ(h5_type(file, "time"), std::make_pair(H5T_FLOAT, std::size_t{8}));
  const std::vector<double> time = h5_read<double>(file, "time", H5T_NATIVE_DOUBLE);
  ASSERT_EQ(time.size(), T);
  for (hsize_t i = 0; i < T; ++i) EXPECT_EQ(time[i], static_cast<double>(i) * kDt);

  // /amount, /concentration: shape, dtype, storage, values.
  for (const char* name : {"amount", "concentration"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(h5_dims(file, name), (std::vector<hsize_t>{N, T, 3}));
    EXPECT_EQ(h5_type(file, name), std::make_pair(H5T_FLOAT, std::size_t{f32 ? 4u : 8u}));
    const Storage st = h5_storage(file, name);
    ASSERT_EQ(st.chunk.size(), 3u);
    EXPECT_EQ(st.chunk[0], N);  // small run: every subject in one chunk
    EXPECT_EQ(st.chunk[1], T);  // one subject's whole trajectory in one chunk
    EXPECT_EQ(st.chunk[2], 3u);
    EXPECT_TRUE(st.shuffle);
    EXPECT_TRUE(st.deflate);
  }
  if (f32)
    expect_trajectories<float>(file, run, H5T_NATIVE_FLOAT);
  else
    expect_trajectories<double>(file, run, H5T_NATIVE_DOUBLE);

  // /id, /extra, /parameters, /metrics
  EXPECT_EQ(h5_dims(file, "id"), std::vector<hsize_t>{N});
  EXPECT_EQ(h5_type(file, "id"), std::make_pair(H5T_INTEGER, std::size_t{8}));
  EXPECT_EQ(h5_read<std::int64_t>(file, "id", H5T_NATIVE_INT64), run.ids);
  EXPECT_EQ(h5_dims(file, "extra"), (std::vector<hsize_t>{N, 2}));
  EXPECT_EQ(h5_strings(file, "extra", "columns"), run.extra_names);
  EXPECT_EQ(h5_read<double>(file, "extra", H5T_NATIVE_DOUBLE), run.extra);
  const ModelInfo& m = run.full.parameters.info();
  const hsize_t P = m.parameters.size();
  EXPECT_EQ(h5_dims(file, "parameters"), (std::vector<hsize_t>{N, P}));
  std::vector<std::string> pnames;
  for (const ParameterInfo& p : m.parameters) pnames.push_back(p.name);
  EXPECT_EQ(h5_strings(file, "parameters", "columns"), pnames);
  const std::vector<double> params = h5_read<double>(file, "parameters", H5T_NATIVE_DOUBLE);
  ASSERT_EQ(params.size(), N * P);
  for (std::size_t s = 0; s < N; ++s)
    for (std::size_t c = 0; c < P; ++c) {
      const double want =
          run.full.parameters.get(static_cast<std::int64_t>(s), static_cast<int>(c));
      const double got = params[s * P + c];
      EXPECT_TRUE((std::isnan(want) && std::isnan(got)) || want == got)
          << "subject " << s << " " << pnames[c] << ": " << got << " vs " << want;
    }
  EXPECT_EQ(params[2 * P + static_cast<std::size_t>(parameter_index(m, "ka"))], kKa[2]);
  EXPECT_EQ(h5_dims(file, "metrics"), (std::vector<hsize_t>{N, 3}));
  EXPECT_EQ(h5_strings(file, "metrics", "columns"), run.metric_names);
  EXPECT_EQ(h5_strings(file, "metrics", "compartment"), std::vector<std::string>{"central"});
  EXPECT_EQ(h5_read<double>(file, "metrics", H5T_NATIVE_DOUBLE), run.metrics);

  // /summary
  EXPECT_EQ(h5_dims(file, "summary/mean"), (std::vector<hsize_t>{T, 3}));
  EXPECT_EQ(h5_dims(file, "summary/quantiles"), (std::vector<hsize_t>{T, 3, 3}));
  EXPECT_EQ(h5_dims(file, "summary/percentiles"), std::vector<hsize_t>{3});
  EXPECT_EQ(h5_dims(file, "summary/count"), std::vector<hsize_t>{});
  const std::vector<double> mean = h5_read<double>(file, "summary/mean", H5T_NATIVE_DOUBLE);
  const std::vector<double> quant = h5_read<double>(file, "summary/quantiles", H5T_NATIVE_DOUBLE);
  ASSERT_EQ(mean.size(), T * 3);
  ASSERT_EQ(quant.size(), T * 9);
  for (std::size_t i = 0; i < T; ++i)
    for (std::size_t c = 0; c < 3; ++c) {
      EXPECT_EQ(mean[i * 3 + c], static_cast<double>(i) + 0.25 * static_cast<double>(c));
      for (std::size_t q = 0; q < 3; ++q)
        EXPECT_EQ(quant[(i * 3 + c) * 3 + q], static_cast<double>(i) +
                                                  0.25 * static_cast<double>(c) +
                                                  0.125 * static_cast<double>(q + 1));
    }
  EXPECT_EQ(h5_read<double>(file, "summary/percentiles", H5T_NATIVE_DOUBLE),
            (std::vector<double>{2.5, 50, 97.5}));
  EXPECT_EQ(h5_read<std::int64_t>(file, "summary/count", H5T_NATIVE_INT64),
            std::vector<std::int64_t>{kSubjects - 1});
  EXPECT_EQ(h5_read<std::int64_t>(file, "summary/excluded", H5T_NATIVE_INT64),
            std::vector<std::int64_t>{1});
  {
    H5Closer a{H5Aopen_by_name(file, "summary", "exact", H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    ASSERT_GE(a.id, 0);
    std::int8_t exact = -1;
    EXPECT_GE(H5Aread(a.id, H5T_NATIVE_INT8, &exact), 0);
    EXPECT_EQ(exact, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, SinkH5,
                         ::testing::Values(Precision::Float64, Precision::Float32),
                         [](const auto& info) {
                           return info.param == Precision::Float64 ? "Float64" : "Float32";
                         });

TEST(SinkH5Layout, RowsNotKnownInAdvanceGrowAsChunksArrive) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  RunLayout layout = run.layout(Precision::Float64, false);
  layout.rows = 0;
  layout.extra_columns.clear();
  {
    const std::unique_ptr<ResultSink> sink = make_h5_sink(dir.file("pop.h5"), layout);
    for (std::size_t i = 0; i < run.parts.size(); ++i) {
      Chunk c;
      c.first = run.firsts[i];
      c.result = &run.parts[i];
      c.parameters =
          run.full.parameters.values().data() + run.firsts[i] * run.full.parameters.parameters();
      sink->write(c);  // ids default to row + 1
    }
    sink->commit();
  }
  const hid_t file = H5Fopen(dir.file("pop.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  H5Closer fc{file, H5Fclose};
  EXPECT_EQ(h5_dims(file, "amount"), (std::vector<hsize_t>{kSubjects, kSteps + 1, 3}));
  EXPECT_EQ(h5_read<std::int64_t>(file, "id", H5T_NATIVE_INT64),
            (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(H5Lexists(file, "extra", H5P_DEFAULT), 0);
  EXPECT_EQ(H5Lexists(file, "metrics", H5P_DEFAULT), 0);
  EXPECT_EQ(H5Lexists(file, "summary", H5P_DEFAULT), 0);
  expect_trajectories<double>(file, run, H5T_NATIVE_DOUBLE);
}

TEST(SinkH5Layout, LongTrajectoriesAreChunkedAlongTime) {
  // 20001 times x 3 compartments x 8 bytes = 480 KB per subject, more than one chunk's target
  // (256 KiB): chunks hold one subject and a block of times.
  constexpr std::int64_t steps = 20000;
  const ChunkedRun run(Precision::Float64, steps);
  TempDir dir;
  const RunLayout layout = run.layout(Precision::Float64, false);
  {
    const std::unique_ptr<ResultSink> sink = make_h5_sink(dir.file("long.h5"), layout);
    run.write_all(*sink, false);
    sink->commit();
  }
  const hid_t file = H5Fopen(dir.file("long.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  H5Closer fc{file, H5Fclose};
  const Storage st = h5_storage(file, "concentration");
  ASSERT_EQ(st.chunk.size(), 3u);
  EXPECT_EQ(st.chunk[0], 1u);
  EXPECT_GT(st.chunk[1], 1u);
  EXPECT_LT(st.chunk[1], static_cast<hsize_t>(steps + 1));
  EXPECT_LE(st.chunk[1] * 3 * 8, 256u * 1024u);
  expect_trajectories<double>(file, run, H5T_NATIVE_DOUBLE);
}

// Many HDF5 chunks, written by the caller in parts that do not line up with them, compressed on
// two threads (output/src/h5_chunk_writer.cpp): more chunks than one round of compression takes,
// a chunk assembled over four write() calls, the edge chunk, rows known or not in advance. Read
// back with the HDF5 library's own filters, every value is the simulated one.
TEST(SinkH5Layout, ChunksCompressedInParallelReadBackExactly) {
  constexpr std::int64_t n = 300;
  // 1001 x 3 x 8 = 24024 bytes a row: 10 rows a chunk (20 in float32), 30 chunks (15)
  constexpr std::int64_t steps = 1000;
  Problem full = problem(steps);
  full.parameters = ParameterBatch(ModelKind::ThreeCompartment, n);
  for (std::int64_t s = 0; s < n; ++s) {
    full.parameters.set("ka", s, 0.5 + 0.01 * static_cast<double>(s));
    full.parameters.set("ke", s, 0.1 + 0.001 * static_cast<double>(s));
  }
  full.parameters.set_all("k12", 0.3);
  full.parameters.set_all("k21", 0.1);
  full.parameters.set_all("v_central", kVCentral);
  full.parameters.set_all("v_peripheral", kVPeripheral);
  for (const Precision precision : {Precision::Float64, Precision::Float32}) {
    for (const bool known : {true, false}) {
      SCOPED_TRACE(std::string(precision == Precision::Float64 ? "float64" : "float32") +
                   (known ? ", rows known" : ", rows not known"));
      const SimulationResult whole = simulate(full, options(precision));
      TempDir dir;
      RunLayout layout;
      layout.model = full.parameters.info_ptr();
      for (std::int64_t i = 0; i <= steps; ++i) layout.times.push_back(full.grid.time(i));
      layout.precision = precision;
      layout.rows = known ? n : 0;
      layout.threads = 2;
      {
        const std::unique_ptr<ResultSink> sink = make_h5_sink(dir.file("many.h5"), layout);
        std::int64_t first = 0;
        // Sums to 300; rows 70-79 arrive in four calls.
        for (const std::int64_t count : {40, 33, 5, 1, 1, 150, 70}) {
          const SimulationResult part = simulate(part_of(full, first, count), options(precision));
          Chunk c;
          c.first = first;
          c.result = &part;
          c.parameters = full.parameters.values().data() + first * full.parameters.parameters();
          sink->write(c);
          first += count;
        }
        sink->commit();
      }
      const hid_t file = H5Fopen(dir.file("many.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      ASSERT_GE(file, 0);
      H5Closer fc{file, H5Fclose};
      for (const char* name : {"amount", "concentration"}) {
        const Storage st = h5_storage(file, name);
        ASSERT_EQ(st.chunk.size(), 3u);
        EXPECT_EQ(st.chunk[0], precision == Precision::Float64 ? 10u : 21u) << name;
        EXPECT_TRUE(st.shuffle && st.deflate) << name;
        EXPECT_EQ(h5_dims(file, name), (std::vector<hsize_t>{n, steps + 1, 3}));
      }
      const bool f64 = precision == Precision::Float64;
      const std::vector<double> amount =
          h5_read<double>(file, "amount", H5T_NATIVE_DOUBLE);  // float32 widened exactly
      const std::vector<double> conc = h5_read<double>(file, "concentration", H5T_NATIVE_DOUBLE);
      std::size_t bad = 0;
      for (std::int64_t s = 0; s < n; ++s)
        for (std::int64_t t = 0; t <= steps; ++t)
          for (int c = 0; c < 3; ++c) {
            const std::size_t k = static_cast<std::size_t>((s * (steps + 1) + t) * 3 + c);
            const double a = whole.amount(s, t, c);
            const double want_conc =
                f64 ? a / kVolume[c]
                    : static_cast<double>(static_cast<float>(a) / static_cast<float>(kVolume[c]));
            if (amount[k] != a || conc[k] != want_conc) ++bad;
          }
      EXPECT_EQ(bad, 0u);
    }
  }
}

TEST(SinkH5Errors, HdfFailureIsOneLineErrorAndPrintsNothing) {
  const ChunkedRun run(Precision::Float64);
  TempDir dir;
  {
    const std::unique_ptr<ResultSink> sink =
        make_sink(dir.file("pop.h5"), run.layout(Precision::Float64, false));
    // Close the sink's datasets behind its back: its next HDF5 call fails inside HDF5.
    const ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_DATASET);
    ASSERT_GT(n, 0);
    std::vector<hid_t> ids(static_cast<std::size_t>(n));
    ASSERT_EQ(H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_DATASET, ids.size(), ids.data()), n);
    for (hid_t id : ids) H5Dclose(id);
    Chunk c;
    c.first = 0;
    c.result = &run.parts[0];
    c.extra = run.extra.data();
    c.parameters = run.full.parameters.values().data();
    ::testing::internal::CaptureStderr();
    try {
      sink->write(c);
      ADD_FAILURE() << "writing to closed datasets succeeded";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("cannot write HDF5 file " + dir.file("pop.h5") + ": dataset ", 0), 0u)
          << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
  EXPECT_EQ(dir.names(), std::vector<std::string>{});
}

// ---- h5py reads the file (registered by tests/CMakeLists.txt when h5py is importable) ----------

// The check in Python, given the file and N, T: shapes, dtypes, attributes as str, ids, the
// concentrations recomputed from the amounts and the volumes in /parameters, the summary.
constexpr const char* kH5pyCheck = R"(
import sys, h5py, numpy as np
path, n, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(path, "r") as f:
    assert f.attrs["model"] == "three_compartment", f.attrs["model"]
    assert list(f.attrs["compartments"]) == ["depot", "central", "peripheral"]
    assert f.attrs["run_file"] == "runs/pop \u00b5.yaml"
    assert f.attrs["run_text"].startswith("model: three_compartment\n")
    assert f["time"].shape == (t,) and f["time"].dtype == np.float64
    a, c = f["amount"][...], f["concentration"][...]
    assert a.shape == (n, t, 3) and c.shape == (n, t, 3), (a.shape, c.shape)
    assert a.dtype == np.float32 and c.dtype == np.float32, (a.dtype, c.dtype)
    cols = list(f["parameters"].attrs["columns"])
    p = f["parameters"][...]
    vol = np.stack([p[:, cols.index(v)] for v in ("v_depot", "v_central", "v_peripheral")], 1)
    assert np.array_equal(c, a / vol.astype(np.float32)[:, None, :])
    assert f["id"].dtype == np.int64 and list(f["id"][...]) == [101 + i for i in range(n)]
    assert list(f["extra"].attrs["columns"]) == ["replicate", "ka"]
    assert list(f["metrics"].attrs["columns"]) == ["cmax", "tmax", "auc"]
    assert f["summary/quantiles"].shape == (t, 3, 3)
    assert list(f["summary/percentiles"][...]) == [2.5, 50.0, 97.5]
    assert int(f["summary/count"][()]) == n - 1 and int(f["summary/excluded"][()]) == 1
    assert int(f["summary"].attrs["exact"]) == 0
    assert np.array_equal(f["summary/mean"][...][:, 1], np.arange(t) + 0.25)
print("h5py ok")
)";

TEST(SinkH5py, ReadByH5py) {
  const char* python = std::getenv("PKSCAN_TEST_PYTHON");
  if (python == nullptr || *python == '\0')
    GTEST_SKIP() << "PKSCAN_TEST_PYTHON is not set (ctest sets it when h5py is importable)";
  const ChunkedRun run(Precision::Float32);
  TempDir dir;
  const RunLayout layout = run.layout(Precision::Float32, true);
  {
    const std::unique_ptr<ResultSink> sink = make_sink(dir.file("pop.hdf5"), layout);
    run.write_all(*sink, true);
    sink->write_summary(summary_table(layout));
    sink->commit();
  }
  const std::string file = dir.file("pop.hdf5");
  const std::string log = dir.file("python.log");
  const std::string n = std::to_string(kSubjects), t = std::to_string(kSteps + 1);
  std::vector<char*> argv;
  std::string args[] = {python, "-c", kH5pyCheck, file, n, t};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, python, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ASSERT_EQ(rc, 0) << "cannot start " << python << ": " << std::strerror(rc);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string output = read_text(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_EQ(output, "h5py ok\n");
}

}  // namespace
}  // namespace pkscan::output
