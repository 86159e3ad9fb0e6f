// The public API: parameter batches, validation messages, result layout, dispatch.
#include <gtest/gtest.h>

#include <pkscan/checks.hpp>
#include <pkscan/pkscan.hpp>
#include <string>

namespace pkscan {
namespace {

Problem small_problem() {
  Problem p;
  p.grid = {0.5, 10};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 2);
  p.parameters.set_all("k01", 1.0);  // alias of ka
  p.parameters.set_all("k12", 0.2);
  p.parameters.set_all("k21", 0.1);
  p.parameters.set_all("u", 0.3);  // alias of ke
  p.parameters.set_all("v_central", 5.0);
  p.parameters.set_all("v_peripheral", 8.0);
  DoseEvent d;
  d.amount = 10.0;
  p.doses = {d};
  return p;
}

template <class E>
std::string message_of(const Problem& p, const SimulateOptions& o = {}) {
  try {
    simulate(p, o);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no exception";
}

TEST(Api, DefaultsAndAliases) {
  const ModelInfo& m = model_info(ModelKind::ThreeCompartment);
  EXPECT_EQ(m.compartments, (std::vector<std::string>{"depot", "central", "peripheral"}));
  EXPECT_EQ(parameter_index(m, "k01"), parameter_index(m, "ka"));
  EXPECT_EQ(parameter_index(m, "u"), parameter_index(m, "ke"));
  EXPECT_EQ(parameter_index(m, "nope"), -1);
  const ParameterBatch b(ModelKind::ThreeCompartment, 1);
  EXPECT_EQ(b.get(0, parameter_index(m, "v_depot")), 1.0);  // v_depot defaults to 1
  EXPECT_TRUE(std::isnan(b.get(0, parameter_index(m, "v_central"))));
  EXPECT_EQ(model_from_string("three_compartment"), ModelKind::ThreeCompartment);
  EXPECT_THROW(model_from_string("four"), InvalidArgument);
}

TEST(Api, ResultShapeAndDeferredVolumes) {
  const SimulationResult r = simulate(small_problem());
  EXPECT_EQ(r.subjects(), 2);
  EXPECT_EQ(r.times(), 11);
  EXPECT_EQ(r.compartments(), 3);
  ASSERT_EQ(r.amounts_f64().size(), 2u * 11u * 3u);
  ASSERT_EQ(r.concentrations_f64().size(), 2u * 11u * 3u);
  EXPECT_EQ(r.amount(1, 0, 0), 10.0);
  EXPECT_EQ(r.concentration(1, 4, 1), r.amount(1, 4, 1) / 5.0);
  EXPECT_EQ(r.concentration(1, 4, 2), r.amount(1, 4, 2) / 8.0);
  EXPECT_EQ(r.summary().non_finite_subjects, 0);
  EXPECT_NE(r.summary().method, Method::Auto);
  EXPECT_NE(r.summary().device, Device::Auto);
}

TEST(Api, ValidationMessagesNameTheSubjectTheValueAndTheRule) {
  Problem p = small_problem();
  p.parameters.set("ke", 1, -0.5);
  const std::string msg = message_of<DomainError>(p);
  EXPECT_NE(msg.find("subject 2 parameter ke is -0.5, but must be finite and >= 0"),
            std::string::npos)
      << msg;

  p = small_problem();
  p.parameters.set("v_central", 0, 0.0);
  EXPECT_NE(message_of<DomainError>(p).find("v_central is 0, but must be finite and > 0"),
            std::string::npos);

  p = small_problem();
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);
  EXPECT_NE(message_of<DomainError>(p).find("parameter ka is missing"), std::string::npos);

  p = small_problem();
  p.doses[0].time = 0.3;
  EXPECT_NE(message_of<DomainError>(p).find("on the time grid"), std::string::npos);

  p = small_problem();
  p.doses[0].compartment = 3;
  EXPECT_NE(message_of<InvalidArgument>(p).find("dose 1 compartment is 3"), std::string::npos);

  p = small_problem();
  p.grid.dt = 0.0;
  EXPECT_NE(message_of<DomainError>(p).find("time.dt is 0"), std::string::npos);

  p = small_problem();
  p.output = OutputTimes::at_steps({3, 2});
  EXPECT_NE(
      message_of<InvalidArgument>(p).find("greater than the one before (output times increase)"),
      std::string::npos);

  p = small_problem();
  p.discretization = Discretization::Euler;
  p.grid.dt = 5.0;
  EXPECT_NE(message_of<DomainError>(p).find("euler"), std::string::npos);

  SimulateOptions o;
  o.max_result_bytes = 100;
  EXPECT_NE(message_of<DomainError>(small_problem(), o).find("result size"), std::string::npos);
}

TEST(Api, FirstEulerViolationNamesTheSubjectAndCompartment) {
  ParameterBatch b(ModelKind::ThreeCompartment, 2);
  b.set("ka", 0, 0.1);
  b.set("ka", 1, 1.5);
  for (const char* name : {"k12", "k21", "ke", "v_central", "v_peripheral"})
    b.set_all(name, std::string(name).rfind("v_", 0) == 0 ? 10.0 : 0.2);
  EXPECT_FALSE(first_euler_violation(b, 0.5));
  const EulerViolation v = first_euler_violation(b, 2.0);  // K[depot][depot] = 1 - 1.5 * 2
  ASSERT_TRUE(v);
  EXPECT_EQ(v.subject, 1);
  EXPECT_EQ(v.compartment, 0);
  EXPECT_EQ(v.k, -2.0);
}

// A large batch is searched in parallel: still the first violating subject, whichever thread
// finds the later ones first.
TEST(Api, FirstEulerViolationOfALargeBatchIsTheFirstSubject) {
  const std::int64_t n = 100'000;
  ParameterBatch b(ModelKind::ThreeCompartment, n);
  for (const char* name : {"k12", "k21", "ke", "v_central", "v_peripheral"})
    b.set_all(name, std::string(name).rfind("v_", 0) == 0 ? 10.0 : 0.2);
  b.set_all("ka", 0.1);
  EXPECT_FALSE(first_euler_violation(b, 2.0));
  for (std::int64_t s : {n - 1, std::int64_t{99'000}, std::int64_t{61'234}, std::int64_t{70'000}})
    b.set("ka", s, 1.5);
  b.set("k12", 80'000, 0.9);  // K[central][central] = 1 - (0.2 + 0.9) * 2, a later subject
  const EulerViolation v = first_euler_violation(b, 2.0);
  ASSERT_TRUE(v);
  EXPECT_EQ(v.subject, 61'234);
  EXPECT_EQ(v.compartment, 0);
  EXPECT_EQ(v.k, -2.0);
}

TEST(Api, ParameterBatchRejectsUnknownNamesAndIndices) {
  ParameterBatch b(ModelKind::ThreeCompartment, 2);
  EXPECT_THROW(b.set("clearance", 0, 1.0), InvalidArgument);
  EXPECT_THROW(b.set("ka", 2, 1.0), InvalidArgument);
  EXPECT_THROW(b.set_all("x", 1.0), InvalidArgument);
}

TEST(Api, UnavailableDeviceThrowsBackendUnavailable) {
  std::string why;
  if (is_backend_available(Method::Batched, Device::Cuda, &why))
    GTEST_SKIP() << "a CUDA device is present";
  SimulateOptions o;
  o.device = Device::Cuda;
  o.method = Method::Batched;
  const std::string msg = message_of<BackendUnavailable>(small_problem(), o);
  EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
}

TEST(Api, NamesRoundTrip) {
  for (Method m : {Method::Auto, Method::Scan, Method::Batched, Method::Power})
    EXPECT_EQ(method_from_string(to_string(m)), m);
  for (Device d : {Device::Auto, Device::Cpu, Device::Cuda})
    EXPECT_EQ(device_from_string(to_string(d)), d);
  EXPECT_THROW(method_from_string("fast"), InvalidArgument);
  EXPECT_THROW(device_from_string("gpu"), InvalidArgument);
  for (Precision p : {Precision::Float64, Precision::Float32})
    EXPECT_EQ(precision_from_string(to_string(p)), p);
  for (Discretization d : {Discretization::Exact, Discretization::Euler})
    EXPECT_EQ(discretization_from_string(to_string(d)), d);
  EXPECT_EQ(to_string(Precision::Float32), "float32");
  EXPECT_EQ(to_string(Discretization::Euler), "euler");
}

// One message shape for every name: the value and the accepted names ("a or b" for two).
TEST(Api, UnknownNamesSayWhatIsAccepted) {
  auto message = [](auto parse, const char* name) {
    try {
      parse(name);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message(precision_from_string, "float16"),
            "precision is \"float16\", but must be float64 or float32");
  EXPECT_EQ(message(discretization_from_string, "rk4"),
            "discretization is \"rk4\", but must be exact or euler");
  EXPECT_EQ(message(method_from_string, "fast"),
            "method is \"fast\", but must be one of auto, scan, batched, power");
  EXPECT_EQ(message(device_from_string, "gpu"),
            "device is \"gpu\", but must be one of auto, cpu, cuda");
}

}  // namespace
}  // namespace pkscan

namespace pkscan {
namespace {

TEST(Api, BioavailabilityAndLagOnAGridAreRejectedNotIgnored) {
  Problem p = small_problem();
  p.parameters.set("f_depot", 1, 0.5);
  try {
    simulate(p);
    ADD_FAILURE() << "no exception";
  } catch (const DomainError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("subject 2 parameter f_depot is 0.5"), std::string::npos) << m;
    EXPECT_NE(m.find("subjects.dataset"), std::string::npos) << m;
  }
  p = small_problem();
  p.parameters.set_all("lag_central", 0.25);
  EXPECT_THROW(simulate(p), DomainError);
}

}  // namespace
}  // namespace pkscan
