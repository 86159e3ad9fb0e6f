// The HDF5 sink of design runs (make_design_sink with an .h5 path, sink.hpp) through the library:
// hand-made replicates written and read back with the HDF5 C API (values, types, attributes), and
// the sink's contract: nothing left without commit(), replicates in order, bad column names and
// paths refused before any file exists. tests/differential/test_design_h5.py compares whole runs
// with their CSV through `pkscan run`.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/design.hpp>
#include <pkscan/error.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/output/sink.hpp>
#include <string>
#include <vector>

#include "support/scratch_dir.hpp"

namespace pkscan::output {
namespace {

using test::ScratchDir;

struct Closer {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Closer() {
    if (id >= 0) close(id);
  }
};

// Two subjects with text IDs and a text and a numeric column; three observation records.
constexpr const char* kDesign =
    "ID,TIME,AMT,CMT,EVID,DV,WT,SITE\n"
    "a1,0,100,1,1,.,70,north\n"
    "a1,1,.,2,0,1,70,north\n"
    "a1,2,.,2,0,1,71.5,north\n"
    "b2,0,100,1,1,.,80,south\n"
    "b2,1,.,2,0,1,80,south\n";

// The index of cl among the model's parameters.
int cl_index() {
  const auto& p = model_info(ModelKind::ThreeCompartment).parameters;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i].name == "cl") return static_cast<int>(i);
  ADD_FAILURE() << "three_compartment has no cl";
  return 0;
}

struct Fixture {
  std::shared_ptr<const ModelInfo> model =
      std::make_shared<ModelInfo>(model_info(ModelKind::ThreeCompartment));
  std::shared_ptr<const Dataset> data =
      std::make_shared<Dataset>(parse_dataset(kDesign, "design.csv", *model));
  DesignLayout layout() const {
    DesignLayout l;
    l.model = model;
    l.data = data;
    l.replicates = 2;
    l.observations = true;
    l.blq = true;
    l.parameter_table = {cl_index()};
    l.eta_columns = {"eta_cl"};
    return l;
  }
};

// One replicate's rows: subject/record of the three observations, values made from r.
struct Replicate {
  DatasetResult result;
  std::vector<double> dv;
  std::vector<std::int8_t> blq;
  std::vector<std::int64_t> table_subject = {0, 1};
  std::vector<double> table_parameters;
  std::vector<double> table_etas;
  DesignChunk chunk;
  explicit Replicate(std::int64_t r) {
    result.compartments = 3;
    result.subject = {0, 0, 1};
    result.record = {1, 2, 1};
    result.time = {1, 2, 1};
    for (int i = 0; i < 9; ++i) {
      result.amounts.push_back(10.0 * r + i + 0.125);
      result.concentrations.push_back(r + i / 3.0);
    }
    result.prediction = {r + 0.5, r + 1.5, r + 2.5};
    dv = {r + 0.25, r + 1.25, -1.0};
    blq = {0, 0, 1};
    const std::size_t np = model_info(ModelKind::ThreeCompartment).parameters.size();
    table_parameters.assign(2 * np, 0.0);
    const auto cl = static_cast<std::size_t>(cl_index());
    table_parameters[cl] = 5.0 + r;
    table_parameters[np + cl] = 6.0 + r;
    table_etas = {0.1 * r, -0.1 * r};
    chunk.replicate = r;
    chunk.result = &result;
    chunk.dv = dv.data();
    chunk.blq = blq.data();
    chunk.table_rows = 2;
    chunk.table_subject = table_subject.data();
    chunk.table_parameters = table_parameters.data();
    chunk.table_etas = table_etas.data();
  }
};

std::vector<double> read_doubles(hid_t file, const char* name) {
  Closer d{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  EXPECT_GE(d.id, 0) << name;
  Closer s{H5Dget_space(d.id), H5Sclose};
  std::vector<double> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s.id)));
  EXPECT_GE(H5Dread(d.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0) << name;
  return v;
}

std::vector<std::string> read_strings(hid_t file, const char* name) {
  Closer d{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  Closer s{H5Dget_space(d.id), H5Sclose};
  Closer t{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(t.id, H5T_VARIABLE);
  H5Tset_cset(t.id, H5T_CSET_UTF8);
  std::vector<char*> p(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s.id)));
  EXPECT_GE(H5Dread(d.id, t.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), 0) << name;
  std::vector<std::string> v(p.begin(), p.end());
  H5Dvlen_reclaim(t.id, s.id, H5P_DEFAULT, p.data());
  return v;
}

TEST(DesignSinkH5, WritesEveryColumnAndTheParameterTable) {
  ScratchDir dir;
  const Fixture f;
  const std::string path = dir.file("sim.h5");
  auto sink = make_design_sink(path, f.layout(), {"run.yaml", "model: x\n"});
  const Replicate r0(0), r1(1);
  sink->write(r0.chunk);
  sink->write(r1.chunk);
  sink->commit();
  EXPECT_EQ(dir.names(), std::vector<std::string>{"sim.h5"});

  Closer file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(file.id, 0);
  EXPECT_EQ(read_strings(file.id, "id"),
            (std::vector<std::string>{"a1", "a1", "b2", "a1", "a1", "b2"}));
  EXPECT_EQ(read_doubles(file.id, "replicate"), (std::vector<double>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(read_doubles(file.id, "time"), (std::vector<double>{1, 2, 1, 1, 2, 1}));
  // amount_central is the second of each row's three amounts.
  EXPECT_EQ(read_doubles(file.id, "amount_central"),
            (std::vector<double>{1.125, 4.125, 7.125, 11.125, 14.125, 17.125}));
  EXPECT_EQ(read_doubles(file.id, "conc_depot"), (std::vector<double>{0, 1, 2, 1, 2, 3}));
  EXPECT_EQ(read_doubles(file.id, "ipred"), (std::vector<double>{0.5, 1.5, 2.5, 1.5, 2.5, 3.5}));
  EXPECT_EQ(read_doubles(file.id, "dv"), (std::vector<double>{0.25, 1.25, -1, 1.25, 2.25, -1}));
  EXPECT_EQ(read_doubles(file.id, "blq"), (std::vector<double>{0, 0, 1, 0, 0, 1}));
  EXPECT_EQ(read_doubles(file.id, "covariates/WT"),
            (std::vector<double>{70, 71.5, 80, 70, 71.5, 80}));
  EXPECT_EQ(read_strings(file.id, "covariates/SITE"),
            (std::vector<std::string>{"north", "north", "south", "north", "north", "south"}));
  EXPECT_EQ(read_strings(file.id, "parameters/id"),
            (std::vector<std::string>{"a1", "b2", "a1", "b2"}));
  EXPECT_EQ(read_doubles(file.id, "parameters/replicate"), (std::vector<double>{1, 1, 2, 2}));
  EXPECT_EQ(read_doubles(file.id, "parameters/cl"), (std::vector<double>{5, 6, 6, 7}));
  EXPECT_EQ(read_doubles(file.id, "parameters/eta_cl"), (std::vector<double>{0, -0, 0.1, -0.1}));
  // Stored types: ints where documented.
  Closer blq{H5Dopen2(file.id, "blq", H5P_DEFAULT), H5Dclose};
  Closer blq_type{H5Dget_type(blq.id), H5Tclose};
  EXPECT_EQ(H5Tget_class(blq_type.id), H5T_INTEGER);
  EXPECT_EQ(H5Tget_size(blq_type.id), 1u);
}

TEST(DesignSinkH5, LeavesNothingWithoutCommitAndTakesReplicatesInOrder) {
  ScratchDir dir;
  const Fixture f;
  const Replicate r0(0), r1(1);
  {
    auto sink = make_design_sink(dir.file("sim.h5"), f.layout());
    EXPECT_THROW(sink->write(r1.chunk), InvalidArgument);
    sink->write(r0.chunk);
    EXPECT_THROW(sink->commit(), InvalidArgument);  // one of two replicates
  }
  EXPECT_TRUE(dir.names().empty());
}

TEST(DesignSinkH5, RefusesColumnsHdf5CannotNameAndOtherExtensionsBeforeAnyFile) {
  ScratchDir dir;
  Fixture f;
  f.data = std::make_shared<Dataset>(parse_dataset(
      "ID,TIME,AMT,CMT,EVID,W/T\n1,0,100,1,1,7\n1,1,.,2,0,7\n", "design.csv", *f.model));
  EXPECT_THROW(make_design_sink(dir.file("sim.h5"), f.layout()), InvalidArgument);
  EXPECT_THROW(make_design_sink(dir.file("sim.txt"), Fixture().layout()), InvalidArgument);
  EXPECT_TRUE(dir.names().empty());
}

}  // namespace
}  // namespace pkscan::output
