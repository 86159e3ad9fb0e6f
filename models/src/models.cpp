// Built-in model registry: an enum and a switch, no string-keyed registry of code.
#include <cmath>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/models/model_kind.hpp>
#include <pkscan/models/three_cpt.hpp>

namespace pkscan {

namespace {
constexpr double kRequired = std::numeric_limits<double>::quiet_NaN();

ModelInfo make_three_compartment() {
  ModelInfo m;
  m.kind = ModelKind::ThreeCompartment;
  m.name = "three_compartment";
  m.compartments = {"depot", "central", "peripheral"};
  m.parameters = {
      {"ka", "k01", ParameterRole::Rate, kRequired},
      {"k12", "", ParameterRole::Rate, kRequired},
      {"k21", "", ParameterRole::Rate, kRequired},
      {"ke", "u", ParameterRole::Rate, kRequired},
      {"v_depot", "", ParameterRole::Volume, 1.0},
      {"v_central", "", ParameterRole::Volume, kRequired},
      {"v_peripheral", "", ParameterRole::Volume, kRequired},
  };
  m.volume_parameter = {kThreeCptVDepot, kThreeCptVCentral, kThreeCptVPeripheral};
  return m;
}
}  // namespace

const ModelInfo& model_info(ModelKind kind) noexcept {
  static const ModelInfo three = make_three_compartment();
  switch (kind) {
    case ModelKind::ThreeCompartment:
      return three;
  }
  return three;
}

std::string to_string(ModelKind kind) { return model_info(kind).name; }

std::string model_names() { return "three_compartment"; }

ModelKind model_from_string(std::string_view name) {
  if (name == "three_compartment") return ModelKind::ThreeCompartment;
  throw InvalidArgument("model is \"" + std::string(name) + "\", but must be one of " +
                        model_names());
}

int parameter_index(const ModelInfo& model, std::string_view name) noexcept {
  for (std::size_t i = 0; i < model.parameters.size(); ++i) {
    const ParameterInfo& p = model.parameters[i];
    if (p.name == name || (!p.alias.empty() && p.alias == name)) return static_cast<int>(i);
  }
  return -1;
}

int compartment_index(const ModelInfo& model, std::string_view name) noexcept {
  for (std::size_t i = 0; i < model.compartments.size(); ++i) {
    if (model.compartments[i] == name) return static_cast<int>(i);
  }
  return -1;
}

void rate_matrix(ModelKind kind, const double* p, double* a) noexcept {
  switch (kind) {
    case ModelKind::ThreeCompartment: {
      const Eigen::Matrix3d m = three_compartment_rate_matrix(p[kThreeCptKa], p[kThreeCptK12],
                                                              p[kThreeCptK21], p[kThreeCptKe]);
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) a[r * 3 + c] = m(r, c);
      return;
    }
  }
}

}  // namespace pkscan
